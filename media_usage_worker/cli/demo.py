"""``demo``: the whole pipeline on SQLite with a server-less broker."""

from __future__ import annotations

import json
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
    if as_json:
        click.echo(json.dumps({**asdict(summary), "directory": str(summary.directory)}))
    else:
        click.echo(f"entries written      {summary.entries_written}")
        click.echo(f"entries indexed      {summary.entries_indexed}")
        click.echo(f"references found     {summary.references}")
        for slug, coverage in summary.coverage.items():
            click.echo(f"coverage {slug:<12}{coverage}")
        click.echo(f"site rows indexed    {summary.source_rows_indexed}")
        for kind, coverage in summary.sources.items():
            click.echo(f"coverage {kind:<12}{coverage}")
        rate = summary.items_per_second
        shown = rate if rate is not None else "not measured: the run did not finish"
        click.echo(f"items/s              {shown}")
        click.echo(f"elapsed              {summary.elapsed_seconds} s")
        click.echo(f"database             {summary.directory / 'demo.db'}")
    if not summary.finished:
        raise Outcome(
            f"the pipeline did not finish within {timeout:g} s ({summary.work_left} items "
            f"left); see {summary.directory}/worker.log"
        )
