"""The JSON examples of the docs, read as data, and how an example's keys differ from a real
answer's (tests/integration/test_docs_examples.py, tests/acceptance/test_demo.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1] / "docs"
_BLOCK = re.compile(r"```(json|console)\n(.*?)```", re.S)
_ELIDED = (
    (re.compile(r"\{…[^}]*\}|\{\.\.\.\}"), "{}"),
    (re.compile(r"\[\.\.\.\]"), "[]"),
    (re.compile(r",\s*\.\.\.\s*\]"), "]"),  # "and more items"
)


def examples(name: str) -> Iterator[tuple[int, Any]]:
    """(line, parsed JSON) of every JSON example in a doc; a console example's JSON is what
    follows its command lines."""
    text = (DOCS / name).read_text()
    for match in _BLOCK.finditer(text):
        body = match[2]
        if match[1] == "console":
            lines = body.splitlines()
            while lines and (lines[0].startswith("$") or lines[0].startswith("    ")):
                lines.pop(0)
            body = "\n".join(lines)
            if not body.strip():
                continue  # a command whose answer the prose gives
        for pattern, replacement in _ELIDED:
            body = pattern.sub(replacement, body)
        line = text[: match.start()].count("\n") + 1
        yield line, json.loads(body)


def differences(doc: Any, real: Any, maps: frozenset[str], path: str = "$") -> list[str]:
    """Where the example's keys differ from the real answer's."""
    if isinstance(doc, dict) and isinstance(real, dict):
        if not doc or path in maps:
            return []
        found = []
        shown = set(doc) - {"…"}
        missing = set() if "…" in doc else set(real) - shown
        if shown - set(real) or missing:
            found.append(
                f"{path}: the docs show {sorted(shown - set(real))} that the answer lacks, "
                f"and lack {sorted(missing)}"
            )
        for key in shown & set(real):
            found += differences(doc[key], real[key], maps, f"{path}.{key}")
        return found
    if isinstance(doc, list) and isinstance(real, list) and doc and real:
        return differences(doc[0], real[0], maps, f"{path}[]")
    return []
