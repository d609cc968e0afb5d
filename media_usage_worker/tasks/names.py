"""Every task name of this project, once: the beat schedule, the routes, the consumer's checks
and the dispatcher all refer to these (a host sends ``after_write`` by this name)."""

from __future__ import annotations

from enum import StrEnum

# Routes and the dispatcher's guard match the whole family by this prefix.
PREFIX = "media_usage."


class TaskName(StrEnum):
    TICK = "media_usage.tick"
    PROCESS_WORK = "media_usage.process_work"
    PROCESS_BATCH = "media_usage.process_batch"
    PROCESS_RANGE = "media_usage.process_range"
    RECONCILE_TICK = "media_usage.reconcile_tick"
    DELETION_TICK = "media_usage.deletion_tick"
    AFTER_WRITE = "media_usage.after_write"
