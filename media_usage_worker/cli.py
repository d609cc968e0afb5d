"""``media-usage``: the operator command line.

Exit codes: 0 success; 1 an outcome that is not success (refused, not found, conflict, database
unreachable); 2 bad usage. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import click
import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import InvalidArgument, MediaUsageError
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.vocabulary import ErrorCode, RetryOutcome

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


@contextmanager
def open_engine(
    database_url: str, *, create: bool = False, migrated: bool = True
) -> Iterator[sa.Engine]:
    """The engine for one command, disposed however the command ends.

    Only ``create`` (``db upgrade``) may bring a SQLite file into being: any other command on a
    path with no file says so instead of leaving an empty database behind. With ``migrated``
    a database without this code's schema is refused with the command that fixes it, before
    any statement could fail on a missing table.
    """
    from repository.db import create_engine, parse_database_url
    from repository.migrate import schema_problem

    url = parse_database_url(database_url)
    if url.get_backend_name() == "sqlite" and not create:
        path = Path(url.database or "")
        if not path.is_file():
            raise Outcome(f"no database at {path}: run media-usage db upgrade to create it")
    engine = create_engine(url)
    try:
        problem = schema_problem(engine) if migrated else None
        if problem is not None:
            raise Outcome(problem)
        yield engine
    finally:
        engine.dispose()


@click.group()
@click.version_option(package_name="media-usage-worker", prog_name="media-usage")
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

    with open_engine(database_url, create=True, migrated=False) as engine:
        upgrade(engine)
        click.echo(f"database at revision {current_revision(engine)}")


@db.command("downgrade")
@database_url_option
@click.option("--revision", default="base", show_default=True)
@handle_errors
def db_downgrade(database_url: str, revision: str) -> None:
    """Revert migrations; refused while media usage state exists."""
    from repository.migrate import check_revision, current_revision, downgrade

    check_revision(revision)
    with open_engine(database_url, migrated=False) as engine:
        downgrade(engine, revision)
        click.echo(f"database at revision {current_revision(engine) or 'base'}")


@main.command("activate")
@database_url_option
@handle_errors
def activate_command(database_url: str) -> None:
    """Install capture triggers on every collection and turn incremental capture on.

    Content written before activation is picked up by reconciliation. Running it again
    re-verifies every collection's triggers and changes nothing else.
    """
    from repository.activation import activate

    with open_engine(database_url) as engine:
        slugs = activate(engine)
    click.echo(f"capture active on {len(slugs)} collection(s): {', '.join(slugs) or '-'}")


@main.command("deactivate")
@click.confirmation_option(
    prompt="Drop every capture trigger and delete all queued media usage work?",
    help="Do not ask for confirmation.",
)
@database_url_option
@handle_errors
def deactivate_command(database_url: str) -> None:
    """Turn capture off: drop every capture trigger and delete queued work and reconciliations.

    Host writes are then neither captured nor refused, and no coverage is trusted. The index
    stays; `activate` turns capture on again and reconciles everything. Needed before
    `db downgrade` (docs/operations.md, "Deactivating and uninstalling").
    """
    from repository.activation import deactivate

    with open_engine(database_url) as engine:
        slugs = deactivate(engine)
    click.echo(f"capture off on {len(slugs)} collection(s): {', '.join(slugs) or '-'}")


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
    from repository.collections import CollectionRegistry

    validate_collection_slug(slug)
    definitions = [_parse_field(spec) for spec in field_specs]
    if fields_json:
        definitions += _parse_fields_json(fields_json)
    validate_fields(definitions)
    with open_engine(database_url) as engine:
        collection = CollectionRegistry(engine).create_collection(
            slug, label or slug.replace("_", " ").title(), definitions
        )
        click.echo(f"created collection {collection.slug} ({collection.id})")


@collections.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def collections_list(as_json: bool, database_url: str) -> None:
    """List collections."""
    from repository.collections import CollectionRegistry

    with open_engine(database_url) as engine:
        registry = CollectionRegistry(engine)
        rows: list[dict[str, Any]] = [
            {
                "id": c.id,
                "slug": c.slug,
                "label": c.label,
                "fields": [{"slug": f.slug, "type": f.type} for f in registry.fields(c.id)],
            }
            for c in registry.list()
        ]
    if as_json:
        click.echo(json.dumps({"collections": rows}, indent=2))
        return
    _table(
        ["SLUG", "ID", "FIELDS"],
        [
            [row["slug"], row["id"], ", ".join(f"{f['slug']}:{f['type']}" for f in row["fields"])]
            for row in rows
        ],
    )


@main.command("repair")
@click.option("--collection", "slug", required=True, help="Collection slug to rescan.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@database_url_option
@handle_errors
def repair_command(slug: str, as_json: bool, database_url: str) -> None:
    """Rescan a collection now, at its current epoch, and finalise its coverage.

    Exits 1 when the result is not complete (a write raced the repair, or entries failed).
    """
    from media_usage_worker.domain.content_model import validate_collection_slug
    from media_usage_worker.pipeline.repair import repair_collection

    validate_collection_slug(slug)
    bar = click.progressbar(length=1, label=f"repairing {slug}", file=sys.stderr)
    with open_engine(database_url) as engine, bar:

        def progress(done: int, total: int) -> None:
            bar.length = max(total, 1)
            bar.update(done - bar.pos)

        # The worker's per-item limits: an entry it would fail for its size fails here too.
        result = repair_collection(engine, slug, limits=Limits.from_env(), progress=progress)
    payload = {
        "collection": result.collection_slug,
        "status": result.status,
        "indexed": result.indexed,
        "failed": result.failed,
        "skipped": result.skipped,
        "removed": result.removed,
        "error_code": result.error_code,
    }
    if as_json:
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(
            f"{slug}: {result.status} (indexed {result.indexed}, failed {result.failed}, "
            f"skipped {result.skipped}, removed {result.removed})"
            + (f" [{result.error_code}]" if result.error_code else "")
        )
    if result.status != "complete":
        raise Outcome(f"repair of {slug} ended {result.status}: {result.error_code}")


def _table(headers: list[str], rows: list[list[Any]]) -> None:
    """An aligned plain-text table."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    click.echo("  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(widths[i]) for i, v in enumerate(row)).rstrip())


@main.group()
def work() -> None:
    """The durable work queue."""


@work.command("list")
@click.option("--collection", "slug", required=True, help="Collection slug.")
@click.option("--state", type=click.Choice(["pending", "retry", "leased", "failed"]))
@click.option("--limit", type=click.IntRange(1, 100), default=50, show_default=True)
@click.option("--cursor", default=None, help="next_cursor of the previous page.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def work_list(
    slug: str, state: str | None, limit: int, cursor: str | None, as_json: bool, database_url: str
) -> None:
    """List a collection's work, newest first (lease tokens are never shown)."""
    from dataclasses import asdict

    from media_usage_worker.domain.content_model import validate_collection_slug
    from media_usage_worker.domain.cursor import decode_cursor
    from repository.work import MediaUsageWorkRepository

    validate_collection_slug(slug)
    decode_cursor(cursor)  # reject a bad cursor before connecting
    with open_engine(database_url) as engine:
        page = MediaUsageWorkRepository(engine).find_operator_page(
            collection_slug=slug, state=state, limit=limit, cursor=cursor
        )
    if page is None:
        raise Outcome(f"collection {slug!r} not found")
    if as_json:
        items = [asdict(item) for item in page.items]
        click.echo(
            json.dumps(
                {"collection": slug, "items": items, "next_cursor": page.next_cursor}, indent=2
            )
        )
        return
    _table(
        ["CONTENT", "STATE", "ATTEMPTS", "NEXT ATTEMPT", "LEASE EXPIRES", "ERROR", "UPDATED"],
        [
            [
                i.content_id,
                i.state,
                i.attempt_count,
                i.next_attempt_at,
                i.lease_expires_at,
                i.last_error_code,
                i.updated_at,
            ]
            for i in page.items
        ],
    )
    if page.next_cursor:
        click.echo(f"next page: --cursor {page.next_cursor}")


@work.command("retry")
@click.option("--collection", "slug", help="Collection slug (or give --collection-id).")
@click.option("--collection-id", help="Collection id, as `work list --json` shows it.")
@click.option("--content-id", required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def work_retry(
    slug: str | None,
    collection_id: str | None,
    content_id: str,
    as_json: bool,
    database_url: str,
) -> None:
    """Make an entry's work pending now (failed, retrying or abandoned work, or none at all)."""
    from dataclasses import asdict

    from media_usage_worker.domain.content_model import validate_collection_slug
    from repository.collections import CollectionRegistry
    from repository.work import MediaUsageWorkRepository

    if (slug is None) == (collection_id is None):
        raise click.UsageError("Give exactly one of --collection SLUG and --collection-id ID.")
    if slug is not None:
        validate_collection_slug(slug)
    else:
        _checked_id(collection_id, "--collection-id")
    _checked_id(content_id, "--content-id")
    with open_engine(database_url) as engine:
        if slug is not None:
            collection = CollectionRegistry(engine).get(slug)
            if collection is None:
                raise Outcome(f"collection {slug!r} not found")
            collection_id = collection.id
        assert collection_id is not None
        result = MediaUsageWorkRepository(engine).retry_operator_work(
            collection_id=collection_id, content_id=content_id
        )
    payload = {
        "outcome": result.outcome,
        "changed": result.changed,
        "work": asdict(result.work) if result.work else None,
        "lease_expires_at": result.lease_expires_at,
    }
    if as_json:
        click.echo(json.dumps(payload, indent=2))
    elif result.outcome == "pending":
        click.echo(f"pending ({'reopened' if result.changed else 'already pending'})")
    if result.outcome != "pending":
        raise Outcome(
            _RETRY_REFUSED[result.outcome].format(
                collection=slug or collection_id, until=result.lease_expires_at
            )
        )


# Why ``work retry`` changed nothing, per outcome of ``retry_operator_work``.
_RETRY_REFUSED = {
    RetryOutcome.LEASE_ACTIVE: "a worker holds this item until {until}; retry it if it then fails",
    RetryOutcome.COLLECTION_NOT_FOUND: "collection {collection!r} not found or capture inactive",
    RetryOutcome.CONFLICT: "the item changed while it was being retried; run the command again",
}


def _checked_id(value: object, option: str) -> str:
    """``value`` as an id an option may name, else one usage error saying what is allowed."""
    from media_usage_worker.domain import validation

    return validation.identifier(
        value,
        f"{option} must be a non-empty id of at most {validation.MAX_IDENTIFIER_LENGTH} "
        "characters, without NUL.",
    )


@main.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 when an item failed, coverage is not complete or due work is older than "
    "--max-age (for cron and monitoring).",
)
@click.option(
    "--max-age",
    type=click.IntRange(0, 31_536_000),
    default=300,
    show_default=True,
    help="With --check: the oldest due item may be this many seconds old.",
)
@database_url_option
@handle_errors
def status_command(as_json: bool, check: bool, max_age: int, database_url: str) -> None:
    """Coverage, epoch, work counts, oldest due item and latest failures per collection."""
    from dataclasses import asdict

    from repository.status import overview

    with open_engine(database_url) as engine:
        capture, aggregate, details = overview(engine)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "capture": capture,
                    "coverage": aggregate,
                    "collections": [asdict(d) for d in details],
                },
                indent=2,
            )
        )
    else:
        _print_status(capture, aggregate, details)
    problems = [problem for d in details for problem in _status_problems(d, max_age)]
    if check and problems:
        raise Outcome("; ".join(problems))


def _print_status(capture: str, aggregate: str, details: list[Any]) -> None:
    click.echo(f"capture: {capture}    coverage: {aggregate}")
    _table(
        ["COLLECTION", "COVERAGE", "WHY", "EPOCH", "PENDING", "RETRY", "LEASED", "FAILED",
         "OLDEST DUE (s)"],
        [
            [d.slug, d.coverage, _why(d), d.change_epoch, d.work["pending"], d.work["retry"],
             d.work["leased"], d.work["failed"], d.oldest_due_age_seconds]
            for d in details
        ],
    )  # fmt: skip
    failed = [
        [d.slug, i["content_id"], i["error_code"], i["attempts"], i["updated_at"]]
        for d in details
        for i in d.failed
    ]
    if failed:
        click.echo("")
        _table(["FAILED IN", "CONTENT", "ERROR", "ATTEMPTS", "UPDATED"], failed)


# Why coverage is not complete, as the status row's code says it.
_WHY = {
    ErrorCode.RULES_CHANGED: "extraction rules changed",
    ErrorCode.STALE: "fields or capture changed",
    ErrorCode.REPAIR_CONFLICT: "a write raced the repair",
    ErrorCode.RECONCILIATION_ENTRY_FAILED: "entries failed",
    ErrorCode.RECONCILIATION_FAILED: "reconciliation failed",
}


def _why(detail: Any) -> str | None:
    """What keeps a collection's coverage from ``complete``, in words (``None``: nothing)."""
    if detail.coverage == "complete":
        return None
    if detail.coverage == "never":
        return "not reconciled yet"
    if detail.status == "complete" and detail.rules.get("indexed_under") != detail.rules.get(
        "running"
    ):
        return _WHY[ErrorCode.RULES_CHANGED]  # read under new rules before a tick marked it
    code = detail.last_error_code
    return _WHY.get(code, code) if code else "content written since"


def _status_problems(detail: Any, max_age: int) -> list[str]:
    """What ``status --check`` reports about one collection."""
    problems = []
    if detail.work["failed"]:
        problems.append(f"{detail.slug}: {detail.work['failed']} failed item(s)")
    if detail.coverage != "complete":
        problems.append(f"{detail.slug}: coverage {detail.coverage} ({_why(detail)})")
    age = detail.oldest_due_age_seconds
    if age is not None and age > max_age:
        problems.append(f"{detail.slug}: oldest due item {age:g} s old (over {max_age} s)")
    return problems


@main.command("usage")
@click.argument("media_id")
@click.option("--limit", type=click.IntRange(1, 100), default=50, show_default=True)
@click.option("--cursor", default=None, help="next_cursor of the previous page.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def usage_command(
    media_id: str, limit: int, cursor: str | None, as_json: bool, database_url: str
) -> None:
    """Where a media item is used, with the coverage that says whether "nowhere" is known."""
    from dataclasses import asdict

    from media_usage_worker.domain.cursor import SLUG_ORDER, decode_cursor
    from repository.usage import usage_count, usage_page

    _checked_id(media_id, "MEDIA_ID")
    decode_cursor(cursor, SLUG_ORDER)
    with open_engine(database_url) as engine:
        page = usage_page(engine, media_id, limit=limit, cursor=cursor)
        coverage, count = usage_count(engine, media_id)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "media_id": media_id,
                    "in_library": page.in_library,
                    "count": count,
                    "coverage": {
                        "scope": "all_content_collections",
                        "status": coverage.status,
                        # Per collection: its status and the extraction rules it was indexed
                        # under (docs/operations.md, "Extraction rules").
                        "collections": [
                            {"slug": s.collection_slug, "status": s.status, "rules": s.rules}
                            for s in coverage.scopes
                        ],
                    },
                    "entries": [asdict(e) for e in page.entries],
                    "next_cursor": page.next_cursor,
                },
                indent=2,
            )
        )
        return
    known = "unknown (coverage not complete)" if count is None else str(count)
    library = "" if page.in_library else " (no media library item has this id)"
    click.echo(
        f"media {media_id}{library}: used by {known} live entries; coverage {coverage.status}"
    )
    _table(
        ["COLLECTION", "CONTENT", "TITLE", "STATUS", "TRASHED", "VARIANTS", "FIELDS"],
        [
            [
                e.collection,
                e.content_id,
                e.title,
                e.status,
                e.deleted_at,
                ", ".join(source["variant"] for source in e.sources),
                # A path both variants reference is one place in the entry: shown once.
                ", ".join(
                    dict.fromkeys(o["field_path"] for s in e.sources for o in s["occurrences"])
                ),
            ]
            for e in page.entries
        ],
    )
    if page.next_cursor:
        click.echo(f"next page: --cursor {page.next_cursor}")


@main.command("demo")
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
        click.echo(f"items/s              {summary.items_per_second}")
        click.echo(f"elapsed              {summary.elapsed_seconds} s")
        click.echo(f"database             {summary.directory / 'demo.db'}")
    if not summary.finished:
        raise Outcome(
            f"the pipeline did not finish within {timeout:g} s ({summary.work_left} items "
            f"left); see {summary.directory}/worker.log"
        )
