"""A freshly migrated database has emdash 0.34.0's shape, compared with the facts sheet.

The expectation below is transcribed from the facts sheet (§1, §2), not derived from
``repository.schema``, so a drift in either shows up here. Column spec: ``name type [NN|PK]``;
PK columns are NOT NULL on PostgreSQL and, as emdash declared them, nullable on SQLite.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.errors import DowngradeRefused
from media_usage_worker.repository.migration.migrate import (
    current_revision,
    downgrade,
    head_revision,
    upgrade,
)

EXPECTED: dict[str, dict] = {
    "_emdash_collections": {
        "columns": """id text PK; slug text NN; label text NN; label_singular text;
            description text;
            icon text; supports text; source text; created_at text; updated_at text;
            search_config text; has_seo integer NN; url_pattern text; comments_enabled integer;
            comments_moderation text; comments_closed_after_days integer;
            comments_auto_approve_users integer; hidden integer NN; sort_order integer;
            admin_config text; title_field text; date_field text; routable integer NN""",
        "pk": ["id"],
        "unique": {"_emdash_collections_slug_key": ["slug"]},
        "indexes": {},
    },
    "_emdash_fields": {
        "columns": """id text PK; collection_id text NN; slug text NN; label text NN; type text NN;
            column_type text NN; required integer; unique integer; default_value text;
            validation text; widget text; options text; sort_order integer; created_at text;
            searchable integer; translatable integer NN; indexed integer NN""",
        "pk": ["id"],
        "indexes": {
            "idx_fields_collection_slug": (["collection_id", "slug"], True),
            "idx_fields_collection": (["collection_id"], False),
            "idx_fields_sort": (["collection_id", "sort_order"], False),
        },
        "foreign_keys": {
            "fields_collection_fk": (["collection_id"], "_emdash_collections", "CASCADE")
        },
    },
    "revisions": {
        "columns": """id text PK; collection text NN; entry_id text NN; data text NN;
            author_id text; created_at text""",
        "pk": ["id"],
        "indexes": {"idx_revisions_entry": (["collection", "entry_id"], False)},
    },
    "media": {
        "columns": """id text PK; filename text NN; mime_type text NN; size integer;
            width integer; height integer; alt text; caption text; storage_key text NN;
            content_hash text; created_at text; author_id text; status text NN; blurhash text;
            dominant_color text""",
        "pk": ["id"],
        "indexes": {
            f"idx_media_{name}": ([name], False)
            for name in (
                "content_hash",
                "status",
                "mime_type",
                "filename",
                "created_at",
                "storage_key",
            )
        },
    },
    "_emdash_media_usage_sources": {
        "columns": """source_key text PK; source_type text NN; collection_slug text;
            content_id text; source_variant text NN; locale text; translation_group text;
            content_slug text; content_title text; content_status text;
            content_scheduled_at text; content_deleted_at text; revision_id text;
            current_generation text NN; schema_version integer NN; indexed_at text NN;
            created_at text; updated_at text; source_updated_at text; source_version integer;
            source_fingerprint text; source_completeness text NN; last_attempted_at text;
            last_error_code text; collection_id text; identity_version integer""",
        "pk": ["source_key"],
        "indexes": {
            "idx__emdash_media_usage_sources_content": (
                ["source_type", "collection_slug", "content_id"],
                False,
            ),
            "idx__emdash_media_usage_sources_variant": (["source_type", "source_variant"], False),
            "idx__emdash_media_usage_sources_locale": (["collection_slug", "locale"], False),
            "idx__emdash_media_usage_sources_deleted": (["content_deleted_at"], False),
            "idx__emdash_media_usage_sources_translation_group": (
                ["collection_slug", "translation_group"],
                False,
            ),
            "idx__emdash_media_usage_sources_completeness": (
                ["source_type", "collection_slug", "source_completeness"],
                False,
            ),
            "idx__emdash_media_usage_sources_fingerprint": (["source_fingerprint"], False),
            "idx__emdash_media_usage_sources_identity": (
                ["source_type", "collection_id", "content_id", "source_variant"],
                False,
            ),
            "idx__emdash_media_usage_sources_collection_cursor": (
                ["source_type", "collection_id", "source_key"],
                False,
            ),
        },
    },
    "_emdash_media_usage": {
        "columns": """id text PK; source_key text NN; generation text NN; field_slug text NN;
            field_path text NN; occurrence_index integer NN; reference_type text NN;
            media_id text; provider text NN; provider_asset_id text NN; media_kind text;
            mime_type text; created_at text; cleanup_lease_token text""",
        "pk": ["id"],
        "indexes": {
            "idx__emdash_media_usage_unique_occurrence": (
                ["source_key", "generation", "field_path", "occurrence_index"],
                True,
            ),
            "idx__emdash_media_usage_provider_asset": (["provider", "provider_asset_id"], False),
            "idx__emdash_media_usage_source_generation": (["source_key", "generation"], False),
            "idx__emdash_media_usage_media_source_generation": (
                ["media_id", "source_key", "generation"],
                False,
            ),
            "idx__emdash_media_usage_cleanup_scan": (
                ["created_at", "id", "source_key", "generation"],
                False,
            ),
            "idx__emdash_media_usage_source_cursor": (["source_key", "id"], False),
        },
    },
    "_emdash_media_usage_index_status": {
        "columns": """adapter_id text NN; scope_type text NN; scope_key text NN; status text NN;
            schema_version integer NN; started_at text; completed_at text; cursor text;
            indexed_source_count integer NN; failed_source_count integer NN;
            last_error_code text; updated_at text NN; collection_id text;
            change_epoch bigint NN; reconciliation_required integer NN;
            last_incremental_success_at text; capture_state text""",
        "pk": ["adapter_id", "scope_type", "scope_key"],
        "pk_name": "_emdash_media_usage_index_status_pk",
        "indexes": {
            "idx__emdash_media_usage_index_status_status": (["adapter_id", "status"], False),
            "idx__emdash_media_usage_status_collection": (
                ["adapter_id", "scope_type", "collection_id"],
                True,
            ),
            "idx__emdash_media_usage_status_reconciliation": (
                [
                    "adapter_id",
                    "scope_type",
                    "capture_state",
                    "reconciliation_required",
                    "collection_id",
                ],
                False,
            ),
        },
    },
    "_emdash_media_usage_activation": {
        "columns": """task_key text PK; state text NN; runtime_generation integer NN;
            collection_cursor text; drain_confirmed_at text; lease_token text;
            lease_expires_at text; attempt_count integer NN; last_attempted_at text;
            last_error_code text; activated_at text; created_at text NN; updated_at text NN;
            media_usage_maintenance_turn integer NN""",
        "pk": ["task_key"],
        "indexes": {},
    },
    "_emdash_media_usage_work": {
        "columns": """collection_id text NN; collection_slug text NN; content_id text NN;
            change_epoch bigint NN; work_version bigint NN; state text NN;
            attempt_count integer NN; next_attempt_at text NN; lease_token text;
            lease_expires_at text; last_attempted_at text; last_error_code text;
            created_at text NN; updated_at text NN""",
        "pk": ["collection_id", "content_id"],
        "pk_name": "_emdash_media_usage_work_pk",
        "indexes": {
            "idx__emdash_media_usage_work_due": (
                ["state", "next_attempt_at", "updated_at", "collection_id", "content_id"],
                False,
            ),
            "idx__emdash_media_usage_work_lease": (
                ["state", "lease_expires_at", "collection_id", "content_id"],
                False,
            ),
            "idx__emdash_media_usage_work_operator": (
                ["collection_id", "state", "updated_at", "content_id"],
                False,
            ),
        },
    },
    "_emdash_media_usage_collection_deletions": {
        "columns": """collection_id text NN; collection_slug text NN; force_delete integer NN;
            state text NN; phase text NN; work_cursor text; source_key text;
            occurrence_cursor text; attempt_count integer NN; next_attempt_at text NN;
            lease_token text; lease_expires_at text; last_error_code text;
            created_at text NN; updated_at text NN""",
        "pk": ["collection_id"],
        "unique": {
            "_emdash_media_usage_collection_deletions_collection_slug_key": ["collection_slug"]
        },
        "indexes": {
            "idx__emdash_media_usage_collection_deletions_due": (
                ["state", "next_attempt_at", "updated_at", "collection_id"],
                False,
            ),
            "idx__emdash_media_usage_collection_deletions_lease": (
                ["state", "lease_expires_at", "updated_at", "collection_id"],
                False,
            ),
            "idx__emdash_media_usage_collection_deletions_operator": (
                ["state", "updated_at", "collection_id"],
                False,
            ),
        },
    },
    "_emdash_media_usage_reconciliations": {
        "columns": """collection_id text NN; collection_slug text NN; run_token text NN;
            target_epoch bigint; field_fingerprint text; state text NN; phase text NN;
            scan_cursor text; scan_upper_id text; source_cursor text; source_upper_key text;
            attempt_count integer NN; next_attempt_at text NN; lease_token text;
            lease_expires_at text; last_error_code text; created_at text NN;
            updated_at text NN""",
        "pk": ["collection_id"],
        "indexes": {
            "idx__emdash_media_usage_reconciliations_due": (
                ["state", "next_attempt_at", "updated_at", "collection_id"],
                False,
            ),
            "idx__emdash_media_usage_reconciliations_lease": (
                ["state", "lease_expires_at", "updated_at", "collection_id"],
                False,
            ),
            "idx__emdash_media_usage_reconciliations_failed": (
                ["state", "updated_at", "collection_id"],
                False,
            ),
        },
    },
    "_emdash_media_usage_generation_writes": {
        "columns": """source_key text NN; generation text NN; lease_token text PK;
            expires_at text NN; created_at text NN""",
        "pk": ["lease_token"],
        "unique": {
            "_emdash_media_usage_generation_writes_source_generation": ["source_key", "generation"]
        },
        "indexes": {
            "idx__emdash_media_usage_generation_writes_expiry": (
                ["expires_at", "lease_token"],
                False,
            ),
        },
    },
    "_emdash_media_usage_cleanup": {
        "columns": """task_key text PK; lease_token text; lease_expires_at text;
            next_eligible_at text NN; cursor_created_at text; cursor_id text;
            scan_before_at text; consecutive_failures integer NN; last_started_at text;
            last_completed_at text; last_candidate_count integer NN;
            last_deleted_orphans integer NN; last_deleted_stale integer NN;
            last_deleted_abandoned integer NN; last_deleted_write_leases integer NN;
            last_backlog_lower_bound integer NN; last_scan_has_more integer NN;
            last_duration_ms integer NN; last_error_code text; updated_at text NN""",
        "pk": ["task_key"],
        "indexes": {},
    },
    "_emdash_media_usage_cleanup_fence": {
        "columns": "task_key text PK; generation_floor text NN; updated_at text NN",
        "pk": ["task_key"],
        "indexes": {},
    },
}


def _expected_columns(spec: str, dialect: str) -> list[tuple[str, str, bool]]:
    columns = []
    for item in spec.split(";"):
        name, type_, *flags = item.split()
        nullable = not flags or (flags == ["PK"] and dialect == "sqlite")
        columns.append((name, type_, nullable))
    return columns


def _type_family(type_: sa.types.TypeEngine) -> str:
    return str(type_).split("(")[0].lower()


@pytest.fixture
def inspector(db: sa.Engine) -> sa.Inspector:
    return sa.inspect(db)


@pytest.mark.parametrize("table", sorted(EXPECTED))
def test_table_matches_the_facts_sheet(inspector: sa.Inspector, dialect: str, table: str) -> None:
    expected = EXPECTED[table]
    actual_columns = [
        (c["name"], _type_family(c["type"]), c["nullable"]) for c in inspector.get_columns(table)
    ]
    assert actual_columns == _expected_columns(expected["columns"], dialect)

    pk = inspector.get_pk_constraint(table)
    assert pk["constrained_columns"] == expected["pk"]
    if dialect == "postgresql":
        assert pk["name"] == expected.get("pk_name", f"{table}_pkey")

    uniques = inspector.get_unique_constraints(table)
    assert sorted(u["column_names"] for u in uniques) == sorted(expected.get("unique", {}).values())
    if dialect == "postgresql":
        assert {u["name"] for u in uniques} == set(expected.get("unique", {}))

    indexes = {
        i["name"]: (i["column_names"], bool(i["unique"]))
        for i in inspector.get_indexes(table)
        if not i.get("duplicates_constraint")
    }
    assert indexes == expected["indexes"]

    fks = {
        fk["name"]: (fk["constrained_columns"], fk["referred_table"], fk["options"].get("ondelete"))
        for fk in inspector.get_foreign_keys(table)
    }
    assert fks == expected.get("foreign_keys", {})


def test_seeded_singleton_rows(db: sa.Engine) -> None:
    with db.connect() as conn:
        activation = conn.execute(
            sa.text(
                "SELECT task_key, state, runtime_generation, attempt_count, "
                "media_usage_maintenance_turn, created_at FROM _emdash_media_usage_activation"
            )
        ).all()
        cleanup = conn.execute(
            sa.text("SELECT task_key, next_eligible_at FROM _emdash_media_usage_cleanup")
        ).all()
    assert [row[:5] for row in activation] == [("incremental_capture", "expanded", 1, 0, 2)]
    assert len(activation[0].created_at) == 24 and activation[0].created_at.endswith("Z")
    assert cleanup == [("projection_gc", "1970-01-01T00:00:00.000Z")]


def test_upgrade_twice_is_a_no_op(migrated_url: str, db: sa.Engine) -> None:
    before = sorted(sa.inspect(db).get_table_names())
    upgrade(migrated_url)
    upgrade(db)
    sa.inspect(db).clear_cache()
    assert sorted(sa.inspect(db).get_table_names()) == before
    assert current_revision(db) == head_revision()
    with db.connect() as conn:
        assert (
            conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_activation")).scalar()
            == 1
        )


def test_upgrade_creates_everything_on_an_empty_database(engine: sa.Engine) -> None:
    upgrade(engine)
    assert set(EXPECTED) <= set(sa.inspect(engine).get_table_names())


def test_downgrade_and_upgrade_round_trip(db: sa.Engine) -> None:
    downgrade(db)
    assert current_revision(db) is None
    assert not set(EXPECTED) & set(sa.inspect(db).get_table_names())
    upgrade(db)
    assert current_revision(db) == head_revision()


@pytest.mark.parametrize(
    ("statement", "reason"),
    [
        (
            "INSERT INTO _emdash_media_usage_work (collection_id, collection_slug, content_id, "
            "change_epoch, next_attempt_at) VALUES ('c', 'posts', 'e1', 1, 'x')",
            "work row",
        ),
        (
            "INSERT INTO _emdash_media_usage_collection_deletions (collection_id, collection_slug, "
            "force_delete, next_attempt_at) VALUES ('c', 'posts', 0, 'x')",
            "tombstone",
        ),
        (
            "INSERT INTO _emdash_media_usage_reconciliations (collection_id, collection_slug, "
            "run_token, next_attempt_at) VALUES ('c', 'posts', 'r', 'x')",
            "reconciliation row",
        ),
        ("UPDATE _emdash_media_usage_activation SET state = 'active'", "activated"),
        (
            "INSERT INTO _emdash_media_usage_index_status (adapter_id, scope_type, scope_key, "
            "status, updated_at, capture_state) VALUES ('content-media', 'collection', 'posts', "
            "'never', 'x', 'active')",
            "capture is active",
        ),
    ],
)
def test_downgrade_refuses_while_media_usage_state_exists(
    db: sa.Engine, statement: str, reason: str
) -> None:
    with db.begin() as conn:
        conn.execute(sa.text(statement))
    with pytest.raises(DowngradeRefused, match=reason):
        downgrade(db)
    # Nothing changed: still at head with every table present.
    assert current_revision(db) == head_revision()
    assert set(EXPECTED) <= set(sa.inspect(db).get_table_names())


def test_downgrade_refuses_while_collections_are_registered(db: sa.Engine) -> None:
    from media_usage_worker.repository.registry.collections import CollectionRegistry

    CollectionRegistry(db).create_collection("posts", "Posts")
    with pytest.raises(DowngradeRefused, match="1 collection"):
        downgrade(db)
    assert current_revision(db) == head_revision()
    assert set(EXPECTED) <= set(sa.inspect(db).get_table_names())
