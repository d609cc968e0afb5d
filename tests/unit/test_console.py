"""The console's pure parts: signed sessions and CSRF tokens, redirect targets, the chart."""

from __future__ import annotations

from media_usage_worker.domain.pace import Sample
from media_usage_worker.http.console import chart, session
from media_usage_worker.http.console.forms import safe_next
from media_usage_worker.http.console.render import shown_age, shown_bytes
from media_usage_worker.http.security import token_matches

KEY = session.session_key("operator-token-0123456789")


def test_a_session_cookie_holds_only_as_signed_and_until_it_expires() -> None:
    value, held = session.new_cookie(KEY, now=1000.0)
    assert session.read_cookie(KEY, value, now=1001.0) == held
    assert session.read_cookie(KEY, value, now=1000.0 + session.SESSION_SECONDS) is None
    other = session.session_key("another-token-0123456789")
    assert session.read_cookie(other, value, now=1001.0) is None  # a new token signs all out
    expires, nonce, signature = value.split(".")
    later = f"{int(expires) + 3600}.{nonce}.{signature}"  # a longer life, by hand
    assert session.read_cookie(KEY, later, now=1001.0) is None
    for junk in (None, "", "x", "1.2.3", "a" * 500, f"{expires}.{nonce}"):
        assert session.read_cookie(KEY, junk, now=1001.0) is None


def test_a_csrf_token_belongs_to_one_session() -> None:
    _, mine = session.new_cookie(KEY)
    _, theirs = session.new_cookie(KEY)
    assert session.csrf_holds(KEY, mine, mine.csrf_token(KEY))
    assert not session.csrf_holds(KEY, mine, theirs.csrf_token(KEY))
    assert not session.csrf_holds(KEY, mine, None)
    assert not session.csrf_holds(KEY, None, mine.csrf_token(KEY))
    # The key is never the token: a leaked cookie signature says nothing about the token.
    assert KEY != b"operator-token-0123456789"
    assert session.session_key("t" * 20, "configured-key-0123456789") != session.session_key(
        "t" * 20
    )


def test_the_operator_token_is_compared_whole() -> None:
    assert token_matches("operator-token-0123456789", " operator-token-0123456789 ")
    assert not token_matches("operator-token-0123456789", "operator-token-012345678")
    assert not token_matches("operator-token-0123456789", "")


def test_a_redirect_after_sign_in_stays_in_the_console() -> None:
    assert safe_next("/console/unused?type=image%2F") == "/console/unused?type=image%2F"
    for elsewhere in ("https://evil.example/", "//evil.example/console", "/v1/status",
                      "/console\\..\\x", "/console/\nSet-Cookie: x", "", "console/"):  # fmt: skip
        assert safe_next(elsewhere) == "/console/"


def test_the_chart_reads_the_queue_and_the_indexing_rate_from_the_samples() -> None:
    samples = [
        Sample("2026-12-06T10:00:00.000Z", writes=100, queued=50),
        Sample("2026-12-06T10:00:10.000Z", writes=200, queued=100),  # 100 written, 50 indexed
        Sample("2026-12-06T10:00:20.000Z", writes=200, queued=0),  # 100 indexed
    ]
    queued, rate = chart.series(samples)
    assert queued.points == ((0.0, 50.0), (10.0, 100.0), (20.0, 0.0))
    assert rate.points == ((10.0, 5.0), (20.0, 10.0)) and rate.peak == 10.0
    drawn = chart.svg(queued, rate)
    assert drawn.startswith("<svg") and drawn.count("<polyline") == 2
    empty_queue, empty_rate = chart.series([])
    assert "<polyline" not in chart.svg(empty_queue, empty_rate)


def test_sizes_and_ages_read_as_people_read_them() -> None:
    assert [shown_bytes(n) for n in (None, 100, 2048, 5 * 1024**3)] == [
        "size unknown", "100 bytes", "2.0 KiB", "5.0 GiB",
    ]  # fmt: skip
    from datetime import UTC, datetime

    now = datetime(2026, 12, 6, tzinfo=UTC)
    assert shown_age("2026-12-01T00:00:00.000Z", now) == "5 day(s) old"
    assert shown_age("2026-12-05 23:00:00", now) == "today"
    assert shown_age(None, now) == "age unknown"
