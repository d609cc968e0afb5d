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
from tests.integration.test_cleanup import rows, site, sql  # noqa: F401  (the fixture)
from tests.integration.test_sources import settle
from tests.support import drain

FILE_URL = "/_emdash/api/media/file/"


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


def test_a_url_use_of_a_retired_item_restores_it(site) -> None:
    assert MediaUsage(site).retire(["m1"]).retired == ["m1"]
    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p9', :u)", u=FILE_URL + "a.png")
    drain(site)
    assert "m1" in in_library(site) and "m1" not in in_quarantine(site)
    assert MediaUsage(site).is_unused("m1") is False
    (last,) = [a for a in store.audit_page(site, 5) if a["action"] == "restore"]
    assert (last["actor"], last["media_ids"]) == ("worker", ["m1"])


# --- nesting past the bound fails the entry, never "no reference" ---------------------------------


def _nested(depth: int) -> object:
    value: object = {"_type": "custom", "leaf": "x"}
    for _ in range(depth):
        value = {"_type": "custom", "child": value}
    return value


def _deep_text(depth: int) -> str:
    return '{"_type": "custom", "child": ' * depth + '"x"' + "}" * depth


def test_a_portable_text_body_nested_deep_fails_its_entry(site) -> None:
    create_collection(site, "pages", "Pages", [FieldDefinition("body", "Body", "portableText")])
    settle(site)
    image = {"_type": "image", "asset": {"_ref": "m1"}}
    for name, depth in (("past_the_parser", 1200), ("past_the_bound", 300)):
        body = "[" + json.dumps(image) + ", " + _deep_text(depth) + "]"
        sql(site, "INSERT INTO ec_pages (id, body) VALUES (:i, :b)", i=name, b=body)
    drain(site)
    assert sorted(work_codes(site)) == [
        ("past_the_bound", "failed", "MEDIA_USAGE_UNREADABLE_VALUE"),
        ("past_the_parser", "failed", "MEDIA_USAGE_UNREADABLE_VALUE"),
    ]
    index = MediaUsage(site)
    assert index.coverage().status == "partial"
    assert not index.unused().known
    assert index.retire(["m1"]).refused == {"m1": "not_known_yet"}
    # Within the bound the same body is read whole, and its image is a use.
    sql(site, "DELETE FROM ec_pages")
    body = json.dumps([image, _nested(20)])
    sql(site, "INSERT INTO ec_pages (id, body) VALUES ('shallow', :b)", b=body)
    drain(site)
    assert MediaUsage(site).usage_count("m1") == 1


def test_a_setting_nested_deep_fails_its_row(site) -> None:
    value = '{"logo": {"mediaId": "m2"}, "extra": ' + "[" * 1200 + "]" * 1200 + "}"
    sql(site, "INSERT INTO options (name, value) VALUES ('site:deep', :v)", v=value)
    drain(site)
    assert [code for _, _, code in work_codes(site)] == ["MEDIA_USAGE_UNREADABLE_VALUE"]
    assert MediaUsage(site).retire(["m2"]).refused == {"m2": "not_known_yet"}


def test_text_that_starts_like_json_and_is_not_fails_its_entry(site, dialect) -> None:
    if dialect == "postgresql":
        pytest.skip("PostgreSQL's json columns refuse text that is not JSON")
    create_collection(site, "pages", "Pages", [FieldDefinition("body", "Body", "portableText")])
    settle(site)
    sql(site, "INSERT INTO ec_pages (id, body) VALUES ('torn', :b)", b='[{"_type": "image", "as')
    drain(site)
    assert work_codes(site) == [("torn", "failed", "MEDIA_USAGE_UNREADABLE_VALUE")]
