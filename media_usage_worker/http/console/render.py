"""Templates (Jinja2, autoescaped) and the small formatting the pages share."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import jinja2

from media_usage_worker.domain.timestamps import SORTABLE_FORMAT
from media_usage_worker.http.settings import ApiSettings

NAV = [
    ("/console/", "Overview"),
    ("/console/unused", "Unused"),
    ("/console/quarantine", "Quarantine"),
    ("/console/dangling", "Dangling"),
    ("/console/audit", "Audit"),
]
# Thumbnails are served for these only: an SVG can carry script.
THUMBNAIL_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp", "image/avif"})


class Renderer:
    def __init__(self, settings: ApiSettings) -> None:
        self.settings = settings
        self.environment = jinja2.Environment(
            loader=jinja2.PackageLoader("media_usage_worker.http.console", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )

    def page(self, name: str, **values: Any) -> str:
        values.setdefault("nav", NAV)
        values.setdefault("notice", None)
        values.setdefault("problem", None)
        values.setdefault("on_login", False)
        values.setdefault("next_href", None)
        values.setdefault("next_label", None)
        return self.environment.get_template(name).render(**values)

    def thumbnail_url(self, item: Any) -> str | None:
        """Where the page loads an item's picture: the configured media base URL, else the
        console's own file route over ``MEDIA_USAGE_STORAGE_DIR``; None for other types or
        when neither is set."""
        if item is None or item.mime_type not in THUMBNAIL_TYPES:
            return None
        if self.settings.media_base_url is not None:
            return self.settings.media_base_url + quote(item.storage_key)
        if self.settings.storage_dir is not None:
            return f"/console/media/{quote(item.id, safe='')}/file"
        return None


def shown_bytes(size: int | None) -> str:
    if size is None:
        return "size unknown"
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} bytes"


def shown_age(created_at: str | None, now: datetime | None = None) -> str:
    if not created_at:
        return "age unknown"
    for form in (SORTABLE_FORMAT, "%Y-%m-%d %H:%M:%S"):  # this project's, and SQLite's
        try:
            created = datetime.strptime(created_at, form).replace(tzinfo=UTC)
            break
        except ValueError:
            continue
    else:
        return created_at[:40]
    days = ((now or datetime.now(UTC)) - created).days
    return "today" if days < 1 else f"{days} day(s) old"
