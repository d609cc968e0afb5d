"""The demo's progress lines say why they stand still: the workers are idle between ticks."""

from __future__ import annotations

import sqlalchemy as sa

from media_usage_worker.demo import _Progress
from media_usage_worker.domain.content_model import FieldDefinition
from tests.support import active_collection


def test_a_progress_line_that_stands_still_says_why(db: sa.Engine) -> None:
    active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    with db.begin() as conn:  # captured: two pending work rows, nobody working on them
        conn.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1'), ('e2', 'm2')"))
    lines: list[str] = []
    progress = _Progress(db, written=2, started=0.0, echo=lines.append)
    assert progress.report() is False
    assert "processed      0/2  work left      2  leased     0" in lines[0]
    assert "idle" not in lines[0]  # the first line has nothing to compare with
    progress.last = 0.0  # a second later
    progress.report()
    assert lines[1].endswith("(the workers are idle until the next tick sends up to 5000)")
