"""``status`` and ``usage``: what the index knows, and whether "used nowhere" can be trusted."""

from __future__ import annotations

import json
from typing import Any

import click

from media_usage_worker.cli.common import (
    Outcome,
    checked_id,
    database_url_option,
    handle_errors,
    open_engine,
    table,
)
from media_usage_worker.domain.vocabulary import ErrorCode

# ``status --check``: the oldest due item may be this many seconds old by default.
MAX_AGE = 300
CAPTURE_NOT_ACTIVE = "capture is not active, so nothing is indexed: run media-usage activate"


@click.command("status")
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
    default=None,
    help=f"With --check: the oldest due item may be this many seconds old (default {MAX_AGE}).",
)
@database_url_option
@handle_errors
def status_command(as_json: bool, check: bool, max_age: int | None, database_url: str) -> None:
    """Coverage, epoch, work counts, oldest due item and latest failures per collection."""
    from dataclasses import asdict

    from media_usage_worker.api import MediaUsage

    if max_age is not None and not check:
        raise click.UsageError("--max-age only applies with --check.")

    with open_engine(database_url) as engine:
        overview = MediaUsage(engine).status()
    capture, aggregate, details = overview.capture, overview.coverage, overview.collections
    deletions, sources = overview.deletions, overview.sources
    if as_json:
        click.echo(
            json.dumps(
                {
                    "capture": capture,
                    "coverage": aggregate,
                    "collections": [asdict(d) for d in details],
                    "deletions": deletions,
                    "sources": [asdict(d) for d in sources],
                    "cleanup": overview.cleanup,
                    "pace": None if overview.pace is None else asdict(overview.pace),
                },
                indent=2,
            )
        )
    else:
        _print_status(capture, aggregate, details + sources)
        _print_deletions(deletions)
        parked = overview.cleanup.get("parked_files", 0)
        click.echo(
            f"clean-up: {overview.cleanup.get('retired', 0)} retired item(s), "
            f"{overview.cleanup.get('undelivered_files', 0)} undelivered file(s)"
            + (f", {parked} parked (media-usage purge --undelivered)" if parked else "")
        )
        if overview.pace is not None:
            click.echo(f"pace: {overview.pace.shown()}")
    problems = [] if capture == "active" else [CAPTURE_NOT_ACTIVE]
    if overview.pace is not None and overview.pace.falling_behind:
        problems.append(overview.pace.shown())
    problems += [
        p
        for d in details + sources
        for p in _status_problems(d, MAX_AGE if max_age is None else max_age)
    ]
    problems += [f"deletion of {d['collection_slug']} failed" for d in deletions
                 if d["state"] == "failed"]  # fmt: skip
    if check and problems:
        raise Outcome("; ".join(problems))


def _name(detail: Any) -> str:
    """A collection's slug; a source beyond content's kind (``settings``, ``table:menus``)."""
    return str(detail.slug if detail.kind == "content" else detail.kind)


def _print_status(capture: str, aggregate: str, details: list[Any]) -> None:
    click.echo(f"capture: {capture}    coverage: {aggregate}")
    table(
        ["COLLECTION", "COVERAGE", "WHY", "EPOCH", "PENDING", "RETRY", "LEASED", "FAILED",
         "OLDEST DUE (s)"],
        [
            [_name(d), d.coverage, _why(d), d.change_epoch, d.work["pending"], d.work["retry"],
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
        table(["FAILED IN", "CONTENT", "ERROR", "ATTEMPTS", "UPDATED"], failed)


def _print_deletions(deletions: list[dict[str, Any]]) -> None:
    if deletions:
        click.echo("")
        table(
            ["DELETING", "STATE", "PHASE", "ATTEMPTS", "ERROR", "UPDATED"],
            [[d["collection_slug"], d["state"], d["phase"], d["attempt_count"],
              d["last_error_code"], d["updated_at"]] for d in deletions],
        )  # fmt: skip


# Why coverage is not complete, as the status row's code says it.
_WHY = {
    ErrorCode.RULES_CHANGED: "extraction rules changed",
    ErrorCode.STALE: "fields or capture changed",
    ErrorCode.REPAIR_CONFLICT: "a write raced the repair",
    ErrorCode.REINDEX_REQUESTED: "re-index requested",
    ErrorCode.RECONCILIATION_ENTRY_FAILED: "entries failed",
    ErrorCode.RECONCILIATION_FAILED: "reconciliation failed",
}


def _why(detail: Any) -> str | None:
    """What keeps a collection's coverage from ``complete``, in words (``None``: nothing)."""
    if detail.coverage == "complete":
        return None
    if detail.reason is not None:
        return str(detail.reason)
    if detail.coverage == "never":
        return "not reconciled yet"
    if detail.status == "complete" and detail.rules.get("indexed_under") != detail.rules.get(
        "running"
    ):
        return _WHY[ErrorCode.RULES_CHANGED]  # read under new rules before a tick marked it
    if detail.status == "complete":
        return "fields changed since it was indexed"  # by the CMS, before a tick marked it
    code = detail.last_error_code
    return _WHY.get(code, code) if code else "content written since"


def _status_problems(detail: Any, max_age: int) -> list[str]:
    """What ``status --check`` reports about one collection."""
    problems = []
    if detail.work["failed"]:
        problems.append(f"{_name(detail)}: {detail.work['failed']} failed item(s)")
    if detail.coverage != "complete":
        problems.append(f"{_name(detail)}: coverage {detail.coverage} ({_why(detail)})")
    age = detail.oldest_due_age_seconds
    if age is not None and age > max_age:
        problems.append(f"{_name(detail)}: oldest due item {age:g} s old (over {max_age} s)")
    return problems


@click.command("usage")
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

    from media_usage_worker.api import MediaUsage
    from media_usage_worker.domain.cursor import SLUG_ORDER, decode_cursor, usage_scope

    checked_id(media_id, "MEDIA_ID")
    decode_cursor(cursor, SLUG_ORDER, scope=usage_scope(media_id))
    with open_engine(database_url) as engine:
        index = MediaUsage(engine)
        page = index.usage(media_id, limit=limit, cursor=cursor)
        counted = index.usage_counts([media_id])
    coverage, count = counted.coverage, counted.counts[media_id]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "media_id": media_id,
                    "in_library": page.in_library,
                    "count": count,
                    "coverage": {
                        "scope": "all_sources",
                        "status": coverage.status,
                        # Per collection and per source beyond content: its status and the
                        # extraction rules it was indexed under (docs/operations.md).
                        "collections": [
                            {
                                "slug": s.collection_slug,
                                "kind": s.kind,
                                "status": s.status,
                                "rules": s.rules,
                                "reason": s.reason,
                            }
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
    library = "" if page.in_library else " (no media library item has this id)"
    if count is None:
        used = "live uses unknown until coverage is complete"
    else:
        used = f"used by {count} live {'entry' if count == 1 else 'entries'}"
    click.echo(f"media {media_id}{library}: {used}; coverage {coverage.status}")
    table(
        ["WHERE", "CONTENT", "TITLE", "STATUS", "TRASHED", "VARIANTS", "FIELDS"],
        [
            [
                # A collection's slug, or the kind of a source beyond content.
                e.collection if e.kind == "content" else e.kind,
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
