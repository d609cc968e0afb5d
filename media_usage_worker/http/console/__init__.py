"""The operator console (docs/console.md): web pages at ``/console/`` served by ``media-usage
serve``, over the same read API and pipeline as the CLI and the JSON API."""

from media_usage_worker.http.console.pages import console_routes

__all__ = ["console_routes"]
