"""``media-usage``: the operator command line.

Exit codes: 0 success; 1 an outcome that is not success (refused, not found, conflict, database
unreachable); 2 bad usage. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import click
import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from domain.content_model import FieldDefinition
from domain.errors import InvalidArgument, MediaUsageError

DEFAULT_DATABASE_URL = "sqlite:///media_usage.db"
F = TypeVar("F", bound=Callable[..., Any])


class Outcome(click.ClickException):
    """A result that is not success: exit code 1, one line on stderr."""

    exit_code = 1


def handle_errors(command: F) -> F:
    """Turn the project's exceptions into click's exit codes and one-line messages."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except InvalidArgument as exc:
            raise click.UsageError(str(exc)) from None
        except MediaUsageError as exc:
            raise Outcome(str(exc)) from None
        except SQLAlchemyError as exc:
            detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise Outcome(f"database error: {detail}") from None

    return wrapper  # type: ignore[return-value]


def database_url_option(command: F) -> F:
    return click.option(
        "--database-url",
        envvar="MEDIA_USAGE_DATABASE_URL",
        default=DEFAULT_DATABASE_URL,
        show_default=True,
        help="SQLAlchemy URL (env MEDIA_USAGE_DATABASE_URL).",
    )(command)


def open_engine(database_url: str) -> sa.Engine:
    from repository.db import create_engine

    return create_engine(database_url)


@click.group()
def main() -> None:
    """Operate the media usage index and its durable work queue."""


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@database_url_option
@handle_errors
def db_upgrade(database_url: str) -> None:
    """Apply every migration (idempotent)."""
    from repository.migrate import current_revision, upgrade

    engine = open_engine(database_url)
    upgrade(engine)
    click.echo(f"database at revision {current_revision(engine)}")
    engine.dispose()


@db.command("downgrade")
@database_url_option
@click.option("--revision", default="base", show_default=True)
@handle_errors
def db_downgrade(database_url: str, revision: str) -> None:
    """Revert migrations; refused while media usage state exists."""
    from repository.migrate import current_revision, downgrade

    engine = open_engine(database_url)
    downgrade(engine, revision)
    click.echo(f"database at revision {current_revision(engine) or 'base'}")
    engine.dispose()


@main.command("activate")
@database_url_option
@handle_errors
def activate_command(database_url: str) -> None:
    """Install capture triggers on every collection and turn incremental capture on.

    Content written before activation is picked up by reconciliation. Running it again
    re-verifies every collection's triggers and changes nothing else.
    """
    from repository.activation import activate

    engine = open_engine(database_url)
    slugs = activate(engine)
    engine.dispose()
    click.echo(f"capture active on {len(slugs)} collection(s): {', '.join(slugs) or '-'}")


@main.group()
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
    except ValueError as exc:
        raise InvalidArgument("--fields-json is not valid JSON.") from exc
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
@click.option("--fields-json", help='JSON list, e.g. [{"slug": "gallery", "type": "repeater", '
              '"validation": {"subFields": [{"slug": "image", "type": "image"}]}}].')  # fmt: skip
@database_url_option
@handle_errors
def collections_create(
    slug: str, label: str | None, field_specs: tuple[str, ...], fields_json: str | None,
    database_url: str,
) -> None:  # fmt: skip
    """Create a collection, its ec_<slug> table and its status row."""
    from domain.content_model import validate_collection_slug, validate_fields
    from repository.collections import CollectionRegistry

    validate_collection_slug(slug)
    definitions = [_parse_field(spec) for spec in field_specs]
    if fields_json:
        definitions += _parse_fields_json(fields_json)
    validate_fields(definitions)
    engine = open_engine(database_url)
    collection = CollectionRegistry(engine).create_collection(
        slug, label or slug.replace("_", " ").title(), definitions
    )
    click.echo(f"created collection {collection.slug} ({collection.id})")
    engine.dispose()


@collections.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def collections_list(as_json: bool, database_url: str) -> None:
    """List collections."""
    from repository.collections import CollectionRegistry

    engine = open_engine(database_url)
    registry = CollectionRegistry(engine)
    rows = [
        {"id": c.id, "slug": c.slug, "label": c.label,
         "fields": [{"slug": f.slug, "type": f.type} for f in registry.fields(c.id)]}
        for c in registry.list()
    ]  # fmt: skip
    engine.dispose()
    if as_json:
        click.echo(json.dumps({"collections": rows}, indent=2))
        return
    for row in rows:
        fields = ", ".join(f"{f['slug']}:{f['type']}" for f in row["fields"])
        click.echo(f"{row['slug']:<24} {row['id']}  {fields}")
