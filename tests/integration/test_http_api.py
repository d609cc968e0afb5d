"""``media-usage serve`` as a real process on loopback, on both dialects: every
endpoint, the auth cases, and bad paths, query strings and bodies (never a 500, nothing changed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from media_usage_worker.domain.content_model import FieldDefinition
from tests.http_server import TOKEN, Api, serving
from tests.support import (
    FUTURE,
    active_collection,
    drain,
    examples,
    get_work,
    insert_work,
    mark_coverage_complete,
    status_row,
)


def write(engine: sa.Engine, content_id: str, hero: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, hero) VALUES (:id, :hero)"),
            {"id": content_id, "hero": hero},
        )


@pytest.fixture
def site(db: sa.Engine) -> Any:
    """posts: e1..e3 use m-a, e4 uses m-b; coverage complete; f1 failed, l1 leased."""
    posts = active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    for content_id, hero in [("e1", "m-a"), ("e2", "m-a"), ("e3", "m-a"), ("e4", "m-b")]:
        write(db, content_id, hero)
    drain(db)
    mark_coverage_complete(db)
    insert_work(db, posts, "f1", state="failed", attempt_count=5,
                last_error_code="MEDIA_USAGE_PROCESSING_FAILED")  # fmt: skip
    insert_work(db, posts, "l1", state="leased", lease_token="T", lease_expires_at=FUTURE)
    return posts


@pytest.fixture
def api(site: Any, migrated_url: str, tmp_path: Path) -> Any:
    with serving(migrated_url, tmp_path) as running:
        yield running


def snapshot(engine: sa.Engine) -> dict[str, list]:
    """Every row of every table this project owns or reads, to show a refusal changed nothing."""
    with engine.connect() as conn:
        names = sa.inspect(conn).get_table_names()
        return {
            table: sorted(map(repr, conn.execute(sa.text(f'SELECT * FROM "{table}"')).all()))
            for table in names
        }


def test_read_endpoints(api: Api) -> None:
    assert api.get("/healthz", token=None).json == {"status": "ok"}
    assert api.get("/readyz", token=None).json == {
        "ready": True, "problem": None, "capture": "active", "sources_not_indexed": []
    }  # fmt: skip

    first = api.get("/v1/media/m-a/usage?limit=2")
    assert first.status == 200 and first.headers["content-type"] == "application/json"
    body = first.json
    assert (body["count"], body["unused"], body["coverage"]["complete"]) == (3, False, True)
    assert [e["content_id"] for e in body["entries"]] == ["e1", "e2"]
    rest = api.get(f"/v1/media/m-a/usage?limit=2&cursor={body['next_cursor']}").json
    assert [e["content_id"] for e in rest["entries"]] == ["e3"] and rest["next_cursor"] is None
    free = api.get("/v1/media/m-free/usage").json
    assert (free["count"], free["unused"], free["in_library"]) == (0, True, False)

    counts = api.get("/v1/usage?ids=m-a,m-b&ids=m-free").json
    assert counts["counts"] == {"m-a": 3, "m-b": 1, "m-free": 0}

    status = api.get("/v1/status").json
    assert (status["capture"], status["coverage"]) == ("active", "complete")
    (posts,) = status["collections"]
    assert (posts["slug"], posts["work"]["failed"], posts["work"]["leased"]) == ("posts", 1, 1)

    metrics = api.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'media_usage_work_items{collection="posts",state="failed"} 1.0' in metrics.text
    assert 'media_usage_coverage_complete{collection="posts"} 1.0' in metrics.text
    assert "media_usage_up 1.0" in metrics.text

    paths = set(api.get("/openapi.json", token=None).json["paths"])
    assert {"/v1/media/{media_id}/usage", "/v1/usage", "/v1/status", "/v1/work"} <= paths
    assert {"/v1/work/retry", "/v1/collections/{slug}/repair", "/metrics"} <= paths


def test_operator_endpoints(api: Api, db: sa.Engine, site: Any) -> None:
    listed = api.get("/v1/work?collection=posts&state=failed").json
    assert [(i["content_id"], i["state"]) for i in listed["items"]] == [("f1", "failed")]
    assert "lease_token" not in listed["items"][0]
    assert api.get("/v1/work?collection=nothere").status == 404

    retried = api.post("/v1/work/retry", {"collection": "posts", "content_id": "f1"})
    assert (retried.status, retried.json["outcome"], retried.json["changed"]) == (
        200, "pending", True,
    )  # fmt: skip
    assert get_work(db, site.id, "f1")["state"] == "pending"
    by_id = api.post("/v1/work/retry", {"collection_id": site.id, "content_id": "f1"})
    assert (by_id.status, by_id.json["changed"]) == (200, False)
    held = api.post("/v1/work/retry", {"collection": "posts", "content_id": "l1"})
    assert (held.status, held.json["error"]["code"]) == (409, "lease_active")
    assert get_work(db, site.id, "l1")["state"] == "leased"
    missing = api.post("/v1/work/retry", {"collection": "nothere", "content_id": "x"})
    assert (missing.status, missing.json["error"]["code"]) == (404, "collection_not_found")

    epoch = status_row(db, site.id)["change_epoch"]
    repair = api.post("/v1/collections/posts/repair")
    assert repair.status == 202
    assert repair.json == {
        "collection": "posts", "status": "stale", "change_epoch": epoch + 1, "follow": "/v1/status"
    }  # fmt: skip
    row = status_row(db, site.id)
    assert (row["status"], row["reconciliation_required"]) == ("stale", 1)
    assert row["last_error_code"] == "MEDIA_USAGE_REINDEX_REQUESTED"
    assert api.get("/v1/media/m-a/usage").json["count"] is None  # "unknown" until re-indexed
    assert api.post("/v1/collections/nothere/repair").status == 404


def test_deletion_endpoints(api: Api, db: sa.Engine, site: Any) -> None:
    refused = api.request("DELETE", "/v1/collections/posts")
    assert (refused.status, refused.json["error"]["code"]) == (409, "has_content")
    assert api.get("/v1/deletions?state=all").json == {"deletions": [], "next_cursor": None}
    deleted = api.request("DELETE", "/v1/collections/posts?force=true")
    assert deleted.status == 202
    assert (deleted.json["outcome"], deleted.json["phase"]) == ("deleted", "work")
    (standing,) = api.get("/v1/status").json["deletions"]
    assert (standing["collection_slug"], standing["phase"]) == ("posts", "work")
    assert "lease_token" not in standing
    listed = api.get("/v1/deletions?state=pending").json["deletions"]
    assert [d["collection_slug"] for d in listed] == ["posts"]
    assert api.get("/v1/deletions").json["deletions"] == []  # default: the failed ones
    nothing = api.post("/v1/deletions/retry", {"collection": "posts"})
    assert (nothing.status, nothing.json["error"]["code"]) == (404, "deletion_not_found")
    assert api.request("DELETE", "/v1/collections/nothere").status == 404
    scrape = api.get("/metrics").text
    assert (
        'media_usage_collection_deletion{collection="posts",phase="work",state="pending"}' in scrape
    )


@pytest.mark.parametrize(
    ("env", "no_token_read", "no_token_operator"),
    [
        ({}, 401, 401),
        ({"MEDIA_USAGE_API_PUBLIC_READS": "1"}, 200, 401),
        ({"MEDIA_USAGE_API_TOKEN": ""}, 403, 403),  # no token configured: fail closed
        ({"MEDIA_USAGE_API_TOKEN": "", "MEDIA_USAGE_API_PUBLIC_READS": "1"}, 200, 403),
    ],
)
def test_auth(
    site: Any, migrated_url: str, tmp_path: Path, env: dict, no_token_read: int,
    no_token_operator: int,
) -> None:  # fmt: skip
    configured = env.get("MEDIA_USAGE_API_TOKEN", TOKEN) != ""
    with serving(migrated_url, tmp_path, **env) as api:
        for path in ("/v1/status", "/v1/usage?ids=m-a", "/v1/media/m-a/usage", "/metrics"):
            assert api.get(path, token=None).status == no_token_read, path
        for method, path in [("GET", "/v1/work?collection=posts"),
                             ("POST", "/v1/collections/posts/repair")]:  # fmt: skip
            refused = api.request(method, path, token=None)
            assert refused.status == no_token_operator, path
            assert set(refused.json["error"]) == {"code", "message"}
            if refused.status == 401:
                assert refused.headers["www-authenticate"].startswith("Bearer")
            if refused.status == 403:
                assert "MEDIA_USAGE_API_TOKEN is not set" in refused.json["error"]["message"]
        wrong = {"Authorization": "Bearer " + TOKEN[:-1] + "x"}
        basic = {"Authorization": "Basic " + TOKEN}
        for headers in (wrong, basic):
            got = api.request("GET", "/v1/work?collection=posts", token=None, headers=headers)
            assert got.status == (401 if configured else 403)
        right = api.get("/v1/work?collection=posts")
        assert right.status == (200 if configured else 403)
    assert status_row_unchanged(site, migrated_url)


def status_row_unchanged(site: Any, url: str) -> bool:
    """No refused repair took coverage out of complete."""
    engine = sa.create_engine(url)
    try:
        return status_row(engine, site.id)["status"] == "complete"
    finally:
        engine.dispose()


BAD_REQUESTS = [
    ("GET", "/v1/media/%00/usage", None),
    ("GET", "/v1/media/" + "x" * 1100 + "/usage", None),
    ("GET", "/v1/media/m-a/usage?limit=0", None),
    ("GET", "/v1/media/m-a/usage?limit=101", None),
    ("GET", "/v1/media/m-a/usage?limit=-1", None),
    ("GET", "/v1/media/m-a/usage?limit=1e3", None),
    ("GET", "/v1/media/m-a/usage?limit=99999999999999999999", None),
    ("GET", "/v1/media/m-a/usage?cursor=forged", None),
    ("GET", "/v1/media/m-a/usage?cursor=%ff%fe", None),
    ("GET", "/v1/usage", None),
    ("GET", "/v1/usage?ids=", None),
    ("GET", "/v1/usage?ids=" + ",".join(f"m{i}" for i in range(101)), None),
    ("GET", "/v1/usage?ids=a%00b", None),
    ("GET", "/v1/work", None),
    ("GET", "/v1/work?collection=Posts", None),
    ("GET", "/v1/work?collection=posts&state=done", None),
    ("GET", "/v1/work?collection=posts&cursor=x", None),
    ("POST", "/v1/work/retry", b""),
    ("POST", "/v1/work/retry", b"[1, 2]"),
    ("POST", "/v1/work/retry", b"{not json"),
    ("POST", "/v1/work/retry", b'{"collection": "posts"}'),
    (
        "POST",
        "/v1/work/retry",
        b'{"collection": "posts", "collection_id": "x", "content_id": "f1"}',
    ),
    ("POST", "/v1/work/retry", b'{"collection": 5, "content_id": "f1"}'),
    ("POST", "/v1/work/retry", b'{"collection": "posts", "content_id": ""}'),
    ("POST", "/v1/work/retry", b'{"collection": "posts", "content_id": "f1", "admin": true}'),
    ("POST", "/v1/work/retry", b"[" * 100_000),
    ("POST", "/v1/work/retry", b'{"collection": "posts", "content_id": "' + b"x" * 9000 + b'"}'),
    ("POST", "/v1/collections/Posts/repair", None),
    ("POST", "/v1/collections/posts/repair", b'{"now": true}'),
    ("DELETE", "/v1/collections/Posts", None),
    ("DELETE", "/v1/collections/posts?force=maybe", None),
    ("DELETE", "/v1/collections/posts", None),  # has content: 409, nothing changed
    ("GET", "/v1/deletions?state=gone", None),
    ("GET", "/v1/deletions?limit=0", None),
    ("POST", "/v1/deletions/retry", b'{"collection": "Posts"}'),
    ("POST", "/v1/deletions/retry", b'{"slug": "posts"}'),
    ("DELETE", "/v1/status", None),
    ("GET", "/v1/nothing", None),
    ("GET", "/../../etc/passwd", None),
]


def test_bad_requests_are_refused_in_json_and_change_nothing(api: Api, db: sa.Engine) -> None:
    before = snapshot(db)
    for method, path, body in BAD_REQUESTS:
        reply = api.request(method, path, body=body)
        assert 400 <= reply.status < 500, (method, path, reply.status, reply.text[:200])
        error = reply.json["error"]
        assert set(error) == {"code", "message"} and "Traceback" not in reply.text, path
    # Bytes that are not UTF-8 reach the handler as replacement characters: an odd id, answered.
    for path in ("/v1/media/%ff%fe/usage", "/v1/media/%ED%A0%80/usage"):
        assert api.get(path).status == 200
    assert snapshot(db) == before


FUZZED_PATHS = [
    "/v1/media/{}/usage",
    "/v1/usage?ids={}",
    "/v1/work?collection={}",
    "/v1/media/m-a/usage?cursor={}",
    "/v1/media/m-a/usage?limit={}",
    "/v1/work?collection=posts&state={}",
]
VALUES = st.one_of(st.text(max_size=20), st.integers(), st.none())


@settings(
    max_examples=examples(30, 150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    path=st.sampled_from(FUZZED_PATHS),
    value=st.text(min_size=0, max_size=60),
    body=st.one_of(
        st.none(), st.binary(max_size=200), st.dictionaries(st.text(max_size=20), VALUES)
    ),
)
def test_fuzzed_requests_never_fail_the_server(
    api: Api, db: sa.Engine, path: str, value: str, body: Any
) -> None:
    from urllib.parse import quote

    before = snapshot(db)
    reply = api.get(path.format(quote(value, safe="")))
    assert reply.status in (200, 400, 404), (path, value, reply.text[:200])
    if reply.status != 200:
        assert set(reply.json["error"]) == {"code", "message"}
    raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    posted = api.request("POST", "/v1/work/retry", body=raw)
    assert posted.status in (200, 400, 404, 409), (raw, posted.text[:200])
    if posted.status != 200:
        assert snapshot(db) == before


def test_readiness_names_a_built_in_source_it_cannot_read(api: Api, db: sa.Engine) -> None:
    with db.begin() as conn:
        conn.execute(sa.text("DROP TABLE options"))
    ready = api.get("/readyz", token=None)
    assert (ready.status, ready.json["ready"]) == (200, True)
    assert ready.json["sources_not_indexed"] == [
        {"source": "settings", "reason": "table options is not in the database"}
    ]
    coverage = api.get("/v1/media/m-a/usage").json["coverage"]
    assert coverage["complete"] is False
    (settings,) = [s for s in coverage["collections"] if s["kind"] == "settings"]
    assert settings["reason"] == "table options is not in the database"


def test_readiness_says_what_is_missing(database_url: str, tmp_path: Path) -> None:
    """An empty database: the process is up, not ready, and says what to run."""
    if database_url.startswith("sqlite"):
        sa.create_engine(database_url).connect().close()  # the file exists, with no schema
    with serving(database_url, tmp_path) as api:
        assert api.get("/healthz", token=None).status == 200
        ready = api.get("/readyz", token=None)
        assert ready.status == 503
        assert ready.json["ready"] is False
        assert "media-usage db upgrade" in ready.json["problem"]


def test_serve_refuses_a_missing_database_and_a_weak_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from media_usage_worker.cli import main

    missing = tmp_path / "nope.db"
    done = CliRunner().invoke(main, ["serve", "--database-url", f"sqlite:///{missing}"])
    assert done.exit_code == 1 and "run media-usage db upgrade" in done.output
    assert not missing.exists()  # refused, not created
    monkeypatch.setenv("MEDIA_USAGE_API_TOKEN", "short")
    weak = CliRunner().invoke(main, ["serve", "--database-url", f"sqlite:///{missing}"])
    assert weak.exit_code == 2 and "MEDIA_USAGE_API_TOKEN must be at least 16" in weak.output
    assert len(weak.output.strip().splitlines()) == 1
