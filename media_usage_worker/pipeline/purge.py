"""The purge workflow (docs/operations.md, "Cleaning up unused media"; docs/design.md §13):
quarantined items old enough are swept for, removed for good a fenced batch at a time, and
their files handed to the host.

1. The final sweep: every text-like value of every host table is searched for the candidates'
   ids and storage keys, a chunk of candidates at a time (memory bounded by the chunk and one
   page of rows); an item found anywhere is kept, with where it was found.
2. Each batch of the rest is checked again behind the fence and removed
   (``repository.purge.purge_batch``).
3. Delivery: each purged file's key goes to the host's task, or the file is deleted under the
   storage directory. A key that cannot be delivered is tried again by later runs and parked
   after ``MAX_DELIVERY_ATTEMPTS`` failures (at once when it can never be delivered); parked
   keys do not fail later runs (``purge --undelivered`` lists them, ``purge --forget`` drops
   one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from media_usage_worker.domain.cleanup import (
    FENCE_BATCH,
    MAX_DAYS,
    PurgeRefusal,
    batches,
    checked_actor,
    file_under,
)
from media_usage_worker.domain.errors import InvalidArgument, NowhereToPurge
from media_usage_worker.domain.mentions import Mention, Needles, first_mentions
from media_usage_worker.repository.quarantine import purge as store
from media_usage_worker.repository.quarantine import sweep

if TYPE_CHECKING:
    from sqlalchemy import Engine

# Candidates one sweep looks for at once: the needles' memory, and how many items a pass over
# the site serves.
SWEEP_CHUNK = 10_000
DELIVERY_BATCH = 100


@dataclass(frozen=True)
class PurgeTarget:
    """Where purged files go: the host's purge task (sent by name with the storage keys), or
    files deleted under a local directory."""

    task: str | None = None
    directory: Path | None = None


@dataclass(frozen=True)
class Kept:
    """A candidate the purge kept in the quarantine, and why (with where the sweep found it)."""

    reason: PurgeRefusal
    where: str | None = None


@dataclass(frozen=True)
class PurgeReport:
    purged: list[str] = field(default_factory=list)
    delivered: int = 0
    # Storage key -> why its delivery failed in this run; it stays queued and is tried again
    # (or was parked now, as ``parked_now`` says).
    undelivered: dict[str, str] = field(default_factory=dict)
    kept: dict[str, Kept] = field(default_factory=dict)
    parked_now: list[str] = field(default_factory=list)
    dry_run: bool = False

    def shown(self) -> dict[str, object]:
        """As the CLI's JSON and the HTTP answer show it: a dry run's items are
        ``would_purge`` (as a retirement's dry run says ``would_retire``)."""
        shown = asdict(self)
        if self.dry_run:
            shown["would_purge"] = shown.pop("purged")
        return shown


Send = Callable[[str, list[str]], None]
# Progress of the sweep: (table, values read so far in it).
Progress = Callable[[str, int], None]
# A Celery task name as a host names one: dotted words.
_TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,199}")


def checked_purge_target(task: str | None, directory: str | None) -> PurgeTarget:
    """Where purged files go, from the settings ``MEDIA_USAGE_PURGE_TASK`` (a host's task
    name) and ``MEDIA_USAGE_STORAGE_DIR`` (an existing absolute directory)."""
    if task is not None and not _TASK_NAME.fullmatch(task):
        raise InvalidArgument("MEDIA_USAGE_PURGE_TASK is not a task name (e.g. host.tasks.purge).")
    if task is not None and directory is not None:
        # One way out for files: neither silently wins, and no key goes to a host's task that
        # the directory's own checks would have refused.
        raise InvalidArgument(
            "Set MEDIA_USAGE_PURGE_TASK or MEDIA_USAGE_STORAGE_DIR, not both: purged files go "
            "one way."
        )
    if directory is None:
        return PurgeTarget(task, None)
    path = Path(directory)
    if not path.is_absolute() or not path.is_dir():
        raise InvalidArgument("MEDIA_USAGE_STORAGE_DIR must be an existing absolute directory.")
    return PurgeTarget(task, path.resolve())


def purge(
    engine: Engine,
    older_than_days: int,
    *,
    actor: str,
    target: PurgeTarget,
    send: Send | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> PurgeReport:
    """Remove for good the quarantined items retired more than ``older_than_days`` ago that
    the rule allows, and hand their files to ``target``; files a crash left undelivered go
    first. ``dry_run`` makes every check (the sweep included) and removes nothing."""
    days = _checked_days(older_than_days)
    who = checked_actor(actor)
    if target.task is None and target.directory is None:
        raise NowhereToPurge()
    first = PurgeReport() if dry_run else deliver(engine, target, send)
    purged: list[str] = []
    kept: dict[str, Kept] = {}
    after: tuple[str, str] | None = None
    while chunk := store.purgeable(engine, days, after, SWEEP_CHUNK):
        after = (chunk[-1][0], chunk[-1][1])
        candidates = {media_id: key for _, media_id, key in chunk}
        found = final_sweep(engine, candidates, progress)
        for batch in batches(list(candidates), FENCE_BATCH):
            mentioned = {i: m.describe() for i, m in found.items() if i in batch}
            result = store.purge_batch(
                engine, batch, who, days, mentioned=mentioned, dry_run=dry_run
            )
            purged += result.purged
            kept.update({i: Kept(why, mentioned.get(i)) for i, why in result.kept.items()})
    if dry_run:
        return PurgeReport(purged, 0, {}, kept, [], True)
    then = deliver(engine, target, send)
    return PurgeReport(
        purged,
        first.delivered + then.delivered,
        {**first.undelivered, **then.undelivered},
        kept,
        first.parked_now + then.parked_now,
    )


def _checked_days(days: object) -> int:
    if not isinstance(days, int) or isinstance(days, bool) or not 0 <= days <= MAX_DAYS:
        raise InvalidArgument(f"retired_before is a whole number of days, 0 to {MAX_DAYS}.")
    return days


def final_sweep(
    engine: Engine, candidates: dict[str, str], progress: Progress | None = None
) -> dict[str, Mention]:
    """Where each candidate (media id → storage key) is first mentioned in the host's
    tables; a candidate mentioned nowhere is absent."""
    needles = Needles(candidates)
    found: dict[str, Mention] = {}
    for table in sweep.host_tables(engine):
        read = 0
        rows = sweep.table_rows(engine, table, exclude_media_ids=list(candidates))
        for chunk in _counted(rows, 5_000):
            first_mentions(chunk, needles, found)
            read += len(chunk)
            if progress is not None:
                progress(table.name, read)
    return found


Row = tuple[str, str, str, object]


def _counted(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    """``rows`` in lists of ``size``."""
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def deliver(engine: Engine, target: PurgeTarget, send: Send | None = None) -> PurgeReport:
    """Hand every undelivered purged file that is not parked to ``target``, a page at a time;
    a failure leaves it queued (parked at the limit) and the next page goes on."""
    delivered = 0
    failures: dict[str, str] = {}
    parked_now: list[str] = []
    after: tuple[str, str] | None = None
    while page := store.undelivered_page(engine, DELIVERY_BATCH, after):
        after = (page[-1].purged_at, page[-1].media_id)
        done: list[str] = []
        outcomes = _hand_over(target, send, [(u.media_id, u.storage_key) for u in page])
        for media_id, key, why, final in outcomes:
            if why is None:
                done.append(media_id)
                continue
            failures[key] = why
            if store.delivery_failed(engine, media_id, why, park_now=final):
                parked_now.append(key)
        if done:
            store.delivered(engine, done)
            delivered += len(done)
    return PurgeReport([], delivered, failures, {}, parked_now)


def _hand_over(
    target: PurgeTarget, send: Send | None, rows: list[tuple[str, str]]
) -> list[tuple[str, str, str | None, bool]]:
    """(media id, key, why it failed or None, whether it can never be delivered) per row."""
    if target.task is not None:
        assert send is not None, "a purge task needs a sender"
        try:
            send(target.task, [key for _, key in rows])
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"[:300]
            return [(i, k, why, False) for i, k in rows]
        return [(i, k, None, False) for i, k in rows]
    assert target.directory is not None
    return [(i, k, *_delete_file(target.directory, k)) for i, k in rows]


def _delete_file(directory: Path, key: str) -> tuple[str | None, bool]:
    """Delete the file of ``key`` under ``directory``: (why not, whether it never can be). A
    symlink is removed itself, never its target; a directory is never removed."""
    if not key:
        return "the storage key is empty: it names no file", True
    path = file_under(directory, key)
    if path is None:
        return "the storage key names a file outside MEDIA_USAGE_STORAGE_DIR: not deleted", True
    try:
        if path.is_dir() and not path.is_symlink():
            return "the storage key names a directory: not deleted", True
        path.unlink(missing_ok=True)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"[:300], False
    return None, False


def forget_undelivered(engine: Engine, storage_key: str, actor: str) -> list[str]:
    """Stop trying to hand one purged file to the host (its key); the media ids it was of,
    audited. The host deletes the file itself, or keeps it."""
    return store.forget_undelivered(engine, storage_key, actor)
