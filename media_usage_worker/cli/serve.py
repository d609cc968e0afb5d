"""``serve``: the HTTP API (docs/api.md) on uvicorn."""

from __future__ import annotations

from pathlib import Path

import click

from media_usage_worker.cli.common import BadInput, Outcome, database_url_option, handle_errors


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@database_url_option
@handle_errors
def serve_command(host: str, port: int, database_url: str) -> None:
    """Serve the HTTP API: usage, status, the operator's work queue, probes and /metrics.

    Operator endpoints need MEDIA_USAGE_API_TOKEN (a bearer token); so do read endpoints
    unless MEDIA_USAGE_API_PUBLIC_READS=1. Runs until interrupted.
    """
    try:
        import uvicorn

        from media_usage_worker.http.app import create_app
    except ImportError as exc:  # the [api] extra is not installed
        raise BadInput(
            f"serve needs the api extra: pip install 'media-usage-worker[api]' ({exc.name})"
        ) from None
    from media_usage_worker.http.settings import ApiSettings
    from media_usage_worker.repository.db import create_engine, parse_database_url

    settings = ApiSettings.from_env()
    url = parse_database_url(database_url)
    # As every command but db upgrade: a SQLite path with no file is refused, not created.
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").is_file():
        raise Outcome(f"no database at {url.database}: run media-usage db upgrade to create it")
    engine = create_engine(url)
    app = create_app(engine, settings)
    uvicorn.run(
        app, host=host, port=port, log_level="info", server_header=False, proxy_headers=False
    )
