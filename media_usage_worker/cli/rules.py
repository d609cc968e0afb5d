"""``rules``: the site's declared extraction rules (docs/operations.md, "Extraction rules").

Each change is validated before the database is opened, stored in one transaction, and takes
the collections it touches out of ``complete`` until the reconciliation has re-indexed them.
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
from media_usage_worker.domain.content_model import validate_collection_slug
from media_usage_worker.domain.reference_paths import (
    parse_reference_path,
    validate_media_url_prefix,
)

_REINDEX = "coverage is stale until the reconciliation has re-indexed"


@click.group()
def rules() -> None:
    """Declared reference paths and media URL prefixes."""


@rules.command("add")
@click.argument("collection")
@click.argument("path")
@database_url_option
@handle_errors
def rules_add(collection: str, path: str, database_url: str) -> None:
    """Declare PATH (e.g. body[_type=marketing.gallery].items[].imageUrl) as holding media."""
    from media_usage_worker.pipeline.registry import declare_reference_path

    validate_collection_slug(collection)
    parsed = parse_reference_path(path)
    with open_engine(database_url) as engine:
        added = declare_reference_path(engine, collection, parsed)
    reconcile_soon()  # the re-index under the new rules starts now
    if added:
        click.echo(f"declared {collection} {parsed.text}: {_REINDEX} {collection}")
    else:
        click.echo(f"{collection} {parsed.text} was already declared: nothing changed")


@rules.command("remove")
@click.argument("collection")
@click.argument("path")
@database_url_option
@handle_errors
def rules_remove(collection: str, path: str, database_url: str) -> None:
    """Remove a declared reference path."""
    from media_usage_worker.pipeline.registry import remove_reference_path

    validate_collection_slug(collection)
    parsed = parse_reference_path(path)
    with open_engine(database_url) as engine:
        remove_reference_path(engine, collection, parsed.text)
    reconcile_soon()  # the re-index under the new rules starts now
    click.echo(f"removed {collection} {parsed.text}: {_REINDEX} {collection}")


@rules.command("add-url-prefix")
@click.argument("prefix")
@database_url_option
@handle_errors
def rules_add_url_prefix(prefix: str, database_url: str) -> None:
    """Declare PREFIX (e.g. https://cdn.example.com/media/) as where media files are served."""
    from media_usage_worker.pipeline.registry import add_media_url_prefix

    validate_media_url_prefix(prefix)
    with open_engine(database_url) as engine:
        added = add_media_url_prefix(engine, prefix)
    reconcile_soon()  # the re-index under the new rules starts now
    if added:
        click.echo(f"declared media URL prefix {prefix}: {_REINDEX} every collection")
    else:
        click.echo(f"media URL prefix {prefix} was already declared: nothing changed")


@rules.command("remove-url-prefix")
@click.argument("prefix")
@database_url_option
@handle_errors
def rules_remove_url_prefix(prefix: str, database_url: str) -> None:
    """Remove a media URL prefix."""
    from media_usage_worker.pipeline.registry import remove_media_url_prefix

    validate_media_url_prefix(prefix)
    with open_engine(database_url) as engine:
        remove_media_url_prefix(engine, prefix)
    reconcile_soon()  # the re-index under the new rules starts now
    click.echo(f"removed media URL prefix {prefix}: {_REINDEX} every collection")


@rules.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def rules_list(as_json: bool, database_url: str) -> None:
    """List the declared rules."""
    from media_usage_worker.api import MediaUsage

    with open_engine(database_url) as engine:
        declared = MediaUsage(engine).declared_rules()
    if as_json:
        paths = [{"collection": c, "path": p} for c, p in declared.reference_paths]
        payload = {"reference_paths": paths, "media_url_prefixes": declared.media_url_prefixes}
        click.echo(json.dumps(payload, indent=2))
        return
    rows = [["path", c, p] for c, p in declared.reference_paths]
    rows += [["url-prefix", "*", p] for p in declared.media_url_prefixes]
    table(["KIND", "COLLECTION", "RULE"], rows)
