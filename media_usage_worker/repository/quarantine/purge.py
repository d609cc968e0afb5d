"""Purge statements (docs/design.md §13): quarantined items removed for good behind the same
fence as a retirement, and the delivery table of their files.

A purge batch is one transaction: the fence, then the quarantine rows locked (so a restore
racing it either wins whole or loses whole), then the rule's checks again (coverage complete
and nothing waiting, no occurrence, no other row naming the storage key, nothing the final
sweep found), then each file's key written to the delivery table and the rows deleted.
Delivery hands the files over afterwards; a key that fails ``MAX_DELIVERY_ATTEMPTS`` times (or
can never be delivered) is parked with its reason, so it stops failing later runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa

from media_usage_worker.domain.cleanup import PurgeRefusal
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.schema import purges, quarantine
from media_usage_worker.repository.quarantine.audit_log import write_audit
from media_usage_worker.repository.quarantine.fence import (
    FenceBusy,
    hold_fence,
    lock_rows,
    refused_by_rule,
)

_q, _pg = quarantine.c, purges.c

# Failed deliveries of one key before it is parked (then only an operator acts on it).
MAX_DELIVERY_ATTEMPTS = 5


def _old_enough(older_than_days: int) -> sa.ColumnElement[bool]:
    return _q.retired_at < db_now(-86_400 * older_than_days)


def purgeable(
    bind: Bind, older_than_days: int, after: tuple[str, str] | None, limit: int
) -> list[tuple[str, str, str]]:
    """(retired_at, id, storage key) of quarantined items retired more than
    ``older_than_days`` days ago (by the database's clock), oldest first, after the position
    ``after`` (retired_at, id): a keyset, so items a batch kept are passed, not read again."""
    query = (
        sa.select(_q.retired_at, _q.id, _q.storage_key)
        .where(_old_enough(older_than_days))
        .order_by(_q.retired_at, _q.id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(
            sa.or_(_q.retired_at > after[0], sa.and_(_q.retired_at == after[0], _q.id > after[1]))
        )
    with read_transaction(bind) as conn:
        return [(at, i, key) for at, i, key in conn.execute(query)]


def purgeable_ids(bind: Bind, older_than_days: int, limit: int) -> list[str]:
    """The ids of the first ``limit`` purgeable items, oldest first."""
    return [media_id for _, media_id, _ in purgeable(bind, older_than_days, None, limit)]


@dataclass(frozen=True)
class PurgeBatch:
    purged: list[str] = field(default_factory=list)
    kept: dict[str, PurgeRefusal] = field(default_factory=dict)


def purge_batch(
    engine: sa.Engine,
    ids: Sequence[str],
    actor: str,
    older_than_days: int,
    *,
    mentioned: Mapping[str, str] | None = None,
    dry_run: bool = False,
) -> PurgeBatch:
    """Remove the ids the rule allows from the quarantine for good, each file's storage key
    left in the delivery table in the same transaction; every other id is kept with its
    reason. ``mentioned``: ids the final sweep found somewhere (kept). ``dry_run`` applies
    every check and removes nothing."""
    try:
        return _purge_batch(engine, ids, actor, older_than_days, mentioned or {}, dry_run)
    except FenceBusy:
        return PurgeBatch([], dict.fromkeys(ids, PurgeRefusal.NOT_KNOWN_YET))


def _purge_batch(
    engine: sa.Engine,
    ids: Sequence[str],
    actor: str,
    older_than_days: int,
    mentioned: Mapping[str, str],
    dry_run: bool,
) -> PurgeBatch:
    kept: dict[str, PurgeRefusal] = {}
    with transaction(engine) as conn:
        hold_fence(conn)
        held = lock_rows(conn, quarantine, ids)
        aged = sa.select(_q.id).where(_q.id.in_(list(held)), _old_enough(older_than_days))
        old = set(conn.execute(aged).scalars())
        for media_id in ids:
            if media_id not in held:
                kept[media_id] = PurgeRefusal.NOT_RETIRED  # restored (or purged) meanwhile
            elif media_id not in old:
                kept[media_id] = PurgeRefusal.TOO_RECENT
            elif media_id in mentioned:
                kept[media_id] = PurgeRefusal.MENTIONED
        keys = {i: held[i].storage_key for i in ids if i not in kept}
        kept.update({i: PurgeRefusal(why) for i, why in refused_by_rule(conn, keys).items()})
        chosen = [i for i in ids if i not in kept]
        found = sorted(i for i, why in kept.items() if why == PurgeRefusal.MENTIONED)
        if found and not dry_run:
            # What the final sweep kept is an action on those items too: audited with where.
            where = "; ".join(f"{i} in {mentioned[i]}" for i in found)
            write_audit(conn, actor, "purge_kept", found, f"the final sweep found {where}"[:2000])
        if chosen and not dry_run:
            conn.execute(
                purges.insert().from_select(
                    ["media_id", "storage_key", "purged_at"],
                    sa.select(_q.id, _q.storage_key, db_now()).where(_q.id.in_(chosen)),
                )
            )
            conn.execute(quarantine.delete().where(_q.id.in_(chosen)))
            write_audit(conn, actor, "purge", chosen, None)
    return PurgeBatch(chosen, {i: kept[i] for i in ids if i in kept})


@dataclass(frozen=True)
class Undelivered:
    media_id: str
    storage_key: str
    purged_at: str
    attempt_count: int
    last_error: str | None
    parked_at: str | None


def undelivered_page(
    bind: Bind, limit: int, after: tuple[str, str] | None = None, *, parked: bool | None = False
) -> list[Undelivered]:
    """Purged files not yet handed to the host, oldest first, after ``after`` (purged_at,
    media id); ``parked``: only parked ones (True), only those still tried (False), all
    (None)."""
    query = sa.select(
        _pg.media_id,
        _pg.storage_key,
        _pg.purged_at,
        _pg.attempt_count,
        _pg.last_error,
        _pg.parked_at,
    )
    if parked is not None:
        query = query.where(_pg.parked_at.isnot(None) if parked else _pg.parked_at.is_(None))
    if after is not None:
        query = query.where(
            sa.or_(
                _pg.purged_at > after[0],
                sa.and_(_pg.purged_at == after[0], _pg.media_id > after[1]),
            )
        )
    query = query.order_by(_pg.purged_at, _pg.media_id).limit(limit)
    with read_transaction(bind) as conn:
        return [Undelivered(*row) for row in conn.execute(query)]


def undelivered(bind: Bind, limit: int) -> list[tuple[str, str]]:
    """(media id, storage key) of purged files still to hand to the host, oldest first."""
    return [(u.media_id, u.storage_key) for u in undelivered_page(bind, limit)]


def delivered(bind: Bind, media_ids: Sequence[str]) -> None:
    with transaction(bind) as conn:
        conn.execute(purges.delete().where(_pg.media_id.in_(media_ids)))


def delivery_failed(bind: Bind, media_id: str, error: str, *, park_now: bool = False) -> bool:
    """Count a failed delivery; the key is parked at ``MAX_DELIVERY_ATTEMPTS`` failures, or at
    once with ``park_now`` (a key that can never be delivered). Whether it is parked now."""
    attempts = _pg.attempt_count + 1
    parks = sa.true() if park_now else attempts >= MAX_DELIVERY_ATTEMPTS
    with transaction(bind) as conn:
        parked = conn.execute(
            purges.update()
            .where(_pg.media_id == media_id)
            .values(
                attempt_count=attempts,
                last_error=error[:500],
                parked_at=sa.case((parks, db_now()), else_=_pg.parked_at),
            )
            .returning(_pg.parked_at)
        ).scalar_one_or_none()
    return parked is not None


def forget_undelivered(bind: Bind, storage_key: str, actor: str) -> list[str]:
    """Drop every undelivered file of ``storage_key`` (the operator deletes it, or knows it is
    gone); audited. The media ids whose file it was."""
    with transaction(bind) as conn:
        forgotten = purges.delete().where(_pg.storage_key == storage_key).returning(_pg.media_id)
        ids = sorted(conn.execute(forgotten).scalars())
        if ids:
            write_audit(conn, actor, "forget", ids, f"undelivered file {storage_key!r} forgotten")
    return ids


def quarantine_counts(bind: Bind) -> dict[str, int]:
    """What ``status`` shows of the clean-up, from three cheap counts: items in the quarantine,
    purged files not yet delivered, and those of them parked."""
    with read_transaction(bind) as conn:
        retired = conn.execute(sa.select(sa.func.count()).select_from(quarantine)).scalar_one()
        undelivered, parked = conn.execute(
            sa.select(sa.func.count(), sa.func.count(_pg.parked_at)).select_from(purges)
        ).one()
    return {
        "retired": int(retired),
        "undelivered_files": int(undelivered),
        "parked_files": int(parked),
    }
