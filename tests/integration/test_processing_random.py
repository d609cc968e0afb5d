"""1,000 hypothesis-generated entries, processed via the work table, equal a fresh extraction."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.index_oracle import (
    actual_index,
    actual_source_keys,
    expected_index,
    expected_source_keys,
)
from tests.integration.test_processing import FIELDS
from tests.support import active_collection, drain, examples

media = st.sampled_from(["m1", "m2", "m3", "  m4 ", "dir/x", "https://cdn/x.png", "", "m5"])
mime = st.sampled_from([None, "image/png", "application/pdf; charset=x", "video/mp4", "weird", 7])
provider = st.sampled_from([None, "local", "s3", " cloud ", "external", ""])
reference = st.one_of(
    st.none(),
    media,
    st.fixed_dictionaries({"id": media}, optional={"provider": provider, "mimeType": mime}),
    st.integers(),
    st.lists(media, max_size=2),
)
gallery = st.one_of(
    st.none(),
    st.lists(
        st.one_of(st.fixed_dictionaries({"image": reference}), st.text(max_size=3)), max_size=4
    ),
)
block = st.one_of(
    st.fixed_dictionaries(
        {
            "_type": st.just("image"),
            "asset": st.fixed_dictionaries(
                {}, optional={"_ref": media, "id": media, "provider": provider, "mimeType": mime}
            ),
        }
    ),
    st.fixed_dictionaries({"_type": st.just("block"), "children": st.just([])}),
)
body = st.one_of(st.none(), st.lists(block, max_size=4))
entry = st.fixed_dictionaries(
    {
        # Host writes cannot put NUL into PostgreSQL text columns; drafts (JSON) can.
        "title": st.one_of(
            st.none(),
            st.text(
                st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                max_size=10,
            ),
        ),
        "hero": reference,
        "doc": reference,
        "gallery": gallery,
        "body": body,
        "status": st.sampled_from(["draft", "published"]),
        "deleted": st.booleans(),
        "draft": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={
                    "hero": reference,
                    "gallery": gallery,
                    "title": st.text(max_size=5),
                    "_slug": st.text(max_size=5),
                },
            ),
        ),
    }
)


def encode(value):
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


@pytest.fixture
def posts_with_fields(db: sa.Engine):
    return active_collection(db, "posts", FIELDS)


def test_random_entries_index_equals_a_fresh_extraction(db: sa.Engine, posts_with_fields) -> None:
    batch = {"n": 0}
    runs = examples(5, 10)

    @settings(
        max_examples=runs,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
        ],
    )
    @given(st.lists(entry, min_size=100, max_size=100))
    def check(entries: list[dict]) -> None:
        batch["n"] += 1
        with db.begin() as conn:
            for i, data in enumerate(entries):
                content_id = f"b{batch['n']}-{i:03d}"
                draft_id = None
                if data["draft"] is not None:
                    draft_id = f"r-{content_id}"
                    conn.execute(
                        sa.text(
                            "INSERT INTO revisions (id, collection, entry_id, data) "
                            "VALUES (:id, 'posts', :e, :d)"
                        ),
                        {"id": draft_id, "e": content_id, "d": json.dumps(data["draft"])},
                    )
                conn.execute(
                    sa.text(
                        "INSERT INTO ec_posts (id, slug, title, hero, doc, gallery, body, status, "
                        "deleted_at, draft_revision_id) VALUES (:id, :id, :title, :hero, :doc, "
                        ":gallery, :body, :status, :deleted, :draft)"
                    ),
                    {
                        "id": content_id,
                        "title": data["title"],
                        "hero": encode(data["hero"]),
                        "doc": encode(data["doc"]),
                        "gallery": encode(data["gallery"]),
                        "body": encode(data["body"]),
                        "status": data["status"],
                        "deleted": "2026-01-01T00:00:00.000Z" if data["deleted"] else None,
                        "draft": draft_id,
                    },
                )
        outcomes = {r.outcome for r in drain(db)}
        assert outcomes == {"completed"}
        actual, expected = actual_index(db), expected_index(db)
        assert actual == expected, (sorted(expected - actual)[:3], sorted(actual - expected)[:3])
        assert actual_source_keys(db) == expected_source_keys(db)

    check()
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM ec_posts")).scalar_one() == 100 * runs
        assert (
            conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_work")).scalar_one() == 0
        )
