"""``collections delete``, ``collections deletions`` and ``collections retry-deletion``."""

from __future__ import annotations

import json

import click

from media_usage_worker.cli.common import (
    Outcome,
    database_url_option,
    handle_errors,
    open_engine,
    table,
)

_OUTCOME_SAYS = {
    "in_progress": "COLLECTION_DELETION_IN_PROGRESS: another caller holds this deletion "
    "(phase {phase}, {state}); it goes on by itself, see `collections deletions`",
    "has_content": "COLLECTION_HAS_CONTENT: {slug} still has entries; nothing was changed "
    "(--force deletes them with the collection)",
    "already_deleted": "collection {slug} was already deleted; its clean-up goes on by itself "
    "(phase {phase}, {state}), see `collections deletions --state all`",
}


@click.command("delete")
@click.argument("slug")
@click.option("--force", is_flag=True, help="Delete the collection even if it has entries.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def collections_delete(slug: str, force: bool, as_json: bool, database_url: str) -> None:
    """Delete a collection: its content writes stop at once, its table and registry entry go
    now, and the workers remove its work, index and coverage rows in batches."""
    from media_usage_worker.domain.content_model import validate_collection_slug
    from media_usage_worker.pipeline.deletion import delete_collection

    validate_collection_slug(slug)
    with open_engine(database_url) as engine:
        result = delete_collection(engine, slug, force=force)
    if as_json:
        click.echo(
            json.dumps(
                {"collection": slug, "outcome": result.outcome, "phase": result.phase,
                 "state": result.state},
                indent=2,
            )
        )  # fmt: skip
    elif result.outcome == "deleted":
        where = f" (cleanup: {result.phase})" if result.phase else ""
        click.echo(f"deleted collection {slug}{where}")
    if result.outcome != "deleted":
        raise Outcome(
            _OUTCOME_SAYS[result.outcome].format(slug=slug, phase=result.phase, state=result.state)
        )


@click.command("deletions")
@click.option(
    "--state",
    type=click.Choice(["pending", "retry", "leased", "failed", "all"]),
    default="failed",
    show_default=True,
)
@click.option("--limit", type=click.IntRange(1, 100), default=50, show_default=True)
@click.option("--cursor", default=None, help="next_cursor of the previous page.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def collections_deletions(
    state: str, limit: int, cursor: str | None, as_json: bool, database_url: str
) -> None:
    """Collection deletions by state, newest change first (default: the failed ones)."""
    from media_usage_worker.api import MediaUsage
    from media_usage_worker.domain.cursor import decode_cursor, deletion_scope
    from media_usage_worker.domain.vocabulary import DeletionState

    wanted = None if state == "all" else DeletionState(state)
    decode_cursor(cursor, scope=deletion_scope(wanted))
    with open_engine(database_url) as engine:
        found = MediaUsage(engine).deletions(wanted, limit, cursor)
    if as_json:
        items = [t.shown() for t in found.items]
        click.echo(json.dumps({"deletions": items, "next_cursor": found.next_cursor}, indent=2))
        return
    table(
        ["COLLECTION", "STATE", "PHASE", "ATTEMPTS", "NEXT ATTEMPT", "ERROR", "UPDATED"],
        [
            [t.collection_slug, t.state, t.phase, t.attempt_count, t.next_attempt_at,
             t.last_error_code, t.updated_at]
            for t in found.items
        ],
    )  # fmt: skip
    if found.next_cursor:
        click.echo(f"next page: --cursor {found.next_cursor}")


@click.command("retry-deletion")
@click.argument("slug")
@database_url_option
@handle_errors
def collections_retry_deletion(slug: str, database_url: str) -> None:
    """Make a failed, retrying or abandoned deletion due now."""
    from media_usage_worker.domain.content_model import validate_collection_slug
    from media_usage_worker.pipeline.deletion import reopen

    validate_collection_slug(slug)
    with open_engine(database_url) as engine:
        reopened = reopen(engine, slug)
    if reopened is None:
        raise Outcome(f"no deletion of {slug} to retry (none, or it is pending or running now)")
    click.echo(f"deletion of {slug} is due now (phase {reopened.phase})")
