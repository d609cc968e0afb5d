"""The truth about a site emdash's code made, computed from its rows alone (no extractor):
which media items some entry, draft, setting or avatar names (tests/integration/
test_emdash_sites.py, tests/acceptance/test_emdash_built_site.py)."""

from __future__ import annotations

import json

import sqlalchemy as sa


def texts(conn: sa.Connection) -> list[str]:
    """Every text that can name a media item on an emdash site: each entry's fields (trashed
    entries too) and its draft revision's, the settings, the avatars. A field emdash deleted
    is no use, even where an old revision still holds its value."""
    found: list[str] = []
    registry = conn.execute(
        sa.text("SELECT c.slug, f.slug FROM _emdash_fields f "
                "JOIN _emdash_collections c ON c.id = f.collection_id")
    ).all()  # fmt: skip
    fields: dict[str, set[str]] = {}
    for collection, field in registry:
        fields.setdefault(collection, set()).add(field)
    for collection, names in fields.items():
        for row in conn.execute(sa.text(f'SELECT * FROM "ec_{collection}"')).mappings():
            found += [str(row[n]) for n in names if row.get(n) is not None]
            if row.get("draft_revision_id"):
                data = conn.execute(
                    sa.text("SELECT data FROM revisions WHERE id = :i"),
                    {"i": row["draft_revision_id"]},
                ).scalar_one_or_none()
                draft = json.loads(data) if data else {}
                found += [json.dumps(draft[n]) for n in names if n in draft]
    found += conn.execute(sa.text("SELECT value FROM options")).scalars().all()
    found += [v for v in conn.execute(sa.text("SELECT avatar_url FROM users")).scalars() if v]
    found += [
        v for v in conn.execute(sa.text("SELECT avatar_media_id FROM _emdash_bylines")).scalars()
        if v
    ]  # fmt: skip
    return found


def truly_used(engine: sa.Engine) -> tuple[set[str], set[str]]:
    """(every media id, those some text names by id or by its file's storage key)."""
    with engine.connect() as conn:
        library = conn.execute(sa.text("SELECT id, storage_key FROM media")).all()
        every = "\n".join(texts(conn))
    used = {i for i, key in library if i in every or (key and f"/{key}" in every)}
    return {i for i, _ in library}, used
