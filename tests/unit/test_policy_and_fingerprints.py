"""Retry policy, limits, fingerprints, snapshots and coverage aggregation: pure rules."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from media_usage_worker.domain import coverage, policy
from media_usage_worker.domain.errors import EntryTooLarge
from media_usage_worker.domain.extraction import ExtractionField, Occurrence
from media_usage_worker.domain.fingerprint import (
    PROJECTION_PATTERN,
    PROJECTION_PREFIX,
    SOURCE_PAYLOAD_KEYS,
    canonical_json,
    projection,
)
from media_usage_worker.domain.snapshots import (
    Revision,
    build_snapshots,
)
from media_usage_worker.domain.vocabulary import ErrorCode, RefreshCode
from tests.support import examples


@pytest.mark.parametrize(
    ("attempts", "low", "high"),
    [(0, 30, 37), (1, 60, 74), (2, 120, 149), (3, 240, 299), (5, 900, 900), (40, 900, 900)],
)
def test_retry_delay_bounds(attempts: int, low: int, high: int) -> None:
    assert policy.retry_delay_seconds(attempts, lambda: 0.0) == low
    assert policy.retry_delay_seconds(attempts, lambda: 0.999999) == high


def test_terminal_rules() -> None:
    assert policy.is_terminal(ErrorCode.RESOURCE_LIMIT, 0)
    assert not policy.is_terminal(ErrorCode.SNAPSHOT_FAILED, 3)
    assert policy.is_terminal(ErrorCode.SNAPSHOT_FAILED, 4)


def test_error_code_mapping() -> None:
    assert policy.work_error_code("DRAFT_REVISION_INVALID") == "MEDIA_USAGE_SNAPSHOT_FAILED"
    assert policy.work_error_code("CONTENT_USAGE_RESOURCE_LIMIT") == "MEDIA_USAGE_RESOURCE_LIMIT"
    assert policy.work_error_code("CONTENT_USAGE_GENERATION_CONFLICT") == (
        "MEDIA_USAGE_GENERATION_CONFLICT"
    )
    assert policy.work_error_code("CONTENT_USAGE_REFRESH_ERROR") == "MEDIA_USAGE_PROCESSING_FAILED"


def test_limits_from_env() -> None:
    assert policy.Limits.from_env({}) == policy.Limits(50_000, 16 * 1024 * 1024)
    assert policy.Limits.from_env({"MEDIA_USAGE_MAX_OCCURRENCES": "12"}).max_occurrences == 12
    assert policy.Limits.from_env({"MEDIA_USAGE_MAX_ENTRY_CHARS": "7"}).max_entry_chars == 7
    for bad in ("0", "-3", "x", "1.5"):
        with pytest.raises(ValueError, match="MEDIA_USAGE_MAX_INDEX_BYTES"):
            policy.Limits.from_env({"MEDIA_USAGE_MAX_INDEX_BYTES": bad})


def test_canonical_json_matches_json_stringify_of_sorted_keys() -> None:
    assert canonical_json({"b": 1, "a": [None, "é", float("inf")]}) == '{"a":[null,"é",null],"b":1}'


FIELDS = [ExtractionField("hero", "image")]
ROW = {
    "id": "e1",
    "slug": "hello",
    "status": "draft",
    "version": 3,
    "updated_at": "u",
    "locale": "en",
    "hero": '{"id": "m1"}',
    "title": "  ",
    "name": "Named",
    "live_revision_id": "r0",
    "draft_revision_id": None,
}


def snapshots(row=ROW, revision=None):
    return build_snapshots(
        collection_id="C1",
        collection_slug="posts",
        fields=FIELDS,
        row=row,
        display_fields=["title", "name"],
        revision=revision,
    )


def test_columns_snapshot_metadata() -> None:
    result = snapshots()
    assert result.draft is None and result.draft_error is None
    source = result.columns.source
    assert source["source_key"] == "content:C1:e1:columns"
    assert (source["content_title"], source["revision_id"], source["source_version"]) == (
        "Named",
        "r0",
        3,
    )
    assert PROJECTION_PATTERN.fullmatch(result.columns.fingerprint)
    assert [o.media_id for o in result.columns.occurrences] == ["m1"]


def test_draft_overlay_merges_revision_data() -> None:
    row = {**ROW, "draft_revision_id": "r1"}
    revision = Revision(
        "posts", "e1", '{"hero": "m2", "_slug": "new-slug", "title": "Draft", "_rev": 1}'
    )
    result = snapshots(row, revision)
    draft = result.draft.source
    assert (
        draft["source_key"],
        draft["content_slug"],
        draft["content_title"],
        draft["revision_id"],
    ) == (
        "content:C1:e1:draft_overlay",
        "new-slug",
        "Draft",
        "r1",
    )
    assert [o.media_id for o in result.draft.occurrences] == ["m2"]
    assert result.columns.fingerprint != result.draft.fingerprint


@pytest.mark.parametrize(
    ("revision", "code"),
    [
        (None, RefreshCode.DRAFT_REVISION_NOT_FOUND),
        (Revision("posts", "e1", "not json"), RefreshCode.DRAFT_REVISION_INVALID),
        (Revision("posts", "e1", "[1]"), RefreshCode.DRAFT_REVISION_INVALID),
        (Revision("pages", "e1", "{}"), RefreshCode.DRAFT_REVISION_MISMATCH),
        (Revision("posts", "e2", "{}"), RefreshCode.DRAFT_REVISION_MISMATCH),
    ],
)
def test_draft_failures(revision, code) -> None:
    result = snapshots({**ROW, "draft_revision_id": "r1"}, revision)
    assert result.draft is None and result.draft_error == code and result.columns is not None


def test_fingerprint_ignores_version_but_not_references() -> None:
    a = snapshots().columns.fingerprint
    assert snapshots({**ROW, "version": 9, "updated_at": "later"}).columns.fingerprint == a
    assert snapshots({**ROW, "hero": "m9"}).columns.fingerprint != a


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], "complete"),
        (["complete", "complete"], "complete"),
        (["complete", "unknown"], "unknown"),
        (["running", "stale"], "running"),
        (["stale", "partial"], "stale"),
        (["never", "never"], "never"),
        (["failed"], "failed"),
        (["never", "failed"], "partial"),
        (["complete", "never"], "partial"),
    ],
)
def test_coverage_aggregate(statuses, expected) -> None:
    assert coverage.aggregate(statuses) == expected


def test_scope_status() -> None:
    assert coverage.scope_status(None, None, None) == "never"
    assert coverage.scope_status("complete", 0, 1) == "complete"
    assert coverage.scope_status("complete", 1, 1) == "stale"
    assert coverage.scope_status("complete", 0, 2) == "stale"
    assert coverage.scope_status("weird", 0, 1) == "unknown"


def test_an_entry_over_the_size_limit_is_refused_before_its_text_is_parsed() -> None:
    class Unparsable(str):
        """Text that fails the test if anything tries to parse it."""

        def __getitem__(self, key):  # parse_column looks at the first character
            raise AssertionError("the oversized text was parsed")

    limits = policy.Limits(max_entry_chars=100)
    row = {**ROW, "hero": Unparsable("[" + "x" * 100)}
    with pytest.raises(EntryTooLarge, match="101 characters"):
        build_snapshots(
            collection_id="C1", collection_slug="posts", fields=FIELDS, row=row,
            display_fields=[], revision=None, limits=limits,
        )  # fmt: skip
    # The draft's text counts too.
    draft = Revision("posts", "e1", json.dumps({"hero": "m2", "pad": "y" * 80}))
    with pytest.raises(EntryTooLarge):
        build_snapshots(
            collection_id="C1", collection_slug="posts", fields=FIELDS,
            row={**ROW, "draft_revision_id": "r1"}, display_fields=[], revision=draft,
            limits=limits,
        )  # fmt: skip
    assert build_snapshots(
        collection_id="C1", collection_slug="posts", fields=FIELDS, row=ROW,
        display_fields=[], revision=None, limits=limits,
    ).columns.occurrences  # fmt: skip


_text = st.one_of(st.none(), st.text(max_size=8))
_occurrence = st.builds(
    Occurrence, st.text(max_size=6), st.text(max_size=12), st.sampled_from(["image", "file"]),
    _text, st.text(max_size=4), st.text(max_size=6), _text, _text, st.integers(0, 5),
)  # fmt: skip
_source = st.dictionaries(
    st.sampled_from(SOURCE_PAYLOAD_KEYS),
    st.one_of(_text, st.integers(), st.floats(allow_nan=True, allow_infinity=True)),
)


@settings(max_examples=examples(100, 1000))
@given(st.text(min_size=1, max_size=6), _source, st.lists(_occurrence, max_size=6))
def test_projection_text_is_canonical_json_of_the_whole_payload(
    collection_id, source, occurrences
) -> None:
    # The fingerprint is put together from parts; it must equal canonical JSON of the whole.
    fields = [ExtractionField("hero", "image"), ExtractionField("body", "portableText")]
    payload = {
        "fingerprintVersion": 1,
        "collectionId": collection_id,
        "extractionSchema": [f.schema() for f in sorted(fields, key=lambda f: f.slug)],
        "source": {
            **{key: source.get(key) for key in SOURCE_PAYLOAD_KEYS},
            "schemaVersion": 1,
            "sourceCompleteness": "complete",
        },
        "occurrences": sorted((o.payload() for o in occurrences), key=canonical_json),
    }
    text = canonical_json(payload).encode("utf-8")
    expected = PROJECTION_PREFIX + hashlib.sha256(text).hexdigest()
    assert projection(collection_id, fields, source, occurrences) == (expected, len(text))
