"""A host application writing content by plain SQL, on and on, through database restarts."""

from __future__ import annotations

import itertools
import random
import threading
import time

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from media_usage_worker.domain.sample_content import sample_entries
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.sample_content import write_entries


class ContentWriter(threading.Thread):
    """Creates, edits, drafts and deletes entries of the sample collections until ``total``
    entries were created (or ``stop`` is set). Failed statements (a restarting server) are
    counted and skipped: the final content, whatever it is, is what the index must match."""

    def __init__(
        self, url: str, total: int, per_second: float, seed: int = 7, first: int = 0
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.total, self.pause = url, total, 1 / per_second
        # The number of the first entry it creates: past any the site already has, or its
        # inserts would all fail on their ids.
        self.first = first
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.created = self.edited = self.drafted = self.deleted = self.failed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        engine = create_engine(self.url)
        entries = sample_entries(self.total, seed=11, start=self.first)
        live: list[tuple[str, str]] = []
        try:
            while self.created < self.total and not self.stop.wait(self.pause):
                try:
                    self._step(engine, entries, live)
                except DBAPIError:
                    self.failed += 1
                    time.sleep(0.1)
        except BaseException as exc:  # surfaced by the test, never swallowed
            self.error = exc
        finally:
            engine.dispose()

    def _step(self, engine: sa.Engine, entries, live: list[tuple[str, str]]) -> None:
        roll = self.rng.random()
        if roll < 0.55 or len(live) < 10:
            batch = list(itertools.islice(entries, 5))
            self.created += len(batch)  # consumed even if the insert fails
            write_entries(engine, batch)
            live.extend((e.collection, e.row["id"]) for e in batch)
            return
        slug, content_id = self.rng.choice(live)
        image = "hero" if slug == "articles" else "photo"
        with engine.begin() as conn:
            if roll < 0.80:
                conn.execute(
                    sa.text(f"UPDATE ec_{slug} SET {image} = :m, version = version + 1 "
                            "WHERE id = :id"),
                    {"m": f"media-{self.rng.randrange(500):04d}", "id": content_id},
                )  # fmt: skip
                self.edited += 1
            elif roll < 0.92:
                revision = f"rev-{content_id}-{self.rng.randrange(10**9)}"
                data = f'{{"{image}": "media-{self.rng.randrange(500):04d}"}}'
                conn.execute(
                    sa.text("INSERT INTO revisions (id, collection, entry_id, data) "
                            "VALUES (:r, :c, :e, :d)"),
                    {"r": revision, "c": slug, "e": content_id, "d": data},
                )  # fmt: skip
                conn.execute(
                    sa.text(f"UPDATE ec_{slug} SET draft_revision_id = :r, "
                            "version = version + 1 WHERE id = :id"),
                    {"r": revision, "id": content_id},
                )  # fmt: skip
                self.drafted += 1
            else:
                conn.execute(sa.text(f"DELETE FROM ec_{slug} WHERE id = :id"), {"id": content_id})
                live.remove((slug, content_id))
                self.deleted += 1
