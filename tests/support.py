"""Helpers shared by the database tests: set up rows directly, read them back raw."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.schema import (
    collection_deletions,
    index_status,
    metadata,
    occurrences,
    reconciliations,
    sources,
    work,
)
from media_usage_worker.repository.registry.collections import Collection, CollectionRegistry
from media_usage_worker.repository.registry.rules import record_indexed_rules

GALLERY_FIELD = FieldDefinition(
    "gallery", "Gallery", "repeater", validation={"subFields": [{"slug": "image", "type": "image"}]}
)
# The fields most tests use: a display title, an image, a repeater of images.
SAMPLE_FIELDS = [
    FieldDefinition("title", "Title", "string"),
    FieldDefinition("hero", "Hero", "image"),
    GALLERY_FIELD,
]

# Runs a command as root without the capabilities that let root ignore file modes, so a test
# can make a database file read-only for it (util-linux ``setpriv``).
WITHOUT_FILE_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
PAST = "2000-01-01T00:00:00.000Z"
FUTURE = "2999-01-01T00:00:00.000Z"
SORTABLE = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def active_collection(
    engine: sa.Engine, slug: str = "posts", fields: Sequence[FieldDefinition] = ()
) -> Collection:
    """A collection with capture active (activating the database if it is not yet)."""
    collection = CollectionRegistry(engine).create_collection(slug, slug.title(), list(fields))
    activate(engine)
    return collection


def insert_work(
    engine: sa.Engine, collection: Collection, content_id: str, **values: Any
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "collection_id": collection.id,
        "collection_slug": collection.slug,
        "content_id": content_id,
        "change_epoch": 1,
        "work_version": 1,
        "state": "pending",
        "attempt_count": 0,
        "next_attempt_at": db_now(),
        "created_at": db_now(),
        "updated_at": db_now(),
    }
    row.update(values)
    with engine.begin() as conn:
        conn.execute(work.insert().values(**row))
    return get_work(engine, collection.id, content_id)


def get_work(engine: sa.Engine, collection_id: str, content_id: str) -> dict[str, Any] | None:
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(work).where(
                work.c.collection_id == collection_id, work.c.content_id == content_id
            )
        ).first()
    return None if row is None else dict(row._mapping)


def set_work(engine: sa.Engine, collection_id: str, content_id: str, **values: Any) -> None:
    with engine.begin() as conn:
        conn.execute(
            work.update()
            .where(work.c.collection_id == collection_id, work.c.content_id == content_id)
            .values(**values)
        )


def bump_version(engine: sa.Engine, collection_id: str, content_id: str) -> None:
    """What a capture trigger does to the row when the entry is written again."""
    with engine.begin() as conn:
        conn.execute(
            work.update()
            .where(work.c.collection_id == collection_id, work.c.content_id == content_id)
            .values(
                work_version=work.c.work_version + 1,
                change_epoch=work.c.change_epoch + 1,
                state="pending",
                attempt_count=0,
                next_attempt_at=db_now(),
                lease_token=None,
                lease_expires_at=None,
                last_attempted_at=None,
                last_error_code=None,
                updated_at=db_now(),
            )
        )


def status_row(engine: sa.Engine, collection_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(index_status).where(index_status.c.collection_id == collection_id)
        ).one()
    return dict(row._mapping)


def mark_coverage_complete(engine: sa.Engine) -> None:
    """Coverage as a finished reconciliation leaves it: ``complete``, nothing to reconcile,
    indexed under the running extraction rules."""
    with engine.begin() as conn:
        conn.execute(index_status.update().values(status="complete", reconciliation_required=0))
        for collection_id in conn.execute(sa.select(index_status.c.collection_id)).scalars():
            if collection_id is not None:
                record_indexed_rules(conn, collection_id)


def complete_without_note(
    engine: sa.Engine, collection_id: str, content_id: str, work_version: int = 1
) -> None:
    """Claim and complete an item but send no coverage note: what a worker killed right after
    its completion commit leaves behind."""
    repo, item, lease_token = _claimed(engine, collection_id, content_id, work_version)
    assert repo.complete_work(**item, lease_token=lease_token)


def fail_without_note(
    engine: sa.Engine, collection_id: str, content_id: str, error_code: str, work_version: int = 1
) -> None:
    """Claim and fail an item for good but send no failure note: what a note that found the
    status row held leaves behind."""
    repo, item, lease_token = _claimed(engine, collection_id, content_id, work_version)
    assert repo.fail_work(**item, lease_token=lease_token, error_code=error_code)


def _claimed(
    engine: sa.Engine, collection_id: str, content_id: str, work_version: int
) -> tuple[Any, dict[str, Any], str]:
    from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository

    repo = MediaUsageWorkRepository(engine)
    item = {"collection_id": collection_id, "content_id": content_id, "work_version": work_version}
    claimed = repo.claim_work(**item, lease_duration_seconds=60)
    assert claimed is not None
    return repo, item, claimed.lease_token


def db_time(engine: sa.Engine) -> str:
    with engine.connect() as conn:
        return conn.execute(sa.select(db_now())).scalar_one()


def drain(engine: sa.Engine, limits=None, max_rounds: int = 100) -> list:
    """Process due work until none is due (the tick and worker, without Celery)."""
    from media_usage_worker.pipeline.fan_out import fan_out_due_work
    from media_usage_worker.pipeline.process import process_work_item
    from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository

    repo = MediaUsageWorkRepository(engine)
    results = []

    def process(page: list) -> list:
        for item in page:
            results.append(
                process_work_item(
                    engine,
                    collection_id=item.collection_id,
                    content_id=item.content_id,
                    work_version=item.work_version,
                    limits=limits,
                )
            )
        return page

    for _ in range(max_rounds):
        seen = fan_out_due_work(repo.bind, 100, process).seen
        if not seen and not run_ranges(engine, limits):
            return results
    raise AssertionError("work did not drain")


def run_ranges(engine: sa.Engine, limits=None) -> list:
    """Index every claimable key range a reconciliation handed out (the workers' part of a
    scan, without Celery); the report of each."""
    from media_usage_worker.domain.policy import Limits
    from media_usage_worker.pipeline.backfill import RangeRun
    from media_usage_worker.repository.reconciling.ranges import mark_for_dispatch

    run = RangeRun(engine, limits or Limits())
    return [run.run(cid, rid) for cid, rid, _ in mark_for_dispatch(engine, 0, 1000)]


def examples(quick: int, thorough: int) -> int:
    """How many examples a property test runs: ``thorough`` in CI (``.ci/run`` sets
    ``MEDIA_USAGE_TEST_THOROUGH``), ``quick`` in the tier a developer runs before each commit."""
    return thorough if os.environ.get("MEDIA_USAGE_TEST_THOROUGH") else quick


def reconcile_until_complete(engine: sa.Engine, collection_id: str) -> list[str]:
    """Reconcile ticks and drains (beat and workers, without Celery) until the collection's
    run has completed and its coverage is ``complete``; every step's action, in order."""
    from media_usage_worker.pipeline.reconciliation import Reconciler

    reconciler = Reconciler(engine, defer_seconds=0)
    actions: list[str] = []
    for _ in range(100):
        actions += [report.action for report in reconciler.tick()]
        drain(engine)
        if status_row(engine, collection_id)["status"] == "complete" and "completed" in actions:
            return actions
    raise AssertionError(f"did not converge: {actions[-10:]}")


def left_of(engine: sa.Engine, collection_id: str, slug: str) -> dict[str, int]:
    """Rows of the collection in every table a deletion must empty (0 everywhere when done)."""
    mine = sa.or_(sources.c.collection_id == collection_id, sources.c.collection_slug == slug)
    counts = {
        "work": sa.select(sa.func.count()).where(work.c.collection_id == collection_id),
        "sources": sa.select(sa.func.count()).where(mine),
        "occurrences": sa.select(sa.func.count()).where(
            occurrences.c.source_key.in_(sa.select(sources.c.source_key).where(mine))
        ),
        # Occurrences whose source row is gone (of any collection): a deletion that dropped a
        # source before its occurrences would hide them from the count above.
        "orphan occurrences": sa.select(sa.func.count())
        .select_from(occurrences)
        .where(~sa.exists().where(sources.c.source_key == occurrences.c.source_key)),
        "status": sa.select(sa.func.count()).where(index_status.c.scope_key == slug),
        "reconciliations": sa.select(sa.func.count()).where(
            reconciliations.c.collection_id == collection_id
        ),
        "tombstone": sa.select(sa.func.count()).where(
            collection_deletions.c.collection_id == collection_id
        ),
    }
    # Every other project table that names collections: none may keep a row of this one.
    for table in metadata.sorted_tables:
        if "collection_id" in table.c and table.name not in _COUNTED_ABOVE:
            counts[table.name] = sa.select(sa.func.count()).where(
                table.c.collection_id == collection_id
            )
    with engine.connect() as conn:
        left = {name: int(conn.execute(query).scalar_one()) for name, query in counts.items()}
        left["table"] = int(sa.inspect(conn).has_table(f"ec_{slug}"))
    left["registry"] = int(CollectionRegistry(engine).get(slug) is not None)
    return left


_COUNTED_ABOVE = {
    work.name, sources.name, index_status.name, reconciliations.name, collection_deletions.name
}  # fmt: skip
NOTHING_LEFT = dict.fromkeys(
    ["work", "sources", "occurrences", "orphan occurrences", "status", "reconciliations",
     "tombstone", "table", "registry"]
    + [t.name for t in metadata.sorted_tables
       if "collection_id" in t.c and t.name not in _COUNTED_ABOVE],
    0,
)  # fmt: skip


def broken_repeater_entry(engine: sa.Engine) -> Collection:
    """``posts`` with capture active and one entry, ``e1``, whose refresh always fails: the
    gallery repeater's validation is not JSON (``FieldDiscoveryError``)."""
    posts = active_collection(engine, "posts", SAMPLE_FIELDS)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE _emdash_fields SET validation = '{bad' WHERE slug = 'gallery'")
        )
        conn.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')"))
    return posts


def refuse_media_id(engine: sa.Engine, media_id: str) -> None:
    """A trigger that makes the database refuse any occurrence of ``media_id``: a real error
    from the index write, as an index limit, a constraint or a full disk gives."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(
                sa.text(
                    "CREATE FUNCTION refuse_media() RETURNS trigger LANGUAGE plpgsql AS $$ "
                    f"BEGIN IF NEW.media_id = '{media_id}' THEN "
                    "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$"
                )
            )
            conn.execute(
                sa.text(
                    "CREATE TRIGGER refuse_media BEFORE INSERT ON _emdash_media_usage "
                    "FOR EACH ROW EXECUTE FUNCTION refuse_media()"
                )
            )
        else:
            conn.execute(
                sa.text(
                    "CREATE TRIGGER refuse_media BEFORE INSERT ON _emdash_media_usage "
                    f"WHEN NEW.media_id = '{media_id}' "
                    "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                )
            )
