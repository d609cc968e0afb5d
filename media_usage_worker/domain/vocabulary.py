"""Every state, status, outcome and code the project stores or reports, defined once.

The values are emdash 0.34.0's strings (codes marked "own" are this project's), so rows stay
compatible with emdash. Each enum is a ``StrEnum``: a member *is* its string, so it binds as
an SQL parameter, serialises as JSON and compares equal to what a row holds.
"""

from __future__ import annotations

from enum import StrEnum


class WorkState(StrEnum):
    """``_emdash_media_usage_work.state`` (docs/design.md, "Work states")."""

    PENDING = "pending"
    RETRY = "retry"
    LEASED = "leased"
    FAILED = "failed"


# Claimable-when-due states, in the order the tick fans them out: expired leases first (their
# holders died), then retries, then fresh work.
DUE_STATES = (WorkState.LEASED, WorkState.RETRY, WorkState.PENDING)


# ``_emdash_media_usage_reconciliations.state``: a coordinator row is leased, retried and
# failed exactly as a work row is, with the same four values.
ReconciliationState = WorkState


class ReconciliationPhase(StrEnum):
    SCAN = "scan"
    SOURCES = "sources"


# ``_emdash_media_usage_collection_deletions.state``: a tombstone is leased, retried and failed
# as a work row is.
DeletionState = WorkState


class DeletionPhase(StrEnum):
    """A collection deletion's phases, in order (docs/design.md, "Deleting a collection").

    The first three run in the deleting call; the rest run in batches as Celery work.
    """

    FENCE = "fence"
    REGISTRY = "registry"
    TABLE = "table"
    WORK = "work"
    SOURCES = "sources"
    STATUS = "status"
    FINALIZE = "finalize"


class DeletionOutcome(StrEnum):
    """What deleting a collection answered."""

    DELETED = "deleted"  # the front phases are done; the rest follows as work
    IN_PROGRESS = "in_progress"  # another caller holds the deletion now
    HAS_CONTENT = "has_content"  # entries remain and the deletion was not forced: nothing changed
    # an earlier call deleted it; its clean-up goes on as work (or has finished: not found)
    ALREADY_DELETED = "already_deleted"


class ReconciliationAction(StrEnum):
    """What one reconciliation step did (the reconcile tick's report counts them)."""

    STARTED = "started"  # a run began: new epoch, scan range fixed
    RESTARTED = "restarted"  # the collection changed under the run: it began again
    DEFERRED = "deferred"  # the collection is being written or deleted: tried again shortly
    ENQUEUED = "enqueued"  # a page of ids became work at the run's epoch
    AHEAD = "ahead"  # enough work queued ahead of the workers: the drain wakes it
    WAITING = "waiting"  # the run's work has not drained yet
    SOURCES = "sources"  # the scan is done: on to entries whose content is gone
    COMPLETED = "completed"  # coverage is complete
    FAILED = "failed"  # the step failed (retried), or an entry failed the run
    RULES_CHANGED = "rules_changed"  # indexed under other rules or fields: reconciled again
    # a collection the CMS created itself, or a built-in source whose table's columns changed:
    # captured, to be reconciled
    CAPTURED = "captured"


class DeletionStepEnd(StrEnum):
    """How one step of a deletion ended when it left no tombstone to go on with."""

    FINISHED = "finished"  # the tombstone is gone: nothing of the collection is left
    HAS_CONTENT = "has_content"  # live entries remain, not forced: the deletion was withdrawn
    LEASE_LOST = "lease_lost"  # another worker holds the deletion now; this step changed nothing


class CaptureState(StrEnum):
    """``_emdash_index_status.capture_state`` (NULL before activation)."""

    INSTALLING = "installing"
    READY = "ready"
    ACTIVE = "active"
    DELETING = "deleting"


class ActivationState(StrEnum):
    """``_emdash_media_usage_activation.state``: the global capture switch."""

    EXPANDED = "expanded"  # migrated, capture not started
    ACTIVATING = "activating"
    ACTIVE = "active"


class CoverageStatus(StrEnum):
    """A collection's coverage; only ``complete`` may answer "used nowhere"."""

    NEVER = "never"
    RUNNING = "running"
    COMPLETE = "complete"
    PARTIAL = "partial"
    FAILED = "failed"
    STALE = "stale"
    UNKNOWN = "unknown"


class Outcome(StrEnum):
    """What processing one work message did."""

    COMPLETED = "completed"  # indexed; the work row is gone
    OBSOLETE = "obsolete"  # its collection is gone; the work row is gone
    SUPERSEDED = "superseded"  # a newer version or another holder took the row meanwhile
    CLAIM_LOST = "claim_lost"  # not due at this version: a stale or duplicate message
    RETRY = "retry"  # failed this time; due again after a backoff
    FAILED = "failed"  # failed for good


class RetryOutcome(StrEnum):
    """What an operator's ``work retry`` found."""

    PENDING = "pending"
    LEASE_ACTIVE = "lease_active"
    COLLECTION_NOT_FOUND = "collection_not_found"
    # own: the entry has no work, no content row and nothing in the index; a retry would
    # only queue work for an id nobody wrote
    CONTENT_NOT_FOUND = "content_not_found"
    CONFLICT = "conflict"


class ErrorCode(StrEnum):
    """Codes stored in ``last_error_code`` of work, status and reconciliation rows."""

    SNAPSHOT_FAILED = "MEDIA_USAGE_SNAPSHOT_FAILED"
    GENERATION_CONFLICT = "MEDIA_USAGE_GENERATION_CONFLICT"
    RESOURCE_LIMIT = "MEDIA_USAGE_RESOURCE_LIMIT"
    PROCESSING_FAILED = "MEDIA_USAGE_PROCESSING_FAILED"
    RECONCILIATION_FAILED = "MEDIA_USAGE_RECONCILIATION_FAILED"
    RECONCILIATION_ENTRY_FAILED = "MEDIA_USAGE_RECONCILIATION_ENTRY_FAILED"
    # own: the item ran past the worker's soft time limit
    TIME_LIMIT = "MEDIA_USAGE_TIME_LIMIT"
    # own: the database holds an id this project cannot use (empty, longer than 1,024
    # characters, NUL, or not UTF-8); such an entry is never indexed
    UNUSABLE_CONTENT_ID = "MEDIA_USAGE_UNUSABLE_CONTENT_ID"
    # coverage made stale by a field change or a capture that was switched off
    STALE = "CONTENT_USAGE_STALE"
    # own: the collection was indexed under other extraction rules (a new version of this
    # project, or its declared rules changed); reconciliation re-indexes it
    RULES_CHANGED = "MEDIA_USAGE_RULES_CHANGED"
    # a repair that a concurrent write overtook
    REPAIR_CONFLICT = "CONTENT_USAGE_REPAIR_CONFLICT"
    # own: an operator asked for the collection to be re-indexed (POST .../repair); the
    # reconciliation does it
    REINDEX_REQUESTED = "MEDIA_USAGE_REINDEX_REQUESTED"
    # a collection deletion's step failed (retried, then failed for good)
    COLLECTION_DELETION_FAILED = "MEDIA_USAGE_COLLECTION_DELETION_FAILED"
    # own: a media-bearing value could not be read whole (nested past the depth bound, or not
    # valid JSON); the entry is not indexed, so coverage is not complete and nothing is retired
    UNREADABLE_VALUE = "MEDIA_USAGE_UNREADABLE_VALUE"


class RefreshCode(StrEnum):
    """Why one entry's refresh did not finish; ``policy.work_error_code`` maps each to the
    ``ErrorCode`` its work row stores."""

    GENERATION_CONFLICT = "CONTENT_USAGE_GENERATION_CONFLICT"
    RESOURCE_LIMIT = "CONTENT_USAGE_RESOURCE_LIMIT"
    REFRESH_ERROR = "CONTENT_USAGE_REFRESH_ERROR"
    DRAFT_REVISION_NOT_FOUND = "DRAFT_REVISION_NOT_FOUND"
    DRAFT_REVISION_INVALID = "DRAFT_REVISION_INVALID"
    DRAFT_REVISION_MISMATCH = "DRAFT_REVISION_MISMATCH"
    INVALID_REPEATER_VALIDATION = "INVALID_REPEATER_VALIDATION"
    # own: a media-bearing value could not be read whole (``UnreadableValue``)
    UNREADABLE_VALUE = "MEDIA_USAGE_UNREADABLE_VALUE"
