"""An item's picture from ``MEDIA_USAGE_STORAGE_DIR``: only a raster image the library or the
quarantine names, only a regular file inside that directory (a storage key with ``..`` or a
symlink pointing out of it is refused), served so that no browser runs it as anything else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.responses import FileResponse, Response

from media_usage_worker.http.console.render import THUMBNAIL_TYPES

_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "private, max-age=300",
}


def thumbnail_response(item: Any, directory: Path | None) -> Response:
    if item is None or directory is None or item.mime_type not in THUMBNAIL_TYPES:
        return Response(status_code=404)
    key = item.storage_key
    if not key or "\x00" in key or key.startswith("/"):
        return Response(status_code=404)
    root = directory.resolve()
    path = (root / key).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return Response(status_code=404)
    return FileResponse(path, media_type=item.mime_type, headers=_HEADERS)
