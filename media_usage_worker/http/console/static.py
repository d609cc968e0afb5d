"""The console's stylesheet and script, served from the package (vendored: no CDN, so the
console works on a closed network)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

DIRECTORY = Path(__file__).with_name("static")


def mount_static(app: FastAPI) -> None:
    app.mount("/console/static", StaticFiles(directory=DIRECTORY), name="console-static")
