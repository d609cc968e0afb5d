"""Random and malformed broker messages, each labelled with whether the worker must drop it.

``forgeries`` mixes every shape the reliability issue found (bodies that are not the protocol's
list, broken header types, a missing id, absurd time limits, hostile ids) with random headers
and bodies, raw Redis entries that are not kombu envelopes, and messages that are valid but
forged or duplicated (those reach the task, whose claim decides). Every message that must be
dropped and carries a usable id has a unique ``fuzz-N`` id, so the worker's log can be checked
for exactly one line per message.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from media_usage_worker.domain.work import MAX_BATCH

ITEM_TASK = "media_usage.process_work"
BATCH_TASK = "media_usage.process_batch"
TICK_TASK = "media_usage.tick"


@dataclass
class Forgery:
    headers: Any = None
    body: str | bytes = ""
    content_type: str | None = "application/json"
    content_encoding: str | None = "utf-8"
    raw_entry: str | None = None  # pushed onto the Redis list as is, bypassing kombu
    drop: bool = True
    labelled: bool = False  # carries a unique fuzz-N id the log line must name
    extra: dict[str, Any] = field(default_factory=dict)


def _body(args: Any, kwargs: Any = None, embed: Any = None) -> str:
    return json.dumps([args, {} if kwargs is None else kwargs, {} if embed is None else embed])


_JUNK = [None, True, 0, -1, 1.5, 10**30, "", "x" * 3000, "a\ud800", "\u0000", [], {}, [1, 2, 3],
         {"__type__": "datetime", "__value__": "x"}, "2026-13-45", "Infinity"]  # fmt: skip
_TEXT_HEADERS = {"origin", "argsrepr", "kwargsrepr", "shadow", "group", "root_id", "parent_id"}
_HEADER_NAMES = ["timelimit", "eta", "expires", "retries", "origin", "argsrepr", "kwargsrepr",
                 "shadow", "group", "root_id", "parent_id", "ignore_result", "group_index",
                 "replaced_task_nesting", "compression"]  # fmt: skip


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    if depth > 3 or rng.random() < 0.4:
        return rng.choice(_JUNK)
    if rng.random() < 0.5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {rng.choice(["a", "args", "kwargs", "id", "task"]): _random_json(rng, depth + 1)
            for _ in range(rng.randrange(4))}  # fmt: skip


def _fixed_cases(real: tuple[str, str, int]) -> list[Forgery]:
    """Each finding of the reliability issue, once."""
    collection_id, content_id, version = real
    cases: list[Forgery] = []
    for body in ['"hello"', "[[1,2,3]]", "null", "42", "[[],{},{},1]", "[" * 50_000, "{]"]:
        cases.append(Forgery(body=body))
    for limit in ("abc", [1, 2, 3]):
        cases.append(Forgery(headers={"task": TICK_TASK, "timelimit": limit}, body=_body([])))
    cases.append(Forgery(headers={"task": TICK_TASK, "id": None}, body=_body([])))
    for args in (["a\ud800", content_id, version], [collection_id, "b\u0000", version],
                 [collection_id, content_id], [collection_id, content_id, version, 1],
                 ["", content_id, version], [collection_id, "y" * 2000, version]):  # fmt: skip
        cases.append(Forgery(body=_body(args)))
    cases.append(Forgery(body=_body([collection_id, content_id, version], {"extra": 1})))
    cases.append(Forgery(content_type="application/x-python-serialize", body=b"\x80\x04K\x01."))
    cases.append(Forgery(content_encoding="binary"))
    cases.append(Forgery(body=_body([collection_id, content_id, version], None,
                                    {"callbacks": [{"task": TICK_TASK}]})))  # fmt: skip
    for raw in ("garbage{", '{"body": 5}', "[1,2]", "[" * 100_000,
                json.dumps({"body": "W10=", "headers": {"task": TICK_TASK, "id": "r1"},
                            "content-type": "application/json", "properties": {}})):  # fmt: skip
        cases.append(Forgery(raw_entry=raw))
    # Batch messages: every malformed list is dropped whole, before any item is claimed.
    item = [collection_id, content_id, version]
    for items in ([], [item] * (MAX_BATCH + 1), [item, [collection_id, "a\ud800", version]],
                  [item, [collection_id, content_id]], [item, "x"], {"items": [item]},
                  [item, [collection_id, content_id, 10**30]], [[None, None, None]]):  # fmt: skip
        cases.append(Forgery(headers={"task": BATCH_TASK}, body=_body([items])))
    cases.append(Forgery(headers={"task": BATCH_TASK}, body=_body([[item]], {"items": [item]})))
    # Valid batches: duplicates of real items (inside one batch too) and forged ids.
    forged = [collection_id, "forged-batch", 1]
    for items in ([item, item, item], [forged, item]):
        cases.append(Forgery(headers={"task": BATCH_TASK}, body=_body([items]), drop=False))
    # Valid but hostile: a duplicate of a real item asking for a 1 ms limit (clamped), stamps.
    cases.append(Forgery(headers={"task": ITEM_TASK, "timelimit": [0.001, 0.001],
                                  "stamps": {"s": 1}, "stamped_headers": ["s"]},
                         body=_body([collection_id, content_id, version]), drop=False))  # fmt: skip
    return cases


def _random_case(rng: random.Random, real: list[tuple[str, str, int]]) -> Forgery:
    collection_id, content_id, version = rng.choice(real)
    roll = rng.random()
    if roll < 0.05:  # a batch of valid and hostile items: valid only if every item is
        picks = [[collection_id, content_id, version], [collection_id, f"f{rng.random()}", 1],
                 [collection_id, content_id, rng.choice(_JUNK[:12])]]  # fmt: skip
        items = [rng.choice(picks) for _ in range(rng.randrange(1, 6))]
        valid = all(isinstance(i[2], int) and not isinstance(i[2], bool) and i[2] >= 1
                    and i[2] < 2**63 for i in items)  # fmt: skip
        return Forgery(headers={"task": BATCH_TASK}, body=_body([items]), drop=not valid)
    if roll < 0.15:  # valid: a duplicate, or a forged id the claim refuses
        args = rng.choice([[collection_id, content_id, version],
                           [collection_id, f"forged-{rng.randrange(10**6)}", 1]])  # fmt: skip
        return Forgery(headers={"task": ITEM_TASK}, body=_body(args), drop=False)
    if roll < 0.35:  # a random body
        body = json.dumps(_random_json(rng))
        return Forgery(body=body)
    if roll < 0.6:  # one header of a wrong type or value
        name = rng.choice(_HEADER_NAMES)
        wrong: list[Any] = [[1, 2, 3], -5, {"x": 1}, [None, "x"], "x" * 5000]
        # Short text is a valid value of the text headers; True is one of ignore_result.
        wrong += [] if name in _TEXT_HEADERS else ["abc"]
        wrong += ["yes"] if name == "ignore_result" else [True]
        value = rng.choice(wrong)
        return Forgery(headers={"task": ITEM_TASK, name: value},
                       body=_body([collection_id, content_id, version]))  # fmt: skip
    if roll < 0.85:  # hostile arguments
        junk = rng.choice(_JUNK[:12])
        args = [collection_id, content_id, version]
        args[rng.randrange(3)] = junk
        return Forgery(body=_body(args[: rng.choice([3, 3, 2, 4])]))
    if roll < 0.93:  # the task or the id header itself
        headers = rng.choice([{"task": rng.choice(_JUNK)}, {"task": "not.ours"},
                              {"task": ITEM_TASK, "id": rng.choice(_JUNK[:12])}])  # fmt: skip
        return Forgery(headers=headers, body=_body([collection_id, content_id, version]))
    raw = rng.choice(["{", "null", "[]", '{"properties": 1}', json.dumps(_random_json(rng))])
    return Forgery(raw_entry=raw)


def forgeries(
    rng: random.Random, real: list[tuple[str, str, int]], count: int
) -> Iterator[Forgery]:
    cases = _fixed_cases(real[0]) + [_random_case(rng, real) for _ in range(count)]
    rng.shuffle(cases)
    for number, case in enumerate(cases):
        headers = {"task": ITEM_TASK} if case.headers is None else dict(case.headers)
        if "id" not in headers and case.raw_entry is None:
            headers["id"] = f"fuzz-{number}" if case.drop else str(uuid.uuid4())
            # A kombu type marker in a header breaks the whole envelope's JSON for kombu: its
            # line can only say that the entry was not an envelope, not which message it was.
            case.labelled = case.drop and "__type__" not in json.dumps(headers)
        case.headers = headers
        yield case
