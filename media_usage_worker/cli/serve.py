"""``serve``: the HTTP API (docs/api.md) on uvicorn."""

from __future__ import annotations

import os
import socket
from typing import Any

import click

from media_usage_worker.cli.common import BadInput, Outcome, database_url_option, handle_errors

# More processes than this only share the same cores and multiply the database's connections.
MAX_WORKERS = 32


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option("--access-log", is_flag=True, help="Log one line per request.")
@click.option(
    "--workers",
    type=click.IntRange(1, MAX_WORKERS),
    default=None,
    help="Server processes sharing the port (default: one per core this process may use).",
)
@database_url_option
@handle_errors
def serve_command(
    host: str, port: int, access_log: bool, workers: int | None, database_url: str
) -> None:
    """Serve the HTTP API: usage, status, the operator's work queue, probes and /metrics.

    Operator endpoints need MEDIA_USAGE_API_TOKEN (a bearer token); so do read endpoints
    unless MEDIA_USAGE_API_PUBLIC_READS=1. Runs until interrupted.
    """
    try:
        import uvicorn
        from uvicorn.supervisors import Multiprocess

        from media_usage_worker.http.app import create_app
        from media_usage_worker.http.slow_clients import protocol_with
    except ImportError as exc:  # the [api] extra is not installed
        raise BadInput(
            f"serve needs the api extra ({exc.name} is missing): from a clone, "
            "pip install -e '.[api]'"
        ) from None
    from media_usage_worker.http import serving
    from media_usage_worker.http.settings import ApiSettings
    from media_usage_worker.pipeline.database import create_engine, refuse_missing_sqlite_file

    settings = ApiSettings.from_env()
    # As every command but db upgrade: a SQLite path with no file is refused, not created.
    # A database still to migrate is served: /readyz says so until db upgrade has run.
    url = refuse_missing_sqlite_file(database_url)
    processes = workers or default_workers()
    listening = _listen(host, port)
    if settings.token is None:
        how = "" if settings.public_reads else " (and read endpoints and /metrics)"
        click.echo(
            f"media-usage serve: warning: MEDIA_USAGE_API_TOKEN is not set, so operator "
            f"endpoints{how} answer 403; set it to enable them.",
            err=True,
        )
    bound = listening.getsockname()
    shown = f"http://{_shown(bound[0])}:{bound[1]}/"
    click.echo(f"media-usage serve: listening on {shown} ({_processes(processes)})", err=True)
    if processes == 1:
        app = create_app(create_engine(url), settings)
        protocol = protocol_with(settings.header_timeout_seconds)
        uvicorn.Server(_config(app, protocol, access_log)).run(sockets=[listening])
        return
    # Each process is a fresh interpreter that builds its own app and engine from the
    # environment checked above; uvicorn's supervisor replaces one that dies and stops all on
    # SIGINT or SIGTERM.
    os.environ[serving.DATABASE_URL_ENV] = url.render_as_string(hide_password=False)
    config = _config(serving.APP, serving.PROTOCOL, access_log, workers=processes)
    Multiprocess(config, sockets=[listening]).run()


def _config(app: Any, http: Any, access_log: bool, *, workers: int = 1) -> Any:
    import uvicorn

    return uvicorn.Config(
        app,
        factory=isinstance(app, str),
        http=http,
        workers=workers,
        log_level="info",
        # One line per request costs a tenth of a request's time at hundreds a second, and a
        # reverse proxy in front logs them anyway; --access-log turns it on.
        access_log=access_log,
        server_header=False,
        proxy_headers=False,
    )


def default_workers() -> int:
    """One server process per core this process may run on (its CPU affinity), at most
    ``MAX_WORKERS``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def _processes(count: int) -> str:
    return "1 process" if count == 1 else f"{count} processes"


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so a port in use is one line and exit 1, before the
    server logs a word (uvicorn reports it in several lines and exits 3)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise BadInput(
            f"--host {host!r} is not an address to listen on ({exc.strerror})."
        ) from None
    listening = socket.socket(family, kind, proto)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind(address)
    except OSError as exc:
        listening.close()
        raise Outcome(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    listening.listen(2048)
    return listening


def _shown(host: str) -> str:
    """A host as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host
