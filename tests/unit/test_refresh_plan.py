"""The refresh plan of one entry, without a database: what it keeps, replaces and removes, when it
refuses, and how media file URLs are resolved from keys already read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import EntryTooLarge
from media_usage_worker.domain.extraction import MediaUrls
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.refresh_plan import (
    EntryState,
    EntryWrite,
    StorageKeys,
    columns_to_read,
    is_unchanged,
    plan_refresh,
)
from media_usage_worker.domain.snapshots import ContentEntry
from media_usage_worker.domain.vocabulary import RefreshCode

FIELDS = [
    FieldDefinition("title", "Title", "string"),
    FieldDefinition("hero", "Hero", "image"),
    FieldDefinition("body", "Body", "portableText"),
]
ENTRY = ContentEntry("01COLLECTION", "posts", "e1")
PREFIX = "https://cdn.example.com/media/"


def _state(row: dict[str, Any] | None, observed: dict[str, dict[str, Any]] | None = None) -> Any:
    return EntryState(ENTRY, row, None, observed or {})


def _row(**values: Any) -> dict[str, Any]:
    return {"id": "e1", "slug": "e1", "version": 1, "title": "One", **values}


def _plan(state: EntryState, urls: MediaUrls | None = None, limits: Limits | None = None) -> Any:
    return plan_refresh(state, FIELDS, limits or Limits(), None, urls=urls or MediaUrls())


def _as_observed(write: EntryWrite) -> dict[str, dict[str, Any]]:
    """The source rows a successful write leaves, as the next read would observe them."""
    return {
        snapshot.variant: {
            "source_fingerprint": snapshot.fingerprint,
            "source_completeness": "complete",
            "last_error_code": None,
        }
        for snapshot, _ in write.replace
    }


def test_a_new_entry_replaces_every_variant_and_keeps_nothing() -> None:
    plan = _plan(_state(_row(hero="m1")))
    assert isinstance(plan, EntryWrite)
    assert [s.variant for s, observed in plan.replace] == ["columns"]
    assert [o.media_id for o in plan.replace[0][0].occurrences] == ["m1"]
    assert plan.keep == () and plan.remove == () and not plan.content_absent


def test_an_unchanged_entry_is_kept_and_a_changed_one_replaced() -> None:
    first = _plan(_state(_row(hero="m1")))
    observed = _as_observed(first)
    again = _plan(_state(_row(hero="m1"), observed))
    assert [s.variant for s, _ in again.keep] == ["columns"] and again.replace == ()
    changed = _plan(_state(_row(hero="m2"), observed))
    assert changed.keep == () and [s.variant for s, _ in changed.replace] == ["columns"]


def test_a_source_with_an_error_or_incomplete_is_never_unchanged() -> None:
    snapshot = _plan(_state(_row(hero="m1"))).replace[0][0]
    good = {"source_fingerprint": snapshot.fingerprint, "source_completeness": "complete"}
    assert is_unchanged(snapshot, {**good, "last_error_code": None})
    assert not is_unchanged(snapshot, {**good, "last_error_code": "E"})
    assert not is_unchanged(snapshot, {**good, "source_completeness": "partial",
                                       "last_error_code": None})  # fmt: skip
    assert not is_unchanged(snapshot, None)


def test_a_gone_entry_removes_its_sources_only_while_it_stays_gone() -> None:
    observed = {"columns": {"source_key": "k1"}, "draft_overlay": {"source_key": "k2"}}
    plan = _plan(_state(None, observed))
    assert plan == EntryWrite(remove=tuple(observed.values()), content_absent=True)


def test_a_source_no_longer_wanted_is_removed() -> None:
    observed = {"draft_overlay": {"source_key": "draft"}}
    plan = _plan(_state(_row(hero="m1"), observed))
    assert plan.remove == ({"source_key": "draft"},)


def test_over_the_limits_refuses_and_a_missing_draft_is_its_code() -> None:
    body = [{"_type": "image", "asset": {"_ref": f"m{n}"}} for n in range(5)]
    row = _row(body=json.dumps(body))
    with pytest.raises(EntryTooLarge):
        _plan(_state(row), limits=Limits(max_occurrences=3))
    assert isinstance(_plan(_state(row), limits=Limits(max_occurrences=5)), EntryWrite)
    # Only what would be written counts against the index size: an unchanged entry is kept.
    small = Limits(max_index_bytes=10)
    assert _plan(_state(row), limits=small) == RefreshCode.RESOURCE_LIMIT
    observed = _as_observed(_plan(_state(row)))
    assert isinstance(_plan(_state(row, observed), limits=small), EntryWrite)
    drafted = _row(hero="m1", draft_revision_id="r1")
    assert _plan(_state(drafted)) == RefreshCode.DRAFT_REVISION_NOT_FOUND


def test_media_urls_are_answered_from_keys_read_and_the_others_noted() -> None:
    keys = StorageKeys()
    urls = MediaUrls((PREFIX,), keys)
    row = _row(hero=f"{PREFIX}photo.jpg")
    first = _plan(_state(row), urls)
    # Not read yet: no reference, and the plan says which key it needs.
    assert list(first.replace[0][0].occurrences) == []
    assert keys.missing == {"photo.jpg"}
    keys.learn({"photo.jpg": "m-photo"})
    assert keys.missing == set()
    second = _plan(_state(row), urls)
    assert [o.media_id for o in second.replace[0][0].occurrences] == ["m-photo"]
    # A key no media item has is remembered as such: it is not asked for again.
    keys.learn({})
    _plan(_state(_row(hero=f"{PREFIX}nothing.jpg")), urls)
    keys.learn({})
    _plan(_state(_row(hero=f"{PREFIX}nothing.jpg")), urls)
    assert keys.missing == set() and keys.known["nothing.jpg"] is None


def test_columns_to_read_are_media_fields_by_slug_then_display_fields() -> None:
    assert columns_to_read(FIELDS) == ["body", "hero", "title"]


def test_every_answer_for_an_unread_key_is_counted_even_for_a_key_already_noted() -> None:
    """A plan that met only keys another plan had already noted still answered ``None`` for
    them: the count of misses, not the set of keys, says that it must be made again."""
    keys = StorageKeys()
    assert keys("a.jpg") is None and keys.misses == 1
    assert keys("a.jpg") is None and keys.misses == 2 and keys.missing == {"a.jpg"}
    keys.learn({"a.jpg": "m-a"})
    assert keys("a.jpg") == "m-a" and keys.misses == 2
