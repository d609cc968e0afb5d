"""JSON nested past any sensible depth is never a crash: an entry whose media-bearing value
cannot be read whole fails alone (coverage is not complete, so nothing is retired over it), and
the CLI answers in one line."""

from __future__ import annotations

import json

import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from tests.processes import cli
from tests.support import (
    SAMPLE_FIELDS,
    active_collection,
    drain,
    refuse_media_id,
)

PORTABLE = [*SAMPLE_FIELDS]


def _nested(depth: int, leaf: object = "m-deep") -> str:
    return "[" * depth + json.dumps(leaf) + "]" * depth


def test_a_field_nested_10000_deep_fails_its_entry_alone(db: sa.Engine) -> None:
    """Past the depth bound a field cannot be read whole: its entry fails at once (never "no
    reference"), costs nothing beyond itself, and the other entries are indexed."""
    active_collection(db, "posts", SAMPLE_FIELDS)
    with db.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, hero, gallery) VALUES ('e1', 'm-hero', :g)"),
            {"g": _nested(10_000)},
        )
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, hero, gallery) VALUES ('e2', 'm-hero2', :g)"),
            {"g": "[" + '{"image": ' * 5000 + '"m-x"' + "}" * 5000 + "]"},
        )
        conn.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('e3', 'm-hero3')"))
    outcomes = {r.content_id: (str(r.outcome), r.error_code) for r in drain(db)}
    assert outcomes == {
        "e1": ("failed", "MEDIA_USAGE_UNREADABLE_VALUE"),
        "e2": ("failed", "MEDIA_USAGE_UNREADABLE_VALUE"),
        "e3": ("completed", None),
    }
    assert MediaUsage(db).coverage().status != "complete"


def test_a_draft_nested_too_deep_is_an_invalid_draft(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", SAMPLE_FIELDS)
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO revisions (id, collection, entry_id, data) "
                "VALUES ('r1', 'posts', 'e1', :d)"
            ),
            {"d": '{"hero": ' + _nested(5000) + "}"},
        )
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, hero, draft_revision_id) VALUES ('e1', 'm1', 'r1')")
        )
    (result,) = drain(db)
    assert (str(result.outcome), result.error_code) == ("retry", "MEDIA_USAGE_SNAPSHOT_FAILED")
    assert posts.id


def test_the_cli_answers_a_validation_nested_3000_deep_in_one_line(
    db: sa.Engine, migrated_url: str
) -> None:
    active_collection(db, "posts", SAMPLE_FIELDS)
    with db.begin() as conn:
        conn.execute(
            sa.text("UPDATE _emdash_fields SET validation = :v WHERE slug = 'gallery'"),
            {"v": '{"subFields": ' + _nested(3000, {}) + "}"},
        )
        conn.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')"))
    listed = cli("collections", "list", url=migrated_url)
    assert listed.code == 0, listed.err
    as_json = cli("collections", "list", "--json", url=migrated_url)
    assert as_json.code == 0 and json.loads(as_json.out)
    repaired = cli("repair", "--collection", "posts", url=migrated_url)
    assert repaired.code == 1
    assert repaired.errors == ["Error: repair of posts ended failed: INVALID_REPEATER_VALIDATION"]
    assert len(repaired.err.splitlines()) <= 3, repaired.err


def test_repair_names_each_failing_entry_in_one_line(db: sa.Engine, migrated_url: str) -> None:
    active_collection(db, "posts", SAMPLE_FIELDS)
    refuse_media_id(db, "m-refused")
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('bad', 'm-refused')"))
        for i in range(5):
            conn.execute(
                sa.text("INSERT INTO ec_posts (id, hero) VALUES (:i, 'm1')"), {"i": f"e{i}"}
            )
    repaired = cli("repair", "--collection", "posts", url=migrated_url)
    assert repaired.code == 1
    logged = [line for line in repaired.err.splitlines() if line.startswith("error:")]
    assert len(logged) == 1 and "bad" in logged[0] and "refused by the test" in logged[0], (
        repaired.err
    )


def test_fields_json_nested_too_deep_is_bad_usage(migrated_url: str) -> None:
    deep = (
        json.dumps([{"slug": "g", "type": "json"}])[:-2]
        + ', "validation": '
        + _nested(5000, {})
        + "}]"
    )
    ran = cli("collections", "create", "posts", "--fields-json", deep, url=migrated_url)
    assert ran.code == 2 and "nested too deep" in ran.err
    forty = {"a": {}}
    for _ in range(40):
        forty = {"a": forty}
    fields = json.dumps([{"slug": "g", "type": "json", "validation": forty}])
    ran = cli("collections", "create", "posts", "--fields-json", fields, url=migrated_url)
    assert ran.code == 2 and "nested more than 32 levels" in ran.err
