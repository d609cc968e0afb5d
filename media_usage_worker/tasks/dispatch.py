"""Sending work messages: ids only, short-lived, not sent twice at once, batched in a backlog.

A message names an item and the version it was due at; the database decides everything else.
A short-lived ledger key per (item, version) (``tasks.ledger``) keeps the tick from queueing
the same item again while its message is still alive; the task drops the key when it finishes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from celery import Celery
from celery._state import get_current_task
from kombu.exceptions import ChannelError
from sqlalchemy import Engine

from media_usage_worker.domain.vocabulary import WorkState
from media_usage_worker.domain.work import WorkRecord, grouped
from media_usage_worker.repository.reconciling import ranges
from media_usage_worker.repository.work_queue import work_processing as work
from media_usage_worker.tasks import ledger, settings
from media_usage_worker.tasks.app import app
from media_usage_worker.tasks.engines import get_engine
from media_usage_worker.tasks.names import PREFIX, TaskName
from media_usage_worker.tasks.settings import broker_folder, queue_name

log = logging.getLogger(__name__)
# Work messages go behind control messages (ticks, reconciliation): on Redis, priority 0 (the
# default, used by the beat entries) is consumed first, so a backlog never delays the next tick.
# A single item (the fast path, a tick with no backlog) goes ahead of a backfill's batches, so
# one write is indexed within the fast-path latency while thousands drain.
ITEM_PRIORITY = 3
BATCH_PRIORITY = 6


def sending_app() -> Celery:
    """The app whose broker work messages go to: the running task's, when a task of this
    project runs (on this project's app, or a host's it was bound onto), else this project's."""
    task = get_current_task()
    if task is not None and str(task.name).startswith(PREFIX):
        return task.app
    return app


def _ledger() -> ledger.Ledger:
    return ledger.for_broker(sending_app().conf.broker_url or "", broker_folder())


def queued_messages() -> int | None:
    """Messages waiting in the work queue (all priorities); ``None`` when the broker can't say."""
    try:
        with sending_app().connection_for_write() as conn:
            declared = conn.default_channel.queue_declare(queue=queue_name(), passive=True)
        return int(declared.message_count)
    except ChannelError:
        return 0  # Redis keeps no empty lists: a queue that "does not exist" is empty
    except Exception:  # the depth is advisory: never fail a tick over it
        log.debug("could not read the queue depth", exc_info=True)
        return None


TICK_KEY_PREFIX = "media_usage:tick"


def first_tick_in(task_name: str, interval_seconds: float) -> bool:
    """Whether this tick is the first of ``task_name`` in the last half interval.

    Ticks carry no expiry (a beat host's clock need not agree with the workers'), so ticks
    queued while the workers were down all arrive together when they come back: the first
    runs, the rest find its key and return at once. The key is timed by the broker.
    """
    return _ledger().reserve([f"{TICK_KEY_PREFIX}:{task_name}"], interval_seconds / 2)[0]


def reconcile_soon() -> bool:
    """Send a reconciliation tick now: after activation, a change of extraction rules or a
    repair request, the first step need not wait for the next beat tick (up to its interval).

    Best effort, like ``after_write``: a broker that is down costs only that wait, and is
    logged at INFO. The tick's late-duplicate key is dropped first, so this tick is not taken
    for a duplicate of the beat's last one. ``True`` when the message was sent.
    """
    sender = sending_app()
    try:
        _ledger().release([f"{TICK_KEY_PREFIX}:{TaskName.RECONCILE_TICK.value}"])
        with sender.connection_for_write() as conn:
            # One attempt: a command must not stall for the transport's own retries.
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
            sender.send_task(
                TaskName.RECONCILE_TICK.value, queue=queue_name(), ignore_result=True,
                retry=False, connection=conn,
            )  # fmt: skip
    except Exception as exc:
        log.info(
            "could not send a reconciliation tick (the next beat tick starts it): %s: %s",
            type(exc).__name__, str(exc)[:200],
        )  # fmt: skip
        return False
    return True


def release(items: Sequence[tuple[str, str, int]]) -> None:
    """Forget the items' dispatch keys so their next due time is honoured at once."""
    _ledger().release([ledger.dispatch_key(*item) for item in items])


def send(items: Sequence[WorkRecord], ttl: int | None = None) -> list[str]:
    """Send the items not already in flight; returns, per item sent, the id of its message.

    More than ``MEDIA_USAGE_BATCH_THRESHOLD`` items go as ``process_batch`` messages of up to
    ``MEDIA_USAGE_BATCH_SIZE`` items of one collection; fewer go one message each.
    """
    ttl = ttl or settings.dispatch_ttl_seconds()
    reserved = _ledger().reserve(
        [ledger.dispatch_key(i.collection_id, i.content_id, i.work_version) for i in items], ttl
    )
    todo = [item for item, go in zip(items, reserved, strict=True) if go]
    # No ``expires``: it would be judged by the worker's clock against the sender's. A message
    # that waits too long only finds its claim taken (claim_lost); the ledger's keys, timed by
    # the broker, decide when an item may be sent again.
    options = {"queue": queue_name(), "ignore_result": True}
    sent: list[str] = []
    sender = sending_app()
    # By name: the same messages whether the tasks run on this project's app or a host's.
    with sender.producer_or_acquire() as producer:
        if len(todo) <= settings.batch_threshold():
            for item in todo:
                result = sender.send_task(
                    TaskName.PROCESS_WORK.value,
                    args=(item.collection_id, item.content_id, item.work_version),
                    producer=producer, priority=ITEM_PRIORITY, **options,
                )  # fmt: skip
                sent.append(result.id)
        else:
            for batch in _batches(todo, settings.batch_size()):
                ids = [[i.collection_id, i.content_id, i.work_version] for i in batch]
                result = sender.send_task(
                    TaskName.PROCESS_BATCH.value,
                    args=(ids,), producer=producer, priority=BATCH_PRIORITY, **options,
                )  # fmt: skip
                sent += [result.id] * len(batch)
    return sent


# A key range whose message went out this long ago and that is still claimable is sent again:
# its message was lost, or its holder was killed and its lease ran out, or it waited behind
# single items that never let up (a site writing faster than the workers drain: Redis serves
# a higher priority first). A range normally waits a few seconds; one sent again goes at the
# single items' priority, in line with them, so the run still ends while the site falls behind.
RANGE_RESEND_SECONDS = 15
# Ranges sent by one call at most (a scan hands out a dozen per collection at a time).
RANGES_PER_SEND = 200


def send_ranges(engine: Engine) -> int:
    """Send a message for every key range that needs one (new, or its message or holder lost);
    the number sent. Each is marked sent in the database first, so two senders never both
    send one; a message that then fails to go out is sent again after the resend delay."""
    due = ranges.mark_for_dispatch(engine, RANGE_RESEND_SECONDS, RANGES_PER_SEND)
    if not due:
        return 0
    sender = sending_app()
    with sender.producer_or_acquire() as producer:
        for collection_id, range_id, times in due:
            sender.send_task(
                TaskName.PROCESS_RANGE.value, args=(collection_id, range_id), producer=producer,
                priority=BATCH_PRIORITY if times == 1 else ITEM_PRIORITY, queue=queue_name(),
                ignore_result=True,
            )  # fmt: skip
    return len(due)


def _batches(items: list[WorkRecord], size: int) -> list[list[WorkRecord]]:
    """Items grouped by collection, in runs of at most ``size``."""
    return [
        group[start : start + size]
        for group in grouped(items, lambda item: item.collection_id)
        for start in range(0, len(group), size)
    ]


def after_write(collection_slug: str, content_id: str) -> str | None:
    """Fast path for host apps: call after committing a content write to index it now.

    Returns the id of the message sent, or ``None`` when there is nothing to do (capture not
    active, no work row, or the item is already in flight) or nothing could be done. It never
    raises into the host: the write is already captured in the work table, so a broker or
    database that is down, or a bad argument, costs only the head start (the next tick sends
    the item); it is logged as a warning.
    """
    try:
        record = work.find_work_for_content(get_engine(), collection_slug, content_id)
        if record is None or record.state in (WorkState.FAILED, WorkState.LEASED):
            return None
        sent = send([record])
    except Exception as exc:
        log.warning(
            "media usage after_write could not dispatch (the next tick will): %s: %s",
            type(exc).__name__,
            str(exc)[:200],
        )
        return None
    return sent[0] if sent else None


def send_purged_files(task_name: str, storage_keys: list[str], queue: str) -> None:
    """Send the host's purge task by name with the storage keys of purged files; raises when
    the broker did not take the message (the files stay queued for the next delivery)."""
    sender = sending_app()
    with sender.connection_for_write() as conn:
        conn.ensure_connection(max_retries=2, interval_start=0, interval_step=1, timeout=5)
        sender.send_task(
            task_name, args=[storage_keys], queue=queue, ignore_result=True, retry=False,
            connection=conn,
        )  # fmt: skip
