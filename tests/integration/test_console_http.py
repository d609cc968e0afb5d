"""The console over real HTTP, without a browser (both dialects): thumbnails never leave the
storage directory, refusals are pages, and the pages carry their security headers."""

from __future__ import annotations

import http.client
import urllib.parse
from pathlib import Path

import sqlalchemy as sa

from media_usage_worker.repository.base.schema import media
from tests.http_server import TOKEN, Api, Reply, serving
from tests.integration.test_cleanup import cleanup_site

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


def _raw(api: Api, method: str, path: str, body: bytes | None = None, **headers: str) -> Reply:
    """One request, redirects not followed (they carry the cookie and say where to)."""
    connection = http.client.HTTPConnection(urllib.parse.urlsplit(api.base).netloc, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        found = {k.lower(): v for k, v in response.getheaders()}
        return Reply(response.status, found, response.read().decode("utf-8", "replace"))
    finally:
        connection.close()


def _form(api: Api, path: str, fields: dict[str, str], cookie: str = "") -> Reply:
    body = urllib.parse.urlencode(fields).encode()
    return _raw(api, "POST", path, body, Cookie=cookie,
                **{"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip


def _signed_in(api: Api) -> str:
    """The session cookie a correct sign-in sets."""
    reply = _form(api, "/console/login", {"token": TOKEN, "next": "/console/"})
    assert reply.status == 303 and reply.headers["location"] == "/console/", reply.text
    cookie = reply.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    return cookie.split(";")[0]


def _get(api: Api, path: str, cookie: str) -> Reply:
    return _raw(api, "GET", path, Cookie=cookie)


def test_thumbnails_come_only_from_inside_the_storage_directory(
    db: sa.Engine, migrated_url: str, tmp_path: Path
) -> None:
    cleanup_site(db)
    storage = tmp_path / "media"
    storage.mkdir()
    (storage / "a.png").write_bytes(PNG)
    (tmp_path / "secret.png").write_bytes(b"not for the browser")
    (storage / "link.png").symlink_to(tmp_path / "secret.png")
    (storage / "drawing.svg").write_text("<svg onload='alert(1)'/>")
    with db.begin() as conn:
        conn.execute(media.insert(), [
            {"id": i, "filename": i, "mime_type": kind, "size": 1, "storage_key": key}
            for i, kind, key in (("out", "image/png", "../secret.png"),
                                 ("abs", "image/png", str(tmp_path / "secret.png")),
                                 ("sym", "image/png", "link.png"),
                                 ("svg", "image/svg+xml", "drawing.svg"))
        ])  # fmt: skip
    with serving(migrated_url, tmp_path, MEDIA_USAGE_STORAGE_DIR=str(storage)) as api:
        assert _get(api, "/console/media/m1/file", "").status == 303  # not signed in
        cookie = _signed_in(api)
        picture = _get(api, "/console/media/m1/file", cookie)
        assert picture.status == 200 and picture.headers["content-type"] == "image/png"
        assert "sandbox" in picture.headers["content-security-policy"]
        for refused in ("out", "abs", "sym", "svg", "m2", "nothing"):
            assert _get(api, f"/console/media/{refused}/file", cookie).status == 404, refused


def test_console_refusals_are_pages_and_pages_carry_their_headers(
    db: sa.Engine, migrated_url: str, tmp_path: Path
) -> None:
    cleanup_site(db)
    with serving(migrated_url, tmp_path) as api:
        login = api.get("/console/login", token=None)
        assert login.status == 200 and 'for="token">Operator token<' in login.text
        assert "frame-ancestors 'none'" in login.headers["content-security-policy"]
        assert login.headers["cache-control"] == "no-store"
        wrong = _form(api, "/console/login", {"token": "wrong-token-0123456789"})
        assert wrong.status == 401 and "That is not the operator token." in wrong.text
        assert "set-cookie" not in wrong.headers
        cookie = _signed_in(api)
        bad = _get(api, "/console/unused?older_than=soon", cookie)
        assert bad.status == 400 and "<html" in bad.text and "whole number" in bad.text
        # A bearer token is no session: the console's forms need the cookie and its CSRF.
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        forged = _raw(api, "POST", "/console/unused/retire", b"id=m1", **bearer,
                      **{"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
        assert forged.status == 403
        no_csrf = _form(api, "/console/unused/retire", {"id": "m1"}, cookie)
        assert no_csrf.status == 403 and "did not come from this console" in no_csrf.text
        redirect = _form(api, "/console/login", {"token": TOKEN, "next": "https://evil.example/"})
        assert redirect.status == 303 and redirect.headers["location"] == "/console/"
    with serving(migrated_url, tmp_path, MEDIA_USAGE_API_TOKEN="") as api:
        disabled = api.get("/console/", token=None)
        assert disabled.status == 403 and "MEDIA_USAGE_API_TOKEN is not set" in disabled.text
