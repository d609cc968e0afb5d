"""The project's exception tree.

Each class's docstring is its default message, so ``raise RepairNotPossible()`` says enough.
Every exception the project raises on purpose is here, so the CLI catches them all as
``MediaUsageError``.
Every bad-argument error is also a ``ValueError`` so callers that only know the standard
library can still catch it.
"""

from __future__ import annotations

from media_usage_worker.domain.vocabulary import RefreshCode


class MediaUsageError(Exception):
    """Media usage operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class InvalidArgument(MediaUsageError, ValueError):
    """Invalid argument for a media usage operation."""


class NowhereToPurge(InvalidArgument):
    """Nowhere to send purged files: set MEDIA_USAGE_PURGE_TASK (a host task) or
    MEDIA_USAGE_STORAGE_DIR (a local directory)."""

    def __init__(self) -> None:
        super().__init__(
            "Nowhere to send purged files: set MEDIA_USAGE_PURGE_TASK (a host task) or "
            "MEDIA_USAGE_STORAGE_DIR (a local directory)."
        )


class InvalidMessage(InvalidArgument):
    """The broker message is malformed and was dropped."""


class InvalidDatabaseURL(InvalidArgument):
    """The database URL is malformed or names an unsupported database."""


class InvalidSlug(InvalidArgument):
    """Slugs must be lower-case letters, digits and underscores, starting with a letter."""


class InvalidCursor(InvalidArgument):
    """The cursor is malformed, or was not issued by this service for this listing."""


class InvalidSetting(InvalidArgument):
    """A MEDIA_USAGE_* setting has a value that is not allowed."""


class BindingConflict(MediaUsageError):
    """The host app already has a different task or beat entry under one of this project's
    names; nothing was bound."""


class InvalidRule(InvalidArgument):
    """The extraction rule is malformed; nothing was stored."""


class RuleNotFound(MediaUsageError):
    """No such rule is declared."""


class InvalidSource(InvalidArgument):
    """The source is not one this project can index; nothing was stored."""


class SourceNotFound(MediaUsageError):
    """No such source is declared."""


class DowngradeRefused(MediaUsageError):
    """Downgrade refused: media usage state still exists."""


class CollectionExists(MediaUsageError):
    """A collection with this slug already exists."""


class CollectionNotFound(MediaUsageError):
    """No collection has this slug."""


class FieldExists(InvalidArgument):
    """The collection already has a field or column with this slug."""


class EntryTooLarge(MediaUsageError):
    """The entry exceeds this worker's per-item limits; it is not indexed (resource limit)."""


class UnreadableValue(MediaUsageError):
    """A media-bearing value cannot be read whole (nested past the depth bound, or not valid
    JSON); the entry is not indexed, so coverage stays not complete and nothing is retired."""

    code = RefreshCode.UNREADABLE_VALUE


class UnsafeIdentity(InvalidArgument):
    """A collection identity that cannot be baked into trigger SQL."""


class DeletionConflict(MediaUsageError):
    """The collection is already being deleted under another identity or force flag."""


class CaptureInactive(MediaUsageError):
    """Capture is not active (run media-usage activate first); nothing was changed."""


class ActivationError(MediaUsageError):
    """Incremental capture could not be activated; nothing was changed."""


class RepairNotPossible(MediaUsageError):
    """Repair needs active capture on a registered collection with no run in progress."""


class FieldDiscoveryError(MediaUsageError):
    """A repeater's validation JSON cannot be read (INVALID_REPEATER_VALIDATION)."""

    code = RefreshCode.INVALID_REPEATER_VALIDATION


class ItemsFailed(MediaUsageError):
    """Work items of this message failed for good; media-usage work list --state failed shows
    them."""

    def __init__(self, summary: dict[str, object]) -> None:
        # The task's summary rides on the exception, so a monitor that filters by state
        # (Flower's FAILURE) still sees every outcome of the message.
        self.summary = summary
        failed = summary.get("failed")
        named = [
            f"{item[0]}/{item[1]} ({item[2]})"
            for item in (failed if isinstance(failed, list) else [])
            if isinstance(item, list | tuple) and len(item) == 3
        ]
        shown = ", ".join(named) or "none named"
        super().__init__(f"{(self.__doc__ or '').split(';')[0].strip()}: {shown}")

    def __reduce__(self) -> tuple[type[ItemsFailed], tuple[dict[str, object]]]:
        # Celery copies an exception by pickling it before it reports the failure.
        return (ItemsFailed, (self.summary,))


class DatabaseNotReady(MediaUsageError):
    """The database does not exist yet or lacks this code's schema: run media-usage db upgrade."""


class CannotAdopt(MediaUsageError):
    """An existing media usage table cannot be adopted as it is (a column of another type):
    nothing was changed."""
