"""The operator CLI on both dialects: happy paths, JSON shapes, errors, and random input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from media_usage_worker.cli import main
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.rules import EXTRACTION_VERSION
from tests.support import active_collection, drain, examples


@pytest.fixture
def seeded(db: sa.Engine, migrated_url: str) -> tuple[sa.Engine, str, str]:
    posts = active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO media (id, filename, mime_type, storage_key) "
                "VALUES ('m1', 'f', 'image/png', 'k')"
            )
        )
        for i in range(3):
            conn.execute(
                sa.text("INSERT INTO ec_posts (id, hero) VALUES (:i, 'm1')"), {"i": f"e{i}"}
            )
    return db, migrated_url, posts.id


def run(url: str, *args: str):
    """The command on ``url``, unless the arguments name a database URL of their own."""
    own = ["--database-url", url] if "--database-url" not in args else []
    return CliRunner().invoke(main, [*args, *own], catch_exceptions=True)


def test_status_json_shape(seeded) -> None:
    _, url, collection_id = seeded
    result = run(url, "status", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    # The collection was never reconciled, the (empty) sources are complete: partial.
    assert data["capture"] == "active" and data["coverage"] == "partial"
    (posts,) = data["collections"]
    assert posts["slug"] == "posts" and posts["id"] == collection_id
    assert posts["work"] == {"pending": 3, "retry": 0, "leased": 0, "failed": 0}
    assert posts["oldest_due_age_seconds"] >= 0 and posts["failed"] == []
    assert set(posts) == {
        "slug",
        "id",
        "coverage",
        "status",
        "capture_state",
        "change_epoch",
        "reconciliation_required",
        "last_error_code",
        "work",
        "oldest_due_age_seconds",
        "failed",
        "rules",
        "reconciliation",
        "kind",
        "reason",
        "last_complete_at",
    }
    assert posts["kind"] == "content"
    assert posts["last_complete_at"] is None  # never complete yet
    assert data["deletions"] == []
    # The sources beyond content, each with its kind and the same shape; empty at activation,
    # so complete at once.
    assert [(s["kind"], s["coverage"]) for s in data["sources"]] == [
        ("byline", "complete"), ("settings", "complete"), ("user", "complete"),
    ]  # fmt: skip
    assert all(set(s) == set(posts) for s in data["sources"])
    # Never reconciled: indexed under no known rules yet.
    assert posts["rules"] == {
        "indexed_under": None,
        "running": f"extraction-{EXTRACTION_VERSION}.rules-0",
    }


def test_work_list_pages_and_json(seeded) -> None:
    _, url, _ = seeded
    first = json.loads(
        run(url, "work", "list", "--collection", "posts", "--limit", "2", "--json").output
    )
    assert [i["content_id"] for i in first["items"]] == ["e2", "e1"]
    assert "lease_token" not in first["items"][0] and "work_version" not in first["items"][0]
    second = json.loads(
        run(
            url,
            "work",
            "list",
            "--collection",
            "posts",
            "--limit",
            "2",
            "--cursor",
            first["next_cursor"],
            "--json",
        ).output
    )
    assert [i["content_id"] for i in second["items"]] == ["e0"] and second["next_cursor"] is None
    human = run(url, "work", "list", "--collection", "posts")
    assert human.exit_code == 0 and human.output.splitlines()[0].startswith("CONTENT")
    missing = run(url, "work", "list", "--collection", "nope")
    assert missing.exit_code == 1 and "not found" in missing.output


def test_work_retry_outcomes(seeded) -> None:
    db, url, collection_id = seeded
    pending = run(
        url, "work", "retry", "--collection-id", collection_id, "--content-id", "e0", "--json"
    )
    assert pending.exit_code == 0 and json.loads(pending.output)["outcome"] == "pending"
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE _emdash_media_usage_work SET state = 'leased', lease_token = 'T', "
                "lease_expires_at = '2999-01-01T00:00:00.000Z' WHERE content_id = 'e1'"
            )
        )
    busy = run(url, "work", "retry", "--collection-id", collection_id, "--content-id", "e1")
    assert busy.exit_code == 1 and "a worker holds this item until 2999" in busy.output
    nobody = "01J9Z6Q8V2M3N4P5R6S7T8V9W0"
    unknown = run(url, "work", "retry", "--collection-id", nobody, "--content-id", "e1")
    assert unknown.exit_code == 1 and f"collection '{nobody}' not found" in unknown.output


def test_repair_then_usage(seeded) -> None:
    _, url, _ = seeded
    repaired = run(url, "repair", "--collection", "posts", "--json")
    assert repaired.exit_code == 0, repaired.output
    assert json.loads(repaired.output[repaired.output.index("{") :])["status"] == "complete"
    usage = json.loads(run(url, "usage", "m1", "--json").output)
    assert usage["count"] == 3 and usage["coverage"]["status"] == "complete"
    assert [e["content_id"] for e in usage["entries"]] == ["e0", "e1", "e2"]
    # An id the library does not hold is answered from the index too: used nowhere.
    nope = json.loads(run(url, "usage", "nope", "--json").output)
    assert (nope["in_library"], nope["count"], nope["entries"]) == (False, 0, [])


def test_repair_keeps_the_workers_size_limits(seeded) -> None:
    # An entry the worker would fail for its size is not indexed by repair either, and coverage
    # does not say complete over it.
    _, url, _ = seeded
    done = subprocess.run(
        [sys.executable, "-m", "media_usage_worker", "repair", "--collection", "posts", "--json",
         "--database-url", url],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "MEDIA_USAGE_MAX_INDEX_BYTES": "10"},
    )  # fmt: skip
    result = json.loads(done.stdout[done.stdout.index("{") :])
    assert (result["status"], result["indexed"], result["failed"]) == ("failed", 0, 3), done


def test_usage_count_is_unknown_before_coverage_is_complete(seeded) -> None:
    db, url, _ = seeded
    drain(db)
    usage = json.loads(run(url, "usage", "m1", "--json").output)
    assert usage["count"] is None and len(usage["entries"]) == 3


def test_commands_run_as_a_subprocess(seeded) -> None:
    _, url, _ = seeded
    done = subprocess.run(
        [sys.executable, "-m", "media_usage_worker", "status", "--json", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and json.loads(done.stdout)["capture"] == "active"
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "media_usage_worker",
            "work",
            "list",
            "--collection",
            "posts",
            "--limit",
            "0",
            "--database-url",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len([line for line in bad.stderr.splitlines() if line.startswith("Error")]) == 1


def fingerprint(engine: sa.Engine) -> tuple:
    with engine.connect() as conn:
        return tuple(
            tuple(conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY 1, 2")).all())
            for table in (
                "_emdash_media_usage_work",
                "_emdash_media_usage_index_status",
                "_emdash_collections",
                "_emdash_media_usage_sources",
            )
        )


junk = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "posts",
            "e0",
            "m1",
            "pending",
            "failed",
            "0",
            "101",
            "-1",
            "1e3",
            "x" * 5000,
            "é🙂",
            "' OR 1=1 --",
            "",
            "Bad Slug!",
            "x" * 2000,
        ]
    ),
)
urls = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        ["notaurl://", "http://x", "postgres+asyncpg://u@h/d", "sqlite://", "sqlite:///:memory:",
         "postgresql://u@h", "mysql://u@h/db", "://", "postgres://u@127.0.0.1:1/x"]
    ),
)  # fmt: skip
argvs = st.one_of(
    st.tuples(
        st.just("work"),
        st.just("list"),
        st.just("--collection"),
        junk,
        st.sampled_from(["--state", "--limit", "--cursor"]),
        junk,
    ),
    st.tuples(
        st.just("work"),
        st.just("retry"),
        st.just("--collection-id"),
        junk,
        st.just("--content-id"),
        junk,
    ),
    st.tuples(st.just("usage"), junk, st.sampled_from(["--limit", "--cursor"]), junk),
    st.tuples(st.just("collections"), st.just("create"), junk, st.just("--field"), junk),
    st.tuples(st.just("repair"), st.just("--collection"), junk),
    st.tuples(
        st.just("work"),
        st.just("retry"),
        st.just("--collection"),
        junk,
        st.just("--content-id"),
        junk,
    ),
    st.tuples(
        st.sampled_from(["status", "usage m1", "work list --collection posts"]),
        st.just("--database-url"),
        urls,
    ).map(lambda t: (*t[0].split(), *t[1:])),
    st.tuples(st.just("db"), st.just("downgrade"), st.just("--revision"), junk),
    st.tuples(st.sampled_from(["status", "nope", "work"]), junk),
)


def test_random_arguments_never_crash_or_change_state_on_failure(seeded) -> None:
    db, url, _ = seeded
    count = examples(30, 60) if db.dialect.name == "sqlite" else examples(12, 25)

    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(argvs)
    def check(argv: tuple[str, ...]) -> None:
        before = fingerprint(db)
        result = run(url, *argv)
        assert result.exit_code in (0, 1, 2), (argv, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            argv,
            repr(result.exception),
        )
        assert "Traceback" not in result.output
        if result.exit_code != 0:
            assert fingerprint(db) == before, argv

    check()
