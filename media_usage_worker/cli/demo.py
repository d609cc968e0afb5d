"""``demo``: the whole pipeline on SQLite with a server-less broker."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict
from pathlib import Path

import click

from media_usage_worker.cli.common import Outcome, handle_errors


@click.command("demo")
@click.option("--entries", type=click.IntRange(1, 1_000_000), default=3000, show_default=True)
@click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option(
    "--directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the database, broker files and logs go (must be empty; default: a new "
    "temporary directory, kept for inspection).",
)
@click.option("--timeout", type=click.FloatRange(1), default=600.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@handle_errors
def demo_command(
    entries: int, workers: int, directory: Path | None, timeout: float, as_json: bool
) -> None:
    """Run worker + beat on SQLite with a server-less broker over sample content."""
    import tempfile

    from media_usage_worker.demo import run_demo

    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="media-usage-demo-"))
    elif directory.exists() and any(directory.iterdir()):
        raise click.UsageError(f"--directory {directory} is not empty.")
    echo = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    echo(f"media-usage demo: {entries} entries, {workers} worker processes, in {directory}")
    summary = run_demo(directory, entries, workers=workers, timeout=timeout, echo=echo)
    environment = summary.environment()
    if as_json:
        shown = {**asdict(summary), "directory": str(summary.directory)}
        click.echo(json.dumps({**shown, "environment": environment}))
    else:
        rate = summary.items_per_second
        lines = [
            ("entries written", summary.entries_written),
            ("entries indexed", summary.entries_indexed),
            ("references found", summary.references),
            *((f"coverage of {slug}", c) for slug, c in summary.coverage.items()),
            # Rows beyond content: settings keys, users, bylines, the declared menu table.
            ("settings, avatar and menu rows indexed", summary.source_rows_indexed),
            *((f"coverage of {kind}", c) for kind, c in summary.sources.items()),
            ("items/s", rate if rate is not None else "not measured: the run did not finish"),
            ("elapsed", f"{summary.elapsed_seconds} s"),
            ("database", summary.directory / "demo.db"),
        ]
        width = max(len(label) for label, _ in lines) + 2
        for label, value in lines:
            click.echo(f"{label:<{width}}{value}")
        click.echo(f"\nTo look at it in a browser: scripts/console {summary.directory / 'demo.db'}")
        click.echo("\nTo use the CLI, a worker or beat on this demo, set in your shell:")
        for name, value in environment.items():
            click.echo(f"  export {name}={shlex.quote(value)}")
    if not summary.finished:
        raise Outcome(
            f"the pipeline did not finish within {timeout:g} s ({summary.work_left} items "
            f"left); see {summary.directory}/worker.log"
        )
