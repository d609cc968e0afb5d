"""The project's exception tree.

Each class's docstring is its default message, so ``raise CaptureInactive()`` says enough.
Every bad-argument error is also a ``ValueError`` so callers that only know the standard
library can still catch it.
"""

from __future__ import annotations


class MediaUsageError(Exception):
    """Media usage operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class InvalidArgument(MediaUsageError, ValueError):
    """Invalid argument for a media usage operation."""


class InvalidMessage(InvalidArgument):
    """The broker message is malformed and was dropped."""


class InvalidDatabaseURL(InvalidArgument):
    """The database URL is malformed or names an unsupported database."""


class InvalidSlug(InvalidArgument):
    """Slugs must be lower-case letters, digits and underscores, starting with a letter."""


class InvalidCursor(InvalidArgument):
    """The cursor is malformed or was not issued by this service."""


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


class CaptureInactive(MediaUsageError):
    """media usage capture inactive"""
