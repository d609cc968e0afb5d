"""Checks of a broker message before Celery acts on it: Celery's protocol 2 and the broker's
envelope, known here and nowhere else. Pure (no Celery import), so it is tested without servers.

Anything can reach the worker's queue: a forged envelope, a body that is not the protocol's
three-part list, a header of the wrong type, an id header that is missing. Celery meets many of
these with an exception that stops the consumer, or a restored message that stops every worker
after it. ``check_message`` answers one question about each message: use it (with headers
cleaned and time limits clamped), or drop it for a stated reason. It never raises anything but
``InvalidMessage`` and never puts the body, or anything taken from it, into the reason.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from media_usage_worker.domain import validation
from media_usage_worker.domain.content_model import validate_collection_slug
from media_usage_worker.domain.errors import InvalidArgument, InvalidMessage
from media_usage_worker.domain.validation import storable
from media_usage_worker.domain.work import checked_items

JSON_CONTENT_TYPE = "application/json"
UTF8_ENCODINGS = frozenset({"utf-8", "utf8"})
# Item messages are a few hundred bytes; a batch of 100 items with the longest ids fits.
MAX_BODY_BYTES = 256 * 1024
MAX_HEADER_TEXT = 256
# Celery cuts argsrepr/kwargsrepr near 1 KiB (argsrepr_maxsize); a little over that is normal.
MAX_REPR_TEXT = 4096
MAX_RETRIES = 1000
MAX_REPLACED_NESTING = 100
# A time limit below this would kill pool children before any item could run.
MIN_TIME_LIMIT_SECONDS = 10.0
_TASK_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
_EMBED_KEYS = frozenset({"callbacks", "errbacks", "chain", "chord", "group", "group_index"})

# Validates one task's (args, kwargs); raises InvalidArgument. Returns nothing: accepted as sent.
ArgumentCheck = Callable[[list[Any], dict[str, Any]], None]


@dataclass(frozen=True)
class TimeLimits:
    """The worker's configured limits: the ceiling for any limit a message asks for."""

    soft_seconds: float
    hard_seconds: float


@dataclass(frozen=True)
class Accepted:
    """A message to hand on to Celery, with the headers it should see instead of the sent ones."""

    task: str
    task_id: str
    headers: dict[str, Any]


def check_message(
    *,
    content_type: object,
    content_encoding: object,
    headers: object,
    body: object,
    checks: Mapping[str, ArgumentCheck],
    known_tasks: Container[str],
    limits: TimeLimits,
) -> Accepted:
    """Accept a protocol-2 task message or raise ``InvalidMessage`` naming what is wrong.

    ``checks`` holds the argument checks of this project's tasks; a task in ``known_tasks`` but
    without a check (Celery's own) gets the envelope checks only; any other task is dropped.
    """
    if not isinstance(headers, Mapping):
        raise InvalidMessage("headers are not a mapping (protocol 1 or not a Celery message)")
    task, task_id = _task_identity(headers, checks, known_tasks)
    _check_content(content_type, content_encoding, headers)
    args, kwargs, embed = _decode_body(body)
    own = task in checks
    cleaned = _clean_headers(headers, limits, own_task=own)
    if own:
        _check_own_arguments(checks[task], args, kwargs, embed)
    return Accepted(task=task, task_id=task_id, headers=cleaned)


def _task_identity(
    headers: Mapping[Any, Any], checks: Mapping[str, ArgumentCheck], known_tasks: Container[str]
) -> tuple[str, str]:
    task = headers.get("task")
    if not isinstance(task, str) or not task or len(task) > MAX_HEADER_TEXT:
        raise InvalidMessage("the task header is missing or not a short string")
    task_id = headers.get("id")
    if not isinstance(task_id, str) or not _TASK_ID.fullmatch(task_id):
        raise InvalidMessage("the id header is missing or malformed")
    if task not in checks and task not in known_tasks:
        raise InvalidMessage(f"unknown task {task!r}")
    return task, task_id


def _check_content(
    content_type: object, content_encoding: object, headers: Mapping[Any, Any]
) -> None:
    if content_type != JSON_CONTENT_TYPE:
        raise InvalidMessage("the content type is not application/json")
    if not isinstance(content_encoding, str) or content_encoding.lower() not in UTF8_ENCODINGS:
        raise InvalidMessage("the content encoding is not utf-8")
    if headers.get("compression") is not None:
        raise InvalidMessage("compressed bodies are not accepted")


def _check_own_arguments(
    check: ArgumentCheck, args: list[Any], kwargs: dict[str, Any], embed: dict[str, Any]
) -> None:
    if any(embed.get(key) for key in _EMBED_KEYS):
        raise InvalidMessage("callbacks, chains and chords are not accepted")
    try:
        check(args, kwargs)
    except InvalidArgument as exc:
        raise InvalidMessage(f"invalid arguments: {exc}") from None


def check_envelope(raw: object) -> None:
    """The broker's own envelope around a message (kombu's virtual transports), before Celery.

    Raises ``InvalidMessage`` for anything kombu could not turn into a message.
    """
    if not isinstance(raw, dict):
        raise InvalidMessage("the broker entry is not an envelope")
    properties = raw.get("properties")
    if not isinstance(properties, dict):
        raise InvalidMessage("the envelope has no properties")
    _check_envelope_properties(properties)
    _check_envelope_headers(raw)
    _check_envelope_body(raw.get("body"), properties.get("body_encoding"))


def _check_envelope_properties(properties: dict[str, Any]) -> None:
    tag = properties.get("delivery_tag")
    if not isinstance(tag, str) or not _TASK_ID.fullmatch(tag):
        raise InvalidMessage("the envelope's delivery tag is missing or malformed")
    if not isinstance(properties.get("delivery_info", {}), dict):
        raise InvalidMessage("the envelope's delivery info is not a mapping")


def _check_envelope_headers(raw: dict[str, Any]) -> None:
    headers = raw.get("headers")
    if not isinstance(headers, dict | None):
        raise InvalidMessage("the envelope's headers are not a mapping")
    if headers and headers.get("compression") is not None:
        # kombu would decompress before any consumer sees the message, whatever the header says.
        raise InvalidMessage("compressed bodies are not accepted")
    for key in ("content-type", "content-encoding"):
        if not isinstance(raw.get(key), str | None):
            raise InvalidMessage(f"the envelope's {key} is not text")


def _check_envelope_body(body: object, encoding: object) -> None:
    if not isinstance(body, str | None):
        raise InvalidMessage("the envelope's body is not text")
    if body and len(body) > 2 * MAX_BODY_BYTES:
        raise InvalidMessage(f"the body is larger than {MAX_BODY_BYTES} bytes")
    if encoding == "base64":
        try:
            base64.b64decode(body or "", validate=True)
        except (binascii.Error, ValueError):
            raise InvalidMessage("the envelope's body is not base64") from None
    elif encoding is not None and (not isinstance(encoding, str) or encoding.lower() != "utf-8"):
        raise InvalidMessage("the envelope's body encoding is not base64")


def _decode_body(body: object) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    if isinstance(body, str):
        try:
            body = body.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidMessage("the body is not valid UTF-8") from None
    if not isinstance(body, bytes | bytearray | memoryview):
        raise InvalidMessage("the body is not text")
    if len(body) > MAX_BODY_BYTES:
        raise InvalidMessage(f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        decoded = json.loads(bytes(body), parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise InvalidMessage("the body is not JSON") from None
    if not isinstance(decoded, list) or len(decoded) != 3:
        raise InvalidMessage("the body is not a protocol-2 [args, kwargs, embed] list")
    args, kwargs, embed = decoded
    if not isinstance(args, list) or not isinstance(kwargs, dict) or not isinstance(embed, dict):
        raise InvalidMessage("the body is not a protocol-2 [args, kwargs, embed] list")
    if not set(embed) <= _EMBED_KEYS:
        raise InvalidMessage("the body's embed part has unknown keys")
    return args, kwargs, embed


def _refuse_constant(name: str) -> Any:
    raise ValueError(name)


def _clean_headers(
    headers: Mapping[Any, Any], limits: TimeLimits, *, own_task: bool
) -> dict[str, Any]:
    """The headers Celery reads, each checked; anything else (stamps included) is left out."""
    cleaned: dict[str, Any] = {
        "lang": "py",
        "task": headers["task"],
        "id": headers["id"],
        "retries": _whole(headers.get("retries", 0), "retries", MAX_RETRIES),
        "timelimit": clamp_time_limits(headers.get("timelimit"), limits),
        "ignore_result": _flag(_ignore_result(headers.get("ignore_result")), "ignore_result"),
        "replaced_task_nesting": _whole(
            headers.get("replaced_task_nesting", 0), "replaced_task_nesting", MAX_REPLACED_NESTING
        ),
    }
    for name in ("shadow", "group", "root_id", "parent_id", "origin"):
        cleaned[name] = _short_text(headers.get(name), name, MAX_HEADER_TEXT)
    for name in ("argsrepr", "kwargsrepr"):
        cleaned[name] = _short_text(headers.get(name), name, MAX_REPR_TEXT)
    group_index = headers.get("group_index")
    cleaned["group_index"] = (
        None if group_index is None else _whole(group_index, "group_index", 2**31)
    )
    eta = headers.get("eta")
    if eta is not None and own_task:
        raise InvalidMessage("an eta is not accepted: items are due when the database says so")
    cleaned["eta"] = _timestamp(eta, "eta")
    expires = _timestamp(headers.get("expires"), "expires")
    # This project's messages never expire by a clock: the sender's and the worker's need not
    # agree, and a late message only loses its claim. An expiry a sender set is ignored.
    cleaned["expires"] = None if own_task else expires
    return cleaned


def clamp_time_limits(value: object, limits: TimeLimits) -> list[float | None]:
    """``[hard, soft]`` as Celery sends it, each kept within the worker's own limits.

    ``None`` means the task's default. A number is kept between ``MIN_TIME_LIMIT_SECONDS`` and
    the configured limit, so no message can give a task longer, or kill a child sooner.
    """
    if value is None:
        return [None, None]
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise InvalidMessage("the timelimit header is not a [hard, soft] pair")
    hard, soft = (_limit(v, ceiling) for v, ceiling in zip(value, _ceilings(limits), strict=True))
    if hard is not None and soft is not None and soft > hard:
        soft = hard
    return [hard, soft]


def _ceilings(limits: TimeLimits) -> tuple[float, float]:
    return limits.hard_seconds, limits.soft_seconds


def _limit(value: object, ceiling: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidMessage("the timelimit header holds something other than numbers")
    if not math.isfinite(value) or value <= 0:
        raise InvalidMessage("the timelimit header holds a non-positive or infinite limit")
    return float(min(max(value, MIN_TIME_LIMIT_SECONDS), ceiling))


def _whole(value: object, name: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise InvalidMessage(f"the {name} header is not a whole number from 0 to {maximum}")
    return value


def _ignore_result(value: object) -> object:
    # ``send_task`` by name (a host app's) sends null: not asked for, so False.
    return False if value is None else value


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidMessage(f"the {name} header is not a boolean")
    return value


def _short_text(value: object, name: str, maximum: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > maximum or not storable(value):
        raise InvalidMessage(f"the {name} header is not text of at most {maximum} characters")
    return value


def _timestamp(value: object, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= 64:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return value
    raise InvalidMessage(f"the {name} header is not an ISO-8601 timestamp")


def positional(*names: str, checks: Mapping[str, Callable[[object], object]]) -> ArgumentCheck:
    """An argument check for a task taking exactly ``names``, by position or by keyword."""

    def check(args: list[Any], kwargs: dict[str, Any]) -> None:
        if len(args) > len(names):
            raise InvalidArgument(f"expected {len(names)} arguments, got {len(args)}")
        given = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names or key in given:
                raise InvalidArgument(f"unexpected or repeated argument {str(key)[:40]!r}")
            given[key] = value
        missing = [name for name in names if name not in given]
        if missing:
            raise InvalidArgument(f"missing argument {missing[0]!r}")
        for name in names:
            checks[name](given[name])

    return check


NO_ARGUMENTS: ArgumentCheck = positional(checks={})


def batch_arguments() -> ArgumentCheck:
    """``(items)``: 1 to ``MAX_BATCH`` lists of ``[collection_id, content_id, work_version]``."""
    return positional("items", checks={"items": _batch_items})


def _batch_items(value: object) -> None:
    if not isinstance(value, list):
        raise InvalidArgument("items is not a list")
    checked_items(value)


def after_write_arguments() -> ArgumentCheck:
    """``(collection_slug, content_id)``: a host's content write, named by slug and id."""
    return positional(
        "collection_slug",
        "content_id",
        checks={
            "collection_slug": _collection_slug,
            "content_id": lambda v: validation.identifier(v, "content_id is not an id"),
        },
    )


def _collection_slug(value: object) -> None:
    # A reason of its own: the slug's own check would quote the value back into the log.
    try:
        validate_collection_slug(value)
    except InvalidArgument:
        raise InvalidArgument("collection_slug is not a collection slug") from None


def range_arguments() -> ArgumentCheck:
    """``(collection_id, range_id)``: one key range of a reconciliation's scan."""
    return positional(
        "collection_id",
        "range_id",
        checks={
            "collection_id": lambda v: validation.identifier(v, "collection_id is not an id"),
            "range_id": lambda v: validation.identifier(v, "range_id is not an id"),
        },
    )


def item_arguments() -> ArgumentCheck:
    """``(collection_id, content_id, work_version)``, the ids of one work item."""
    return positional(
        "collection_id",
        "content_id",
        "work_version",
        checks={
            "collection_id": lambda v: validation.identifier(v, "collection_id is not an id"),
            "content_id": lambda v: validation.identifier(v, "content_id is not an id"),
            "work_version": validation.work_version,
        },
    )
