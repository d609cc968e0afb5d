"""``sources``: where media is used beyond content collections (docs/operations.md, "Sources").

The built-in sources (site settings, user and byline avatars) are always there; ``add``
declares a host table, ``remove`` takes it away with everything of it in the index. Each
argument is validated before the database is opened; the catalog is checked in the same
transaction that stores the source, so a refused source leaves nothing behind.
"""

from __future__ import annotations

import json

import click

from media_usage_worker.cli.common import (
    database_url_option,
    handle_errors,
    open_engine,
    reconcile_soon,
    table,
)
from media_usage_worker.domain.host_sources import (
    HostSource,
    SourceKind,
    checked_identifier,
    checked_kind,
    parse_columns,
)
from media_usage_worker.domain.reference_paths import parse_reference_path


@click.group()
def sources() -> None:
    """Sources of media references beyond content collections."""


@sources.command("add")
@click.argument("table_name", metavar="TABLE")
@click.option(
    "--key",
    "key_column",
    default="id",
    show_default=True,
    help="The table's key column (text; primary key, or unique and NOT NULL).",
)
@click.option(
    "--column",
    "columns",
    multiple=True,
    required=True,
    metavar="NAME=KIND",
    help="A column that holds media: KIND is media_id, json or url. Repeatable.",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    metavar="PATH",
    help="A reference path into a json column (e.g. items[].image). Repeatable.",
)
@database_url_option
@handle_errors
def sources_add(
    table_name: str, key_column: str, columns: tuple[str, ...], paths: tuple[str, ...],
    database_url: str,
) -> None:  # fmt: skip
    """Declare TABLE as a source: each write to it is indexed like a content write, and the
    rows it already has are indexed by a reconciliation."""
    from media_usage_worker.pipeline.capture import declare_source

    source = HostSource(SourceKind.TABLE, table_name, key_column, parse_columns(columns))
    source.validated()
    parsed = [parse_reference_path(path) for path in paths]
    with open_engine(database_url) as engine:
        declare_source(engine, source, parsed)
    reconcile_soon()  # the rows the table already has are indexed from now
    click.echo(
        f"declared {source.label} (key {source.key_column}): coverage is not complete until "
        "the reconciliation has indexed its rows"
    )


@sources.command("remove")
@click.argument("table_name", metavar="TABLE")
@database_url_option
@handle_errors
def sources_remove(table_name: str, database_url: str) -> None:
    """Remove a declared source: its triggers, its work and its rows in the index."""
    from media_usage_worker.pipeline.capture import remove_declared_source

    checked_identifier(table_name, "Table")
    with open_engine(database_url) as engine:
        removed = remove_declared_source(engine, table_name)
    click.echo(f"removed {removed.label}: nothing of it is left in the index")


@sources.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def sources_list(as_json: bool, database_url: str) -> None:
    """List every source beyond content with its coverage."""
    from media_usage_worker.api import MediaUsage

    with open_engine(database_url) as engine:
        listed = MediaUsage(engine).sources()
    if as_json:
        payload = [
            {
                "kind": source.label,
                "table": source.table,
                "key": source.key_column,
                "columns": {name: kind.value for name, kind in source.columns},
                "paths": paths,
                "coverage": coverage,
            }
            for source, coverage, paths in listed
        ]
        click.echo(json.dumps(payload, indent=2))
        return
    rows = [
        [
            source.label,
            source.key_column,
            ", ".join(f"{name}={kind.value}" for name, kind in source.columns),
            ", ".join(paths) or "-",
            coverage or "-",
        ]
        # Sorted by what the first column shows.
        for source, coverage, paths in sorted(listed, key=lambda listed: listed[0].label)
    ]
    table(["KIND", "KEY", "COLUMNS", "PATHS", "COVERAGE"], rows)


@sources.command("reindex")
@click.argument("kind")
@database_url_option
@handle_errors
def sources_reindex(kind: str, database_url: str) -> None:
    """Re-index every row of the source of KIND (settings, user, byline or table:<name>):
    its coverage is stale until the reconciliation has done it."""
    from media_usage_worker.pipeline.registry import request_source_reindex

    checked_kind(kind)
    with open_engine(database_url) as engine:
        request_source_reindex(engine, kind)
    reconcile_soon()
    click.echo(f"re-indexing {kind}: coverage is stale until the reconciliation has done it")
