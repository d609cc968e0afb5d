"""Ways around the clean-up's rule, each closed (both dialects).

The rule (docs/design.md §13): an item is retired, and its file purged, only while coverage is
complete, no captured write waits, no current occurrence names it by id or by URL, and no other
library or quarantined row names its storage key. Each test here is one way a used file could
still have gone, tried as a user or an attacker would.
"""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.repository import cleanup as store
from media_usage_worker.repository.collections import create_collection
from media_usage_worker.repository.schema import work
from tests.integration.test_cleanup import cleanup_site, rows, sql
from tests.integration.test_sources import settle
from tests.support import drain

FILE_URL = "/_emdash/api/media/file/"


@pytest.fixture
def library(db: sa.Engine) -> sa.Engine:
    """The clean-up tests' site: posts using m4 (live) and m5 (trashed); m1..m3 unused."""
    return cleanup_site(db)


def in_quarantine(engine: sa.Engine) -> set[str]:
    return {r[0] for r in rows(engine, "SELECT id FROM _media_usage_worker_quarantine")}


def in_library(engine: sa.Engine) -> set[str]:
    return {r[0] for r in rows(engine, "SELECT id FROM media")}


def work_codes(engine: sa.Engine) -> list[tuple[str, str, str]]:
    with engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.select(work.c.content_id, work.c.state, work.c.last_error_code)
            )
        ]


# --- a URL use of a retired item ------------------------------------------------------------------


def test_a_url_use_of_a_retired_item_restores_it(library) -> None:
    assert MediaUsage(library).retire(["m1"]).retired == ["m1"]
    sql(library, "INSERT INTO ec_posts (id, hero) VALUES ('p9', :u)", u=FILE_URL + "a.png")
    drain(library)
    assert "m1" in in_library(library) and "m1" not in in_quarantine(library)
    assert MediaUsage(library).is_unused("m1") is False
    (last,) = [a for a in store.audit_page(library, 5) if a["action"] == "restore"]
    assert (last["actor"], last["media_ids"]) == ("worker", ["m1"])


# --- nesting past the bound fails the entry, never "no reference" ---------------------------------


def _nested(depth: int) -> object:
    value: object = {"_type": "custom", "leaf": "x"}
    for _ in range(depth):
        value = {"_type": "custom", "child": value}
    return value


def _deep_text(depth: int) -> str:
    return '{"_type": "custom", "child": ' * depth + '"x"' + "}" * depth


def test_a_portable_text_body_nested_deep_fails_its_entry(library) -> None:
    create_collection(library, "pages", "Pages", [FieldDefinition("body", "Body", "portableText")])
    settle(library)
    image = {"_type": "image", "asset": {"_ref": "m1"}}
    for name, depth in (("past_the_parser", 1200), ("past_the_bound", 300)):
        body = "[" + json.dumps(image) + ", " + _deep_text(depth) + "]"
        sql(library, "INSERT INTO ec_pages (id, body) VALUES (:i, :b)", i=name, b=body)
    drain(library)
    assert sorted(work_codes(library)) == [
        ("past_the_bound", "failed", "MEDIA_USAGE_UNREADABLE_VALUE"),
        ("past_the_parser", "failed", "MEDIA_USAGE_UNREADABLE_VALUE"),
    ]
    index = MediaUsage(library)
    assert index.coverage().status == "partial"
    assert not index.unused().known
    assert index.retire(["m1"]).refused == {"m1": "not_known_yet"}
    # Within the bound the same body is read whole, and its image is a use.
    sql(library, "DELETE FROM ec_pages")
    body = json.dumps([image, _nested(20)])
    sql(library, "INSERT INTO ec_pages (id, body) VALUES ('shallow', :b)", b=body)
    drain(library)
    assert MediaUsage(library).usage_count("m1") == 1


def test_a_setting_nested_deep_fails_its_row(library) -> None:
    value = '{"logo": {"mediaId": "m2"}, "extra": ' + "[" * 1200 + "]" * 1200 + "}"
    sql(library, "INSERT INTO options (name, value) VALUES ('site:deep', :v)", v=value)
    drain(library)
    assert [code for _, _, code in work_codes(library)] == ["MEDIA_USAGE_UNREADABLE_VALUE"]
    assert MediaUsage(library).retire(["m2"]).refused == {"m2": "not_known_yet"}


def test_text_that_starts_like_json_and_is_not_fails_its_entry(library, dialect) -> None:
    if dialect == "postgresql":
        pytest.skip("PostgreSQL's json columns refuse text that is not JSON")
    create_collection(library, "pages", "Pages", [FieldDefinition("body", "Body", "portableText")])
    settle(library)
    sql(library, "INSERT INTO ec_pages (id, body) VALUES ('torn', :b)", b='[{"_type": "image", "as')
    drain(library)
    assert work_codes(library) == [("torn", "failed", "MEDIA_USAGE_UNREADABLE_VALUE")]
