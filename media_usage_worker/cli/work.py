"""``work list``, ``work retry`` and ``repair``: the operator's hands on the work queue."""

from __future__ import annotations

import json
import os
import sys

import click

from media_usage_worker.cli.common import (
    Outcome,
    checked_id,
    database_url_option,
    handle_errors,
    log_in_one_line,
    open_engine,
    table,
)
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.vocabulary import RetryOutcome


@click.command("repair")
@click.option("--collection", "slug", required=True, help="Collection slug to rescan.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@database_url_option
@handle_errors
def repair_command(slug: str, as_json: bool, database_url: str) -> None:
    """Rescan a collection now, at its current epoch, and finalise its coverage.

    Exits 1 when the result is not complete (a write raced the repair, or entries failed).
    """
    from media_usage_worker.api import MediaUsage
    from media_usage_worker.domain.content_model import validate_collection_slug
    from media_usage_worker.pipeline.repair import repair_collection

    validate_collection_slug(slug)
    log_in_one_line()
    with open_engine(database_url) as engine:
        # Refused before the progress bar says it is repairing anything.
        if MediaUsage(engine).collection(slug) is None:
            raise Outcome(f"collection {slug!r} not found")
        bar = click.progressbar(length=1, label=f"repairing {slug}", file=sys.stderr)
        with bar:

            def progress(done: int, total: int) -> None:
                bar.length = max(total, 1)
                bar.update(done - bar.pos)

            # The worker's per-item limits: an entry it would fail for its size fails here too.
            result = repair_collection(
                engine, slug, limits=Limits.from_env(os.environ), progress=progress
            )
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


@click.group()
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

    from media_usage_worker.api import MediaUsage
    from media_usage_worker.domain.content_model import validate_collection_slug
    from media_usage_worker.domain.cursor import decode_cursor, work_scope
    from media_usage_worker.domain.validation import work_state

    validate_collection_slug(slug)
    # Reject a bad cursor, or one from another listing, before connecting.
    decode_cursor(cursor, scope=work_scope(slug, work_state(state)))
    with open_engine(database_url) as engine:
        page = MediaUsage(engine).work(slug, state=state, limit=limit, cursor=cursor)
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
    table(
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
@click.option(
    "--force",
    is_flag=True,
    help="Queue the entry even if nothing is known of it (no work, content or index rows).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def work_retry(
    slug: str | None,
    collection_id: str | None,
    content_id: str,
    force: bool,
    as_json: bool,
    database_url: str,
) -> None:
    """Make an entry's work pending now (failed, retrying or abandoned work, or none at all)."""
    from dataclasses import asdict

    from media_usage_worker.api import MediaUsage
    from media_usage_worker.domain.content_model import validate_collection_slug
    from media_usage_worker.domain.validation import collection_ulid
    from media_usage_worker.domain.work import OperatorRetryResult
    from media_usage_worker.pipeline import operator_retry

    if (slug is None) == (collection_id is None):
        raise click.UsageError("Give exactly one of --collection SLUG and --collection-id ID.")
    if slug is not None:
        validate_collection_slug(slug)
    else:
        collection_ulid(collection_id, "--collection-id")
    checked_id(content_id, "--content-id")
    with open_engine(database_url) as engine:
        if slug is not None:
            collection = MediaUsage(engine).collection(slug)
            if collection is None:
                raise Outcome(f"collection {slug!r} not found")
            collection_id = collection.id
        assert collection_id is not None
        refusal = None
        if not force:
            refusal = operator_retry.retry_refusal(
                engine, collection_id=collection_id, content_id=content_id
            )
        if refusal is None:
            result = operator_retry.retry_operator_work(
                engine, collection_id=collection_id, content_id=content_id
            )
        else:
            result = OperatorRetryResult(refusal)
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
                collection=slug or collection_id,
                content_id=content_id,
                until=result.lease_expires_at,
            )
        )


# Why ``work retry`` changed nothing, per outcome of ``retry_operator_work``.
_RETRY_REFUSED = {
    RetryOutcome.LEASE_ACTIVE: "a worker holds this item until {until}; retry it if it then fails",
    RetryOutcome.COLLECTION_NOT_FOUND: "collection {collection!r} not found or capture inactive",
    RetryOutcome.CONTENT_NOT_FOUND: (
        "no such entry {content_id!r} in collection {collection!r}: no content row, no work "
        "and nothing indexed for it; add --force to queue it anyway"
    ),
    RetryOutcome.CONFLICT: "the item changed while it was being retried; run the command again",
}
