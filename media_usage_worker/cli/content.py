"""``collections create`` and ``collections list``: the content collections (deleting one is
``cli.deletion``)."""

from __future__ import annotations

import json
from typing import Any

import click

from media_usage_worker.cli import deletion
from media_usage_worker.cli.common import (
    database_url_option,
    handle_errors,
    open_engine,
    table,
)
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import InvalidArgument


@click.group()
def collections() -> None:
    """Content collections."""


def _parse_field(spec: str) -> FieldDefinition:
    slug, _, rest = spec.partition(":")
    field_type, _, flag = rest.partition(":")
    if not slug or not field_type or flag not in {"", "required"}:
        raise InvalidArgument(f"--field {spec!r} must be SLUG:TYPE or SLUG:TYPE:required.")
    return FieldDefinition(slug, slug.replace("_", " ").title(), field_type, flag == "required")


def _parse_fields_json(raw: str) -> list[FieldDefinition]:
    try:
        items = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidArgument("--fields-json is not valid JSON (or is nested too deep).") from None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InvalidArgument("--fields-json must be a JSON list of field objects.")
    allowed = {"slug", "label", "type", "required", "validation"}
    result = []
    for item in items:
        if set(item) - allowed or not {"slug", "type"} <= set(item):
            raise InvalidArgument(
                "--fields-json items take slug, type and optionally label, required, validation."
            )
        slug = item["slug"]
        label = item.get("label") or (
            slug.replace("_", " ").title() if isinstance(slug, str) else ""
        )
        result.append(
            FieldDefinition(
                slug, label, item["type"], item.get("required", False), item.get("validation")
            )
        )
    return result


@collections.command("create")
@click.argument("slug")
@click.option("--label", help="Display label (default: the slug, title-cased).")
@click.option("--field", "field_specs", multiple=True, help="SLUG:TYPE[:required]; repeatable.")
@click.option(
    "--fields-json",
    help='JSON list, e.g. [{"slug": "gallery", "type": "repeater", '
    '"validation": {"subFields": [{"slug": "image", "type": "image"}]}}].',
)
@database_url_option
@handle_errors
def collections_create(
    slug: str,
    label: str | None,
    field_specs: tuple[str, ...],
    fields_json: str | None,
    database_url: str,
) -> None:
    """Create a collection, its ec_<slug> table and its status row."""
    from media_usage_worker.domain.content_model import validate_collection_slug, validate_fields
    from media_usage_worker.pipeline.registry import create_collection

    validate_collection_slug(slug)
    definitions = [_parse_field(spec) for spec in field_specs]
    if fields_json:
        definitions += _parse_fields_json(fields_json)
    validate_fields(definitions)
    with open_engine(database_url) as engine:
        collection = create_collection(
            engine, slug, label or slug.replace("_", " ").title(), definitions
        )
        click.echo(f"created collection {collection.slug} ({collection.id})")


@collections.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def collections_list(as_json: bool, database_url: str) -> None:
    """List collections."""
    from media_usage_worker.api import MediaUsage

    with open_engine(database_url) as engine:
        index = MediaUsage(engine)
        rows: list[dict[str, Any]] = [
            {
                "id": c.id,
                "slug": c.slug,
                "label": c.label,
                "fields": [{"slug": f.slug, "type": f.type} for f in index.fields(c.id)],
            }
            for c in index.collections()
        ]
    if as_json:
        click.echo(json.dumps({"collections": rows}, indent=2))
        return
    table(
        ["SLUG", "ID", "FIELDS"],
        [
            [row["slug"], row["id"], ", ".join(f"{f['slug']}:{f['type']}" for f in row["fields"])]
            for row in rows
        ],
    )


for _command in (deletion.collections_delete, deletion.collections_deletions,
                 deletion.collections_retry_deletion):  # fmt: skip
    collections.add_command(_command)
