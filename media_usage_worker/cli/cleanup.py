"""``unused``, ``retire``, ``restore``, ``dangling``, ``audit``: from "used nowhere" to a safe
clean-up (docs/operations.md, "Cleaning up unused media"). Every argument is validated before
the database is opened."""

from __future__ import annotations

import csv
import getpass
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING

import click

from media_usage_worker.cli.common import (
    Outcome,
    database_url_option,
    handle_errors,
    open_engine,
    table,
)
from media_usage_worker.domain import validation as check
from media_usage_worker.domain.cleanup import MAX_DAYS, UnusedFilter, checked_ids

if TYPE_CHECKING:
    from media_usage_worker.pipeline.cleanup import PurgeTarget


def _actor() -> str:
    """Who runs the command, for the audit: the operating system's user name."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:
        return "cli"


def _filter(older_than: int | None, mime: str | None, trashed_only: bool) -> UnusedFilter:
    return UnusedFilter(older_than, mime, trashed_only).validated()


_older_than = click.option(
    "--older-than", "older_than", type=click.IntRange(0, MAX_DAYS), metavar="DAYS",
    help="Only items created more than DAYS days ago.",
)  # fmt: skip
_mime = click.option("--mime", "mime", metavar="PREFIX", help="Only MIME types under PREFIX.")
_trashed = click.option(
    "--include-trashed-only", "trashed_only", is_flag=True,
    help="The items only trashed entries use (emptying the trash would free them), instead.",
)  # fmt: skip


@click.command("unused")
@_older_than
@_mime
@_trashed
@click.option("--limit", type=int, default=None, help="Items per page (1 to 100, default 50).")
@click.option("--cursor", default=None, help="The next page: the previous page's cursor.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (id, filename, mime, size, ...).")
@database_url_option
@handle_errors
def unused_command(
    older_than: int | None, mime: str | None, trashed_only: bool, limit: int | None,
    cursor: str | None, as_json: bool, as_csv: bool, database_url: str,
) -> None:  # fmt: skip
    """Library items no source uses, with the whole selection's count and bytes. Exit 1 with
    the coverage while it is not complete: then nobody knows what is unused."""
    from media_usage_worker.pipeline.cleanup import unused

    chosen = _filter(older_than, mime, trashed_only)
    check.operator_limit(limit)
    if as_json and as_csv:
        raise click.UsageError("--json and --csv are one or the other.")
    with open_engine(database_url) as engine:
        page = unused(engine, chosen, limit=limit, cursor=cursor)
    if not page.known:
        if as_json:  # with --json, the answer is JSON too
            click.echo(json.dumps({"known": False, "coverage": page.coverage, "items": []}))
        raise Outcome(f"not known yet: coverage is {page.coverage}, not complete")
    if as_json:
        click.echo(json.dumps({**asdict(page), "items": [asdict(i) for i in page.items]}))
        return
    if as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(["id", "filename", "mime_type", "size", "storage_key", "created_at"])
        for i in page.items:
            writer.writerow([i.id, i.filename, i.mime_type, i.size, i.storage_key, i.created_at])
        return
    click.echo(f"{page.total_count} unused item(s), {page.total_bytes} bytes")
    table(
        ["ID", "FILENAME", "MIME", "SIZE", "STORAGE KEY", "CREATED"],
        [[i.id, i.filename, i.mime_type, i.size, i.storage_key, i.created_at] for i in page.items],
    )
    if page.next_cursor:
        click.echo(f"next page: --cursor {page.next_cursor}")


def _report(done: list[str], refused: Mapping[str, str], verb: str, as_json: bool) -> None:
    """Print what was done and what was refused; exit 1 when an id was refused (not
    everything asked for happened)."""
    if as_json:
        click.echo(json.dumps({verb.replace(" ", "_"): done, "refused": dict(refused)}))
    else:
        click.echo(f"{verb} {len(done)} item(s): {' '.join(done)}" if done else f"{verb} 0 items")
        for media_id, why in refused.items():
            click.echo(f"refused {media_id}: {why}")
    if refused:
        raise Outcome(f"{len(refused)} id(s) refused")


@click.command("retire")
@click.argument("ids", nargs=-1)
@click.option("--all-unused", is_flag=True, help="Every unused item (with the filters).")
@_older_than
@_mime
@click.option(
    "--dry-run",
    is_flag=True,
    help="Make every check of a real run and list the outcome; change nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def retire_command(
    ids: tuple[str, ...], all_unused: bool, older_than: int | None, mime: str | None,
    dry_run: bool, as_json: bool, database_url: str,
) -> None:  # fmt: skip
    """Move unused media items out of the library into the quarantine, behind the write
    fence (docs/design.md §13). Each refused id is listed with its reason; exit 1 if any
    was refused."""
    from media_usage_worker.pipeline.cleanup import retire, retire_all_unused

    if not ids and not all_unused:
        raise click.UsageError("Give media ids, or --all-unused.")
    if ids and all_unused:
        raise click.UsageError("Give media ids or --all-unused, not both.")
    if not all_unused and (older_than is not None or mime is not None):
        raise click.UsageError("--older-than and --mime go with --all-unused.")
    chosen = _filter(older_than, mime, False)
    if ids:
        checked_ids(list(ids))
    with open_engine(database_url) as engine:
        if all_unused:
            result = retire_all_unused(engine, chosen, actor=_actor(), dry_run=dry_run)
        else:
            result = retire(engine, list(ids), actor=_actor(), dry_run=dry_run)
    _report(result.retired, result.refused, "would retire" if dry_run else "retired", as_json)


@click.command("restore")
@click.argument("ids", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def restore_command(ids: tuple[str, ...], as_json: bool, database_url: str) -> None:
    """Put retired items back into the library exactly as they were; exit 1 if an id was
    refused."""
    from media_usage_worker.pipeline.cleanup import restore

    checked_ids(list(ids))
    with open_engine(database_url) as engine:
        result = restore(engine, list(ids), actor=_actor())
    _report(result.restored, result.refused, "restored", as_json)


@click.command("dangling")
# The same bounds as every other page, and as GET /v1/dangling.
@click.option("--limit", type=click.IntRange(1, 100), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def dangling_command(limit: int, as_json: bool, database_url: str) -> None:
    """References to a media id no library item has (never existed, deleted by the host, or
    retired before a late write), with where each one is."""
    from media_usage_worker.api import MediaUsage

    with open_engine(database_url) as engine:
        found, total = MediaUsage(engine).dangling(limit)
    shown = [reference.shown() for reference in found]
    if as_json:
        click.echo(json.dumps({"total": total, "references": shown}))
        return
    click.echo(f"{total} dangling reference(s)")
    table(["MEDIA ID", "WHERE", "CONTENT", "PATH"],
          [[d["media_id"], d["collection"] if d["kind"] == "content" else d["kind"],
            d["content_id"], d["field_path"]] for d in shown])  # fmt: skip


@click.command("audit")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def audit_command(limit: int, as_json: bool, database_url: str) -> None:
    """Who retired, restored or purged which items, and when; newest first."""
    from media_usage_worker.api import MediaUsage

    with open_engine(database_url) as engine:
        entries = MediaUsage(engine).audit(limit)
    if as_json:
        click.echo(json.dumps(entries))
        return
    table(["AT", "ACTOR", "ACTION", "IDS", "DETAIL"],
          [[e["at"], e["actor"], e["action"], " ".join(e["media_ids"]), e["detail"]]
           for e in entries])  # fmt: skip


def _purge_target() -> PurgeTarget:
    """Where purged files go, from MEDIA_USAGE_PURGE_TASK or MEDIA_USAGE_STORAGE_DIR."""
    from media_usage_worker.pipeline.cleanup import checked_purge_target

    return checked_purge_target(
        os.environ.get("MEDIA_USAGE_PURGE_TASK") or None,
        os.environ.get("MEDIA_USAGE_STORAGE_DIR") or None,
    )


@click.command("purge")
@click.option(
    "--retired-before",
    "days",
    type=click.IntRange(0, MAX_DAYS),
    metavar="DAYS",
    help="Purge items retired more than DAYS days ago.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Make every check (the sweep too) and list the outcome; change nothing.",
)
@click.option(
    "--undelivered", is_flag=True, help="List the files not yet delivered, parked ones too."
)
@click.option("--forget", "forget_key", metavar="KEY", help="Stop trying to deliver the file KEY.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_url_option
@handle_errors
def purge_command(
    days: int | None, dry_run: bool, undelivered: bool, forget_key: str | None, as_json: bool,
    database_url: str,
) -> None:  # fmt: skip
    """Remove retired items for good and hand their files to the host: its purge task
    (MEDIA_USAGE_PURGE_TASK, sent by name with the storage keys) or deleted under
    MEDIA_USAGE_STORAGE_DIR. Each batch is checked again behind the fence, after a final sweep
    of every host table for the items' ids and keys; an item found anywhere is kept. Files not
    yet delivered are tried again first; exit 1 if a file failed in this run."""
    if sum((days is not None, undelivered, forget_key is not None)) != 1:
        raise click.UsageError("Give one of --retired-before DAYS, --undelivered, --forget KEY.")
    if dry_run and days is None:
        raise click.UsageError("--dry-run goes with --retired-before.")
    if undelivered:
        _list_undelivered(database_url, as_json)
    elif forget_key is not None:
        _forget(database_url, forget_key, as_json)
    else:
        assert days is not None
        _purge(database_url, days, dry_run, as_json)


def _purge(database_url: str, days: int, dry_run: bool, as_json: bool) -> None:
    from media_usage_worker.pipeline.cleanup import purge

    target = _purge_target()
    queue = os.environ.get("MEDIA_USAGE_PURGE_QUEUE", "celery")

    def send(task: str, keys: list[str]) -> None:
        from media_usage_worker.tasks.dispatch import send_purged_files

        send_purged_files(task, keys, queue)

    def progress(table_name: str, read: int) -> None:
        if not as_json:
            click.echo(f"sweep: {table_name}: {read} value(s) read", err=True)

    with open_engine(database_url) as engine:
        report = purge(
            engine, days, actor=_actor(), target=target, send=send, dry_run=dry_run,
            progress=progress,
        )  # fmt: skip
    if as_json:
        click.echo(json.dumps(report.shown()))
    else:
        verb = "would purge" if dry_run else "purged"
        click.echo(f"{verb} {len(report.purged)} item(s); {report.delivered} file(s) delivered")
        for media_id, kept in report.kept.items():
            where = f" ({kept.where})" if kept.where else ""
            click.echo(f"kept {media_id}: {kept.reason}{where}")
        for key, why in report.undelivered.items():
            parked = " (parked)" if key in report.parked_now else ""
            click.echo(f"undelivered {key}: {why}{parked}")
    if report.undelivered:
        raise Outcome(f"{len(report.undelivered)} file(s) undelivered; see purge --undelivered")


def _list_undelivered(database_url: str, as_json: bool) -> None:
    from media_usage_worker.api import MediaUsage

    with open_engine(database_url) as engine:
        found = []
        after = None
        while page := MediaUsage(engine).undelivered(1000, after, parked=None):
            found += page
            after = (page[-1].purged_at, page[-1].media_id)
    if as_json:
        click.echo(json.dumps([asdict(u) for u in found]))
        return
    click.echo(f"{len(found)} undelivered file(s)")
    table(
        ["STORAGE KEY", "MEDIA ID", "PURGED", "ATTEMPTS", "PARKED", "LAST ERROR"],
        [[u.storage_key, u.media_id, u.purged_at, u.attempt_count, u.parked_at or "",
          u.last_error or ""] for u in found],
    )  # fmt: skip


def _forget(database_url: str, key: str, as_json: bool) -> None:
    from media_usage_worker.pipeline.purge import forget_undelivered

    if not key or "\x00" in key or len(key) > 4096:
        raise click.BadParameter("a storage key is 1 to 4096 characters", param_hint="--forget")
    with open_engine(database_url) as engine:
        ids = forget_undelivered(engine, key, _actor())
    if as_json:
        click.echo(json.dumps({"forgotten": ids}))
    elif ids:
        click.echo(f"forgot the file {key!r} of {', '.join(ids)}")
    if not ids:
        raise Outcome(f"no undelivered file has the key {key!r}")
