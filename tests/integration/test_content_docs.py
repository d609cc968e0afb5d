"""docs/content.md's worked example, run as written on both dialects: its commands, its SQL,
and the table of what the index finds."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.pipeline.capture import activate
from tests.processes import cli
from tests.support import drain, mark_coverage_complete

DOC = (Path(__file__).resolve().parents[2] / "docs" / "content.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.DOTALL)


def _found_table() -> dict[str, str]:
    section = DOC[DOC.index("## What the index finds") :]
    return dict(re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|$", section, flags=re.MULTILINE))


def test_the_worked_example_finds_what_the_page_says(db: sa.Engine, migrated_url: str) -> None:
    (commands,) = _blocks("sh")
    # The shell's reading: a quoted argument may span lines; each command starts media-usage.
    words = shlex.split(commands.replace("\\\n", " "))
    starts = [i for i, word in enumerate(words) if word == "media-usage"] + [len(words)]
    assert starts[0] == 0 and len(starts) == 3
    for start, end in itertools.pairwise(starts):
        ran = cli(*words[start + 1 : end], url=migrated_url)
        assert ran.code == 0, (words[start:end], ran.err)
    activate(db)
    (statements,) = _blocks("sql")
    with db.begin() as conn:
        for statement in statements.split(";\n"):
            if statement.strip():
                conn.execute(sa.text(statement))
    drain(db)
    mark_coverage_complete(db)

    expected = _found_table()
    assert len(expected) == 6
    index = MediaUsage(db)
    for media_id, path in expected.items():
        (entry,) = index.usage(media_id).entries
        paths = [o["field_path"] for s in entry.sources for o in s["occurrences"]]
        assert (entry.content_id, paths) == ("a1", [path]), media_id
    assert index.usage_counts(list(expected)).counts == dict.fromkeys(expected, 1)
