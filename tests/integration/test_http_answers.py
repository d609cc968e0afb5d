"""The HTTP API's answers say the right thing: refusals name the parameter the caller sent,
cursors stay with their listing, HTTP's own rules (Allow, HEAD) hold, ids may hold "/", and
the probes and the server's start tell nothing to whom they should not."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from tests.http_server import TOKEN, Api, serving
from tests.processes import ROOT, wait_for
from tests.support import active_collection, drain, mark_coverage_complete


@pytest.fixture
def api(db: sa.Engine, migrated_url: str, tmp_path: Path) -> Any:
    """posts: e1, e2, e3 use m-a, e4 uses m-b; the library holds folder/pic.png, which
    nothing uses; coverage complete."""
    active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    heroes = {"e1": "m-a", "e2": "m-a", "e3": "m-a", "e4": "m-b"}
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO media (id, filename, mime_type, storage_key) "
                "VALUES ('folder/pic.png', 'pic.png', 'image/png', 'folder/pic.png')"
            )
        )
        for content_id, hero in heroes.items():
            conn.execute(
                sa.text("INSERT INTO ec_posts (id, hero) VALUES (:id, :hero)"),
                {"id": content_id, "hero": hero},
            )
    drain(db)
    mark_coverage_complete(db)
    with serving(migrated_url, tmp_path) as running:
        yield running


def refusal(api: Api, path: str, **kwargs: Any) -> tuple[int, str]:
    reply = api.get(path, **kwargs)
    return reply.status, reply.json["error"]["message"]


def test_a_usage_cursor_works_only_for_its_own_media_id(api: Api) -> None:
    first = api.get("/v1/media/m-a/usage?limit=1").json
    assert first["next_cursor"]
    assert api.get(f"/v1/media/m-a/usage?limit=1&cursor={first['next_cursor']}").status == 200
    status, message = refusal(api, f"/v1/media/m-b/usage?cursor={first['next_cursor']}")
    assert status == 400 and "cursor" in message and "listing" in message


def test_a_work_cursor_works_only_for_its_own_collection_and_state(api: Api, db) -> None:
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id) VALUES ('w1'), ('w2'), ('w3')"))
    first = api.get("/v1/work?collection=posts&limit=1").json
    assert first["next_cursor"]
    cursor = first["next_cursor"]
    assert api.get(f"/v1/work?collection=posts&limit=1&cursor={cursor}").status == 200
    assert api.get(f"/v1/work?collection=posts&state=failed&cursor={cursor}").status == 400


@pytest.mark.parametrize(
    ("path", "names", "wrong"),
    [
        ("/v1/work", "collection is required", "None"),
        ("/v1/deletions?state=bogus", "state must be one of", "work listing"),
        (
            "/v1/work?collection=posts&limit=0",
            "limit must be a whole number from 1 to 100",
            "operator",
        ),
        (
            "/v1/work?collection=posts&limit=abc",
            "limit must be a whole number from 1 to 100",
            "operator",
        ),
        (f"/v1/media/{'x' * 1025}/usage", "media_id must be 1 to 1,024 characters", "required"),
    ],
)
def test_each_refusal_names_the_parameter_sent(api: Api, path: str, names: str, wrong: str) -> None:
    status, message = refusal(api, path)
    assert status == 400
    assert names in message and wrong not in message, message


def test_deletion_states_name_all(api: Api) -> None:
    _, message = refusal(api, "/v1/deletions?state=bogus")
    assert message.endswith("pending, retry, leased, failed, all."), message


def test_a_body_field_of_the_wrong_type_is_named_as_such(api: Api) -> None:
    reply = api.post("/v1/work/retry", {"collection": "posts", "content_id": 5})
    assert reply.status == 400
    assert reply.json["error"]["message"] == '"content_id" must be a string id, not int.'
    missing = api.post("/v1/work/retry", {"collection": "posts"})
    assert '"content_id" is required' in missing.json["error"]["message"]


def test_a_retry_of_an_entry_nobody_wrote_is_404(api: Api) -> None:
    reply = api.post("/v1/work/retry", {"collection": "posts", "content_id": "does-not-exist"})
    assert (reply.status, reply.json["error"]["code"]) == (404, "content_not_found")
    assert '"force": true' in reply.json["error"]["message"]
    bad = api.post(
        "/v1/work/retry", {"collection": "posts", "content_id": "does-not-exist", "force": 1}
    )
    assert (bad.status, bad.json["error"]["message"]) == (400, '"force" is true or false.')
    forced = api.post(
        "/v1/work/retry", {"collection": "posts", "content_id": "does-not-exist", "force": True}
    )
    assert (forced.status, forced.json["outcome"], forced.json["changed"]) == (200, "pending", True)


def test_405_names_the_allowed_methods_and_head_answers_like_get(api: Api) -> None:
    wrong = api.request("DELETE", "/v1/status")
    assert wrong.status == 405 and wrong.headers["allow"] == "GET, HEAD"  # HEAD is answered
    assert api.request("PUT", "/v1/work/retry").headers["allow"] == "POST"
    for path in ("/healthz", "/readyz", "/v1/status"):
        head, get = api.request("HEAD", path), api.get(path)
        assert (head.status, head.text) == (200, ""), path
        assert head.headers["content-type"] == get.headers["content-type"]


@pytest.mark.parametrize("spelled", ["folder/pic.png", quote("folder/pic.png", safe="")])
def test_an_id_with_a_slash_is_asked_by_path(api: Api, spelled: str) -> None:
    body = api.get(f"/v1/media/{spelled}/usage").json
    assert (body["media_id"], body["in_library"]) == ("folder/pic.png", True)
    assert (body["count"], body["unused"], body["entries"]) == (0, True, [])


def test_readyz_does_not_tell_where_the_database_is(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    url = f"postgresql://nobody@127.0.0.1:{closed_port}/nowhere"
    with serving(url, tmp_path) as api:
        reply = api.get("/readyz", token=None)
        assert reply.status == 503
        problem = reply.json["problem"]
        assert "cannot be read" in problem
        assert str(closed_port) not in reply.text and "127.0.0.1" not in reply.text
        assert str(closed_port) in api.log.read_text()  # the operator's log has the reason


def _serve(url: str, port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "media_usage_worker", "serve", "--port", str(port),
         "--database-url", url],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_port_in_use_is_one_line_and_exit_1(migrated_url: str) -> None:
    env = {**os.environ, "MEDIA_USAGE_API_TOKEN": TOKEN}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _serve(migrated_url, port, env)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.strip().splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ], err


def test_serve_without_a_token_warns_at_start(migrated_url: str, tmp_path: Path) -> None:
    with serving(migrated_url, tmp_path, MEDIA_USAGE_API_TOKEN="") as api:
        assert api.get("/v1/status", token=None).status == 403
        log = api.log.read_text()
    assert "warning: MEDIA_USAGE_API_TOKEN is not set" in log
    with serving(migrated_url, tmp_path) as api:
        assert api.get("/healthz", token=None).status == 200
        assert "MEDIA_USAGE_API_TOKEN is not set" not in api.log.read_text()


def test_json_of_the_answers_is_unchanged_for_good_requests(api: Api) -> None:
    body = api.get("/v1/media/m-a/usage").json
    assert (body["count"], body["unused"]) == (3, False)
    assert json.loads(api.get("/v1/usage?ids=m-a,m-b").text)["counts"] == {"m-a": 3, "m-b": 1}


def test_probes_answer_in_bounded_time_behind_a_locked_database(
    api: Api, db: sa.Engine, migrated_url: str, dialect: str
) -> None:
    if dialect == "sqlite":
        pytest.skip("SQLite readers never wait for a writer (WAL)")
    from concurrent.futures import ThreadPoolExecutor

    from media_usage_worker.http.probe import READY_TIMEOUT_SECONDS
    from media_usage_worker.repository.base.db import create_engine

    host = create_engine(migrated_url).connect()
    held = host.begin()
    host.execute(sa.text("LOCK TABLE _emdash_media_usage_activation IN ACCESS EXCLUSIVE MODE"))
    try:
        with ThreadPoolExecutor(max_workers=41) as pool:
            probes = [pool.submit(api.get, "/readyz", token=None) for _ in range(40)]
            # Liveness never waits for the database, or for threads that do.
            assert api.get("/healthz", token=None).json == {"status": "ok"}
            replies = [probe.result(timeout=READY_TIMEOUT_SECONDS + 30) for probe in probes]
        assert {r.status for r in replies} == {503}
        assert all("did not answer within" in r.json["problem"] for r in replies)
    finally:
        held.rollback()
        host.close()
    assert api.get("/readyz", token=None).status == 200


def test_two_authorization_headers_are_refused(api: Api) -> None:
    import http.client
    from urllib.parse import urlsplit

    where = urlsplit(api.base)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    try:
        connection.putrequest("GET", "/v1/status")
        connection.putheader("Authorization", f"Bearer {TOKEN}")
        connection.putheader("Authorization", "Bearer something-else-entirely")
        connection.endheaders()
        reply = connection.getresponse()
        body = json.loads(reply.read())
    finally:
        connection.close()
    assert reply.status == 400
    assert body["error"]["message"] == "Send one Authorization header, not several."


def test_a_client_that_never_finishes_its_headers_is_cut_off(
    migrated_url: str, tmp_path: Path
) -> None:
    from urllib.parse import urlsplit

    with serving(migrated_url, tmp_path, MEDIA_USAGE_API_HEADER_TIMEOUT_SECONDS="1") as api:
        where = urlsplit(api.base)
        slow = []
        for _ in range(50):
            client = socket.create_connection((where.hostname, where.port), timeout=30)
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finished
            slow.append(client)
        # Each is closed by the server (recv sees the end), long before the client gives up.
        assert all(client.recv(1024) == b"" for client in slow)
        for client in slow:
            client.close()
        assert api.get("/healthz", token=None).status == 200


def test_serve_says_where_it_listens(api: Api) -> None:
    assert f"media-usage serve: listening on {api.base}/" in api.log.read_text()


def test_a_client_that_never_finishes_its_body_is_cut_off_without_a_traceback(
    migrated_url: str, tmp_path: Path
) -> None:
    from urllib.parse import urlsplit

    with serving(migrated_url, tmp_path, MEDIA_USAGE_API_HEADER_TIMEOUT_SECONDS="1") as api:
        where = urlsplit(api.base)
        slow = []
        for _ in range(20):
            client = socket.create_connection((where.hostname, where.port), timeout=30)
            client.sendall(
                b"POST /v1/work/retry HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 100\r\n\r\n"
                b'{"collec'  # and never the rest
            )
            slow.append(client)
        # Each is closed by the server (recv sees the end), long before the client gives up.
        assert all(client.recv(4096) == b"" for client in slow)
        for client in slow:
            client.close()
        assert api.get("/healthz", token=None).status == 200
        wait_for(lambda: "client went away" in api.log.read_text(), timeout=30)
        assert "Traceback" not in api.log.read_text()
