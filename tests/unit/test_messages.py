"""The message checks the consumer runs before Celery: every malformed shape is one
``InvalidMessage``, valid messages pass with clean headers, and nothing else is ever raised."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from media_usage_worker.domain.errors import InvalidMessage
from media_usage_worker.tasks.envelope import (
    MAX_BODY_BYTES,
    MIN_TIME_LIMIT_SECONDS,
    NO_ARGUMENTS,
    TimeLimits,
    after_write_arguments,
    check_envelope,
    check_message,
    clamp_time_limits,
    item_arguments,
    range_arguments,
)

LIMITS = TimeLimits(soft_seconds=270, hard_seconds=300)
CHECKS = {"media_usage.process_work": item_arguments(), "media_usage.tick": NO_ARGUMENTS}
ITEM = ["01JCOLLECTION", "entry-1", 3]
DEFAULT: Any = object()


def _headers(**extra: Any) -> dict[str, Any]:
    return {"task": "media_usage.process_work", "id": "3f1c-aa", **extra}


def _check(headers: Any = DEFAULT, body: Any = None, **envelope: Any) -> Any:
    return check_message(
        content_type=envelope.get("content_type", "application/json"),
        content_encoding=envelope.get("content_encoding", "utf-8"),
        headers=_headers() if headers is DEFAULT else headers,
        body=json.dumps([ITEM, {}, {}]) if body is None else body,
        checks=CHECKS,
        known_tasks={"celery.ping"},
        limits=LIMITS,
    )


def test_a_well_formed_item_message_is_accepted_with_cleaned_headers() -> None:
    accepted = _check(_headers(stamps={"x": 1}, stamped_headers=["x"], surprise="yes"))
    assert (accepted.task, accepted.task_id) == ("media_usage.process_work", "3f1c-aa")
    assert "stamps" not in accepted.headers and "surprise" not in accepted.headers
    assert accepted.headers["timelimit"] == [None, None]


def test_an_own_task_never_expires_by_the_senders_clock() -> None:
    # A sender whose clock is behind stamps an expiry already past for the worker.
    past = "2000-01-01T00:00:00+00:00"
    assert _check(_headers(expires=past)).headers["expires"] is None


def test_a_null_ignore_result_from_send_task_by_name_is_accepted() -> None:
    # Celery's send_task (a host app sending by name, with no task object) sends null.
    assert _check(_headers(ignore_result=None)).headers["ignore_result"] is False


def test_arguments_by_keyword_are_accepted() -> None:
    names = ["collection_id", "content_id", "work_version"]
    body = json.dumps([[], dict(zip(names, ITEM, strict=True)), {}])
    assert _check(body=body).task == "media_usage.process_work"


@pytest.mark.parametrize(
    "body",
    ['"hello"', "[[1,2,3]]", "null", "42", "[[],{},{},1]", "{}", "[]", "[1, {}, {}]",
     "[[], [], {}]", "[[], {}, []]", "not json", '[[], {}, {"bogus": 1}]', "[NaN, {}, {}]",
     "[" * 100_000, b"\xff\xfe", json.dumps([[], {}, {}]) + " " * MAX_BODY_BYTES],
)  # fmt: skip
def test_bodies_that_are_not_protocol_two_are_refused(body: Any) -> None:
    with pytest.raises(InvalidMessage):
        _check(body=body)


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (ITEM[:2], {}),  # wrong arity
        ([*ITEM, 4], {}),
        (ITEM, {"extra": 1}),
        (ITEM, {"content_id": "again"}),
        (["a\ud800", "b", 1], {}),  # a lone surrogate no encoder takes
        (["a", "b\x00", 1], {}),  # NUL, which PostgreSQL refuses
        (["", "b", 1], {}),
        (["a", "b" * 2000, 1], {}),
        (["a", "b", 0], {}),
        (["a", "b", True], {}),
        (["a", "b", 1.5], {}),
        (["a", "b", "1; DROP TABLE x"], {}),
        (["a", "b", 10**30], {}),
        ([{"id": "a"}, ["b"], None], {}),
    ],
)
def test_item_arguments_are_checked_before_any_task_runs(args: list, kwargs: dict) -> None:
    with pytest.raises(InvalidMessage, match="invalid arguments"):
        _check(body=json.dumps([args, kwargs, {}]))


@pytest.mark.parametrize(
    "headers",
    [
        {"id": "x"},  # no task header
        {"task": 5, "id": "x"},
        {"task": "media_usage.tick"},  # no id: Celery's consumer reconnects forever
        {"task": "media_usage.tick", "id": ""},
        {"task": "media_usage.tick", "id": "a\nb"},
        {"task": "media_usage.tick", "id": "x" * 200},
        {"task": "elsewhere.unknown", "id": "x"},
        _headers(timelimit="abc"),
        _headers(timelimit=[1, 2, 3]),
        _headers(timelimit=["a", None]),
        _headers(timelimit=[-1, None]),
        _headers(timelimit=[float("inf"), None]),
        _headers(retries="x"),
        _headers(retries=-1),
        _headers(retries=True),
        _headers(eta="2030-01-01T00:00:00+00:00"),  # this project's items never have an eta
        _headers(expires="tomorrow"),
        _headers(expires=12),
        _headers(argsrepr="x" * 5000),
        _headers(origin=["list"]),
        _headers(ignore_result="no"),
        _headers(compression="zlib"),
        "not a mapping",
        None,
    ],
)
def test_malformed_headers_are_refused(headers: Any) -> None:
    with pytest.raises(InvalidMessage):
        _check(headers=headers, body=json.dumps([[], {}, {}]) if "tick" in str(headers) else None)


@pytest.mark.parametrize(
    "envelope",
    [{"content_type": "application/x-python-serialize"}, {"content_type": None},
     {"content_encoding": "binary"}, {"content_encoding": None}],
)  # fmt: skip
def test_only_json_in_utf8_is_accepted(envelope: dict) -> None:
    with pytest.raises(InvalidMessage):
        _check(**envelope)


def test_callbacks_on_this_projects_tasks_are_refused() -> None:
    body = json.dumps([ITEM, {}, {"callbacks": [{"task": "media_usage.tick"}]}])
    with pytest.raises(InvalidMessage, match="callbacks"):
        _check(body=body)


def test_celerys_own_tasks_get_the_envelope_checks_only() -> None:
    accepted = _check({"task": "celery.ping", "id": "p1"}, json.dumps([[1], {"a": 2}, {}]))
    assert accepted.task == "celery.ping"


@pytest.mark.parametrize(
    "sent, clamped",
    [
        (None, [None, None]),
        ([None, None], [None, None]),
        ([0.001, 0.001], [MIN_TIME_LIMIT_SECONDS, MIN_TIME_LIMIT_SECONDS]),
        ([10_000, 9_000], [300.0, 270.0]),
        ([20, 100], [20.0, 20.0]),  # the soft limit never exceeds the hard one
        ([None, 50], [None, 50.0]),
    ],
)
def test_time_limits_are_clamped_to_the_workers_bounds(sent: Any, clamped: list) -> None:
    assert clamp_time_limits(sent, LIMITS) == clamped


def test_the_reason_never_quotes_the_body() -> None:
    secret = "01JLEASETOKENSECRET"
    with pytest.raises(InvalidMessage) as caught:
        _check(body=json.dumps([[secret, "b"], {}, {}]))
    assert secret not in str(caught.value)


VALID_ENVELOPE = {
    "body": "W1tdLCB7fSwge31d",
    "properties": {"delivery_tag": "d-1", "body_encoding": "base64", "delivery_info": {}},
    "headers": {},
    "content-type": "application/json",
    "content-encoding": "utf-8",
}


def test_a_kombu_envelope_passes() -> None:
    check_envelope(VALID_ENVELOPE)


@pytest.mark.parametrize(
    "broken",
    [
        5, [1, 2], {"body": 5},
        {**VALID_ENVELOPE, "properties": {}},
        {**VALID_ENVELOPE, "properties": {"delivery_tag": 7}},
        {**VALID_ENVELOPE, "properties": {**VALID_ENVELOPE["properties"], "delivery_info": 3}},
        {**VALID_ENVELOPE, "headers": [1]},
        {**VALID_ENVELOPE, "headers": {"compression": [1, 2, 3]}},
        {**VALID_ENVELOPE, "content-type": 1},
        {**VALID_ENVELOPE, "body": "***not base64***"},
        {**VALID_ENVELOPE, "body": 12},
        {**VALID_ENVELOPE, "properties": {"delivery_tag": "d", "body_encoding": "rot13"}},
    ],
)  # fmt: skip
def test_broken_envelopes_are_refused(broken: Any) -> None:
    with pytest.raises(InvalidMessage):
        check_envelope(broken)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(headers=st.dictionaries(st.sampled_from(["task", "id", "timelimit", "eta", "expires",
                                                 "retries", "origin", "argsrepr", "shadow"]),
                               _json), body=_json | st.binary(max_size=64))  # fmt: skip
def test_arbitrary_messages_raise_nothing_but_invalid_message(headers: dict, body: Any) -> None:
    headers.setdefault("task", "media_usage.process_work")
    headers.setdefault("id", "fuzz-1")
    raw = body if isinstance(body, bytes) else json.dumps(body)
    with contextlib.suppress(InvalidMessage):
        _check(headers=headers, body=raw)


@given(raw=_json)
def test_arbitrary_envelopes_raise_nothing_but_invalid_message(raw: Any) -> None:
    with contextlib.suppress(InvalidMessage):
        check_envelope(raw)


def test_celerys_own_message_for_the_longest_ids_is_accepted() -> None:
    from celery import Celery

    app = Celery("probe", set_as_current=False)
    longest = ["c" * 1024, "e" * 1024, "9" * 18]
    message = app.amqp.as_task_v2("t-1", "media_usage.process_work", args=longest)
    accepted = _check(headers=message.headers, body=json.dumps(list(message.body)))
    assert accepted.task_id == "t-1"


@pytest.mark.parametrize(
    ("args", "accepted"),
    [
        (["posts", "e1"], True),
        (["Bad Slug!", "e1"], False),
        (["posts", ""], False),
        (["posts", "e1", "extra"], False),
        ([None, 5], False),
        (["x" * 5000, "e1"], False),
    ],
)
def test_after_write_by_name_takes_a_slug_and_an_id(args: list, accepted: bool) -> None:
    message = {
        "content_type": "application/json",
        "content_encoding": "utf-8",
        "headers": _headers(task="media_usage.after_write"),
        "body": json.dumps([args, {}, {}]),
        "checks": {"media_usage.after_write": after_write_arguments()},
        "known_tasks": set(),
        "limits": LIMITS,
    }
    if accepted:
        assert check_message(**message).task == "media_usage.after_write"
        return
    with pytest.raises(InvalidMessage, match="invalid arguments") as refused:
        check_message(**message)
    assert "Bad Slug" not in str(refused.value) and "xxxx" not in str(refused.value)


@pytest.mark.parametrize(
    ("args", "accepted"),
    [
        (["01JCOLLECTION", "01JRANGE"], True),
        (["01JCOLLECTION", ""], False),
        (["01JCOLLECTION", "r\x00"], False),
        (["01JCOLLECTION", 7], False),
        (["01JCOLLECTION"], False),
        (["01JCOLLECTION", "01JRANGE", "extra"], False),
        (["01JCOLLECTION", "r" * 5000], False),
        ([["01JCOLLECTION"], "01JRANGE"], False),
    ],
)
def test_a_range_message_takes_two_ids(args: list, accepted: bool) -> None:
    message = {
        "content_type": "application/json",
        "content_encoding": "utf-8",
        "headers": _headers(task="media_usage.process_range"),
        "body": json.dumps([args, {}, {}]),
        "checks": {"media_usage.process_range": range_arguments()},
        "known_tasks": set(),
        "limits": LIMITS,
    }
    if accepted:
        assert check_message(**message).task == "media_usage.process_range"
        return
    with pytest.raises(InvalidMessage, match="invalid arguments") as refused:
        check_message(**message)
    assert "rrrr" not in str(refused.value)
