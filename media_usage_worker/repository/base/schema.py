"""SQLAlchemy Core tables, column for column the emdash 0.34.0 shape (docs/design.md §1).

Names matter here: table, column, constraint and index names are emdash's, so a database this
project migrates can be opened by emdash and vice versa. The metadata deliberately has no naming
convention: unnamed inline keys get the engine's own names (``<table>_pkey``,
``<table>_<column>_key``), which is what emdash's Kysely DDL produced.

``ec_<slug>`` content tables are not here: they are built per collection by
``repository.content_tables``.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import BigInteger, Column, Index, Integer, Table, Text, UniqueConstraint

from media_usage_worker.repository.base.clock import db_default_now, db_legacy_now
from media_usage_worker.repository.base.stored_text import StoredText

metadata = sa.MetaData()

ADAPTER_ID = "content-media"
SCOPE_TYPE = "collection"
CAPTURE_TASK_KEY = "incremental_capture"


def _legacy_now(name: str, nullable: bool = True) -> Column[str]:
    return Column(name, Text, nullable=nullable, server_default=db_legacy_now())


def _sortable_now(name: str) -> Column[str]:
    return Column(name, Text, nullable=False, server_default=db_default_now())


def _zero(name: str) -> Column[int]:
    return Column(name, Integer, nullable=False, server_default=sa.text("0"))


# --- core content registry (design §1) ------------------------------------------------------

collections = Table(
    "_emdash_collections",
    metadata,
    Column("id", Text, primary_key=True, nullable=True),
    Column("slug", Text, nullable=False, unique=True),
    Column("label", Text, nullable=False),
    Column("label_singular", Text),
    Column("description", Text),
    Column("icon", Text),
    Column("supports", Text),
    Column("source", Text),
    _legacy_now("created_at"),
    _legacy_now("updated_at"),
    Column("search_config", Text),
    _zero("has_seo"),
    Column("url_pattern", Text),
    Column("comments_enabled", Integer, server_default=sa.text("0")),
    Column("comments_moderation", Text, server_default=sa.text("'first_time'")),
    Column("comments_closed_after_days", Integer, server_default=sa.text("90")),
    Column("comments_auto_approve_users", Integer, server_default=sa.text("1")),
    _zero("hidden"),
    Column("sort_order", Integer),
    Column("admin_config", Text),
    Column("title_field", Text),
    Column("date_field", Text),
    Column("routable", Integer, nullable=False, server_default=sa.text("1")),
)

fields = Table(
    "_emdash_fields",
    metadata,
    Column("id", Text, primary_key=True, nullable=True),
    Column("collection_id", Text, nullable=False),
    Column("slug", Text, nullable=False),
    Column("label", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("column_type", Text, nullable=False),
    Column("required", Integer, server_default=sa.text("0")),
    Column("unique", Integer, server_default=sa.text("0")),
    Column("default_value", Text),
    Column("validation", Text),
    Column("widget", Text),
    Column("options", Text),
    Column("sort_order", Integer, server_default=sa.text("0")),
    _legacy_now("created_at"),
    Column("searchable", Integer, server_default=sa.text("0")),
    Column("translatable", Integer, nullable=False, server_default=sa.text("1")),
    _zero("indexed"),
    sa.ForeignKeyConstraint(
        ["collection_id"],
        ["_emdash_collections.id"],
        name="fields_collection_fk",
        ondelete="CASCADE",
    ),
    Index("idx_fields_collection_slug", "collection_id", "slug", unique=True),
    Index("idx_fields_collection", "collection_id"),
    Index("idx_fields_sort", "collection_id", "sort_order"),
)

revisions = Table(
    "revisions",
    metadata,
    Column("id", Text, primary_key=True, nullable=True),
    Column("collection", Text, nullable=False),
    Column("entry_id", Text, nullable=False),
    Column("data", Text, nullable=False),
    Column("author_id", Text),
    _legacy_now("created_at"),
    Index("idx_revisions_entry", "collection", "entry_id"),
)

media = Table(
    "media",
    metadata,
    Column("id", Text, primary_key=True, nullable=True),
    Column("filename", Text, nullable=False),
    Column("mime_type", Text, nullable=False),
    Column("size", Integer),
    Column("width", Integer),
    Column("height", Integer),
    Column("alt", Text),
    Column("caption", Text),
    Column("storage_key", Text, nullable=False),
    Column("content_hash", Text),
    _legacy_now("created_at"),
    Column("author_id", Text),
    Column("status", Text, nullable=False, server_default=sa.text("'ready'")),
    Column("blurhash", Text),
    Column("dominant_color", Text),
    Index("idx_media_content_hash", "content_hash"),
    Index("idx_media_status", "status"),
    Index("idx_media_mime_type", "mime_type"),
    Index("idx_media_filename", "filename"),
    Index("idx_media_created_at", "created_at"),
    Index("idx_media_storage_key", "storage_key"),
)

CORE_TABLES = (collections, fields, revisions, media)

# --- media usage (design §1) ----------------------------------------------------------------

sources = Table(
    "_emdash_media_usage_sources",
    metadata,
    Column("source_key", Text, primary_key=True, nullable=True),
    Column("source_type", Text, nullable=False),
    Column("collection_slug", Text),
    Column("content_id", Text),
    Column("source_variant", Text, nullable=False),
    Column("locale", Text),
    Column("translation_group", Text),
    Column("content_slug", Text),
    Column("content_title", Text),
    Column("content_status", Text),
    Column("content_scheduled_at", Text),
    Column("content_deleted_at", Text),
    Column("revision_id", Text),
    Column("current_generation", Text, nullable=False),
    Column("schema_version", Integer, nullable=False, server_default=sa.text("1")),
    _legacy_now("indexed_at", nullable=False),
    _legacy_now("created_at"),
    _legacy_now("updated_at"),
    Column("source_updated_at", Text),
    Column("source_version", Integer),
    Column("source_fingerprint", Text),
    Column("source_completeness", Text, nullable=False, server_default=sa.text("'unknown'")),
    Column("last_attempted_at", Text),
    Column("last_error_code", Text),
    Column("collection_id", Text),
    Column("identity_version", Integer),
    Index(
        "idx__emdash_media_usage_sources_content", "source_type", "collection_slug", "content_id"
    ),
    Index("idx__emdash_media_usage_sources_variant", "source_type", "source_variant"),
    Index("idx__emdash_media_usage_sources_locale", "collection_slug", "locale"),
    Index("idx__emdash_media_usage_sources_deleted", "content_deleted_at"),
    Index(
        "idx__emdash_media_usage_sources_translation_group", "collection_slug", "translation_group"
    ),
    Index(
        "idx__emdash_media_usage_sources_completeness",
        "source_type",
        "collection_slug",
        "source_completeness",
    ),
    Index("idx__emdash_media_usage_sources_fingerprint", "source_fingerprint"),
    Index(
        "idx__emdash_media_usage_sources_identity",
        "source_type",
        "collection_id",
        "content_id",
        "source_variant",
    ),
    Index(
        "idx__emdash_media_usage_sources_collection_cursor",
        "source_type",
        "collection_id",
        "source_key",
    ),
)

occurrences = Table(
    "_emdash_media_usage",
    metadata,
    Column("id", Text, primary_key=True, nullable=True),
    Column("source_key", Text, nullable=False),
    Column("generation", Text, nullable=False),
    Column("field_slug", Text, nullable=False),
    Column("field_path", Text, nullable=False),
    _zero("occurrence_index"),
    Column("reference_type", Text, nullable=False),
    Column("media_id", Text),
    Column("provider", Text, nullable=False, server_default=sa.text("'local'")),
    Column("provider_asset_id", Text, nullable=False),
    Column("media_kind", Text),
    Column("mime_type", Text),
    _legacy_now("created_at"),
    Column("cleanup_lease_token", Text),
    Index(
        "idx__emdash_media_usage_unique_occurrence",
        "source_key",
        "generation",
        "field_path",
        "occurrence_index",
        unique=True,
    ),
    Index("idx__emdash_media_usage_provider_asset", "provider", "provider_asset_id"),
    Index("idx__emdash_media_usage_source_generation", "source_key", "generation"),
    Index(
        "idx__emdash_media_usage_media_source_generation", "media_id", "source_key", "generation"
    ),
    Index("idx__emdash_media_usage_cleanup_scan", "created_at", "id", "source_key", "generation"),
    Index("idx__emdash_media_usage_source_cursor", "source_key", "id"),
)

index_status = Table(
    "_emdash_media_usage_index_status",
    metadata,
    Column("adapter_id", Text, nullable=False),
    Column("scope_type", Text, nullable=False),
    Column("scope_key", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("schema_version", Integer, nullable=False, server_default=sa.text("1")),
    Column("started_at", Text),
    Column("completed_at", Text),
    Column("cursor", Text),
    _zero("indexed_source_count"),
    _zero("failed_source_count"),
    Column("last_error_code", Text),
    _legacy_now("updated_at", nullable=False),
    Column("collection_id", Text),
    Column("change_epoch", BigInteger, nullable=False, server_default=sa.text("0")),
    _zero("reconciliation_required"),
    Column("last_incremental_success_at", Text),
    Column("capture_state", Text),
    sa.PrimaryKeyConstraint(
        "adapter_id", "scope_type", "scope_key", name="_emdash_media_usage_index_status_pk"
    ),
    Index("idx__emdash_media_usage_index_status_status", "adapter_id", "status"),
    Index(
        "idx__emdash_media_usage_status_collection",
        "adapter_id",
        "scope_type",
        "collection_id",
        unique=True,
    ),
    Index(
        "idx__emdash_media_usage_status_reconciliation",
        "adapter_id",
        "scope_type",
        "capture_state",
        "reconciliation_required",
        "collection_id",
    ),
)

activation = Table(
    "_emdash_media_usage_activation",
    metadata,
    Column("task_key", Text, primary_key=True, nullable=True),
    Column("state", Text, nullable=False, server_default=sa.text("'expanded'")),
    Column("runtime_generation", Integer, nullable=False, server_default=sa.text("1")),
    Column("collection_cursor", Text),
    Column("drain_confirmed_at", Text),
    Column("lease_token", Text),
    Column("lease_expires_at", Text),
    _zero("attempt_count"),
    Column("last_attempted_at", Text),
    Column("last_error_code", Text),
    Column("activated_at", Text),
    _sortable_now("created_at"),
    _sortable_now("updated_at"),
    Column("media_usage_maintenance_turn", Integer, nullable=False, server_default=sa.text("2")),
)

work = Table(
    "_emdash_media_usage_work",
    metadata,
    Column("collection_id", Text, nullable=False),
    Column("collection_slug", Text, nullable=False),
    # Ids as the host stored them, even if not UTF-8 (repository.stored_text).
    Column("content_id", StoredText, nullable=False),
    Column("change_epoch", BigInteger, nullable=False),
    Column("work_version", BigInteger, nullable=False, server_default=sa.text("1")),
    Column("state", Text, nullable=False, server_default=sa.text("'pending'")),
    _zero("attempt_count"),
    Column("next_attempt_at", Text, nullable=False),
    Column("lease_token", Text),
    Column("lease_expires_at", Text),
    Column("last_attempted_at", Text),
    Column("last_error_code", Text),
    _sortable_now("created_at"),
    _sortable_now("updated_at"),
    sa.PrimaryKeyConstraint("collection_id", "content_id", name="_emdash_media_usage_work_pk"),
    Index(
        "idx__emdash_media_usage_work_due",
        "state",
        "next_attempt_at",
        "updated_at",
        "collection_id",
        "content_id",
    ),
    Index(
        "idx__emdash_media_usage_work_lease",
        "state",
        "lease_expires_at",
        "collection_id",
        "content_id",
    ),
    Index(
        "idx__emdash_media_usage_work_operator",
        "collection_id",
        "state",
        "updated_at",
        "content_id",
    ),
)

collection_deletions = Table(
    "_emdash_media_usage_collection_deletions",
    metadata,
    Column("collection_id", Text, primary_key=True, nullable=False),
    Column("collection_slug", Text, nullable=False, unique=True),
    Column("force_delete", Integer, nullable=False),
    Column("state", Text, nullable=False, server_default=sa.text("'pending'")),
    Column("phase", Text, nullable=False, server_default=sa.text("'fence'")),
    Column("work_cursor", Text),
    Column("source_key", Text),
    Column("occurrence_cursor", Text),
    _zero("attempt_count"),
    Column("next_attempt_at", Text, nullable=False),
    Column("lease_token", Text),
    Column("lease_expires_at", Text),
    Column("last_error_code", Text),
    _sortable_now("created_at"),
    _sortable_now("updated_at"),
    Index(
        "idx__emdash_media_usage_collection_deletions_due",
        "state",
        "next_attempt_at",
        "updated_at",
        "collection_id",
    ),
    Index(
        "idx__emdash_media_usage_collection_deletions_lease",
        "state",
        "lease_expires_at",
        "updated_at",
        "collection_id",
    ),
    Index(
        "idx__emdash_media_usage_collection_deletions_operator",
        "state",
        "updated_at",
        "collection_id",
    ),
)

reconciliations = Table(
    "_emdash_media_usage_reconciliations",
    metadata,
    Column("collection_id", Text, primary_key=True, nullable=False),
    Column("collection_slug", Text, nullable=False),
    Column("run_token", Text, nullable=False),
    Column("target_epoch", BigInteger),
    Column("field_fingerprint", Text),
    Column("state", Text, nullable=False, server_default=sa.text("'pending'")),
    Column("phase", Text, nullable=False, server_default=sa.text("'scan'")),
    Column("scan_cursor", StoredText),
    Column("scan_upper_id", StoredText),
    Column("source_cursor", Text),
    Column("source_upper_key", Text),
    _zero("attempt_count"),
    Column("next_attempt_at", Text, nullable=False),
    Column("lease_token", Text),
    Column("lease_expires_at", Text),
    Column("last_error_code", Text),
    _sortable_now("created_at"),
    _sortable_now("updated_at"),
    Index(
        "idx__emdash_media_usage_reconciliations_due",
        "state",
        "next_attempt_at",
        "updated_at",
        "collection_id",
    ),
    Index(
        "idx__emdash_media_usage_reconciliations_lease",
        "state",
        "lease_expires_at",
        "updated_at",
        "collection_id",
    ),
    Index("idx__emdash_media_usage_reconciliations_failed", "state", "updated_at", "collection_id"),
)

generation_writes = Table(
    "_emdash_media_usage_generation_writes",
    metadata,
    Column("source_key", Text, nullable=False),
    Column("generation", Text, nullable=False),
    Column("lease_token", Text, primary_key=True, nullable=True),
    Column("expires_at", Text, nullable=False),
    _legacy_now("created_at", nullable=False),
    UniqueConstraint(
        "source_key", "generation", name="_emdash_media_usage_generation_writes_source_generation"
    ),
    Index("idx__emdash_media_usage_generation_writes_expiry", "expires_at", "lease_token"),
)

cleanup = Table(
    "_emdash_media_usage_cleanup",
    metadata,
    Column("task_key", Text, primary_key=True, nullable=True),
    Column("lease_token", Text),
    Column("lease_expires_at", Text),
    Column("next_eligible_at", Text, nullable=False),
    Column("cursor_created_at", Text),
    Column("cursor_id", Text),
    Column("scan_before_at", Text),
    _zero("consecutive_failures"),
    Column("last_started_at", Text),
    Column("last_completed_at", Text),
    _zero("last_candidate_count"),
    _zero("last_deleted_orphans"),
    _zero("last_deleted_stale"),
    _zero("last_deleted_abandoned"),
    _zero("last_deleted_write_leases"),
    _zero("last_backlog_lower_bound"),
    _zero("last_scan_has_more"),
    _zero("last_duration_ms"),
    Column("last_error_code", Text),
    _legacy_now("updated_at", nullable=False),
)

cleanup_fence = Table(
    "_emdash_media_usage_cleanup_fence",
    metadata,
    Column("task_key", Text, primary_key=True, nullable=True),
    Column("generation_floor", Text, nullable=False),
    _legacy_now("updated_at", nullable=False),
)

MEDIA_USAGE_TABLES = (
    sources,
    occurrences,
    index_status,
    activation,
    work,
    collection_deletions,
    reconciliations,
    generation_writes,
    cleanup,
    cleanup_fence,
)

# This project's own (not emdash's): which extraction rules each collection's index was
# computed under (docs/design.md §5, "Rules"). ``rules_revision`` counts changes to the
# collection's declared rules; the ``indexed_`` pair is written with ``complete`` by the run
# that indexed it. ``complete`` holds only while they match the running rules.
rules_state = Table(
    "_media_usage_worker_rules_state",
    metadata,
    Column("collection_id", Text, primary_key=True),
    Column("rules_revision", BigInteger, nullable=False, server_default=sa.text("0")),
    Column("indexed_extraction_version", Integer),
    Column("indexed_rules_revision", BigInteger),
    _sortable_now("updated_at"),
    # The fingerprint of the fields the index was computed with (``repository.field_registry``).
    Column("indexed_fields", Text),
    # When coverage last became ``complete`` (the status row forgets it once it leaves it):
    # what an operator is told while it is not.
    Column("last_complete_at", Text),
)

# This project's own: the site's declared reference paths (docs/operations.md, "Extraction
# rules"), one row per collection and path; ``field_slug`` is the path's first step.
reference_paths = Table(
    "_media_usage_worker_reference_paths",
    metadata,
    Column("collection_id", Text, primary_key=True),
    Column("path", Text, primary_key=True),
    Column("field_slug", Text, nullable=False),
    _sortable_now("created_at"),
)

# This project's own: the URL prefixes under which the site serves media files (a URL under
# one names the media item of that ``storage_key``). They are rules of every collection.
media_url_prefixes = Table(
    "_media_usage_worker_media_url_prefixes",
    metadata,
    Column("prefix", Text, primary_key=True),
    _sortable_now("created_at"),
)

# This project's own: the sources of media references beyond content collections
# (docs/operations.md, "Sources"): the built-in ones once their tables exist, and the host
# tables an operator declared. ``columns`` is a JSON list of ``[column, kind]`` pairs.
host_sources = Table(
    "_media_usage_worker_sources",
    metadata,
    Column("collection_id", Text, primary_key=True),
    Column("scope_key", Text, nullable=False, unique=True),
    Column("kind", Text, nullable=False),
    Column("table_name", Text, nullable=False, unique=True),
    Column("key_column", Text, nullable=False),
    Column("columns", Text, nullable=False),
    _sortable_now("created_at"),
)

# --- emdash's tables of media references outside content (created where a database lacks
# them, emdash-shaped, so a site without emdash has them too) ---------------------------------

options = Table(
    "options",
    metadata,
    Column("name", Text, primary_key=True, nullable=True),
    Column("value", Text, nullable=False),
)

users = Table(
    "users",
    metadata,
    Column("id", Text, primary_key=True, nullable=True),
    Column("email", Text, nullable=False, unique=True),
    Column("name", Text),
    # emdash's avatar: a media file URL. ``avatar_id`` (a media id) is this project's older
    # shape; the user source reads whichever of the two a table has.
    Column("avatar_url", Text),
    Column("avatar_id", Text),
    Column("role", Integer, nullable=False, server_default=sa.text("10")),
    _legacy_now("created_at"),
    _legacy_now("updated_at"),
)

bylines = Table(
    "_emdash_bylines",
    metadata,
    Column("id", Text, primary_key=True, nullable=True),
    Column("slug", Text, nullable=False),
    Column("display_name", Text, nullable=False),
    Column("bio", Text),
    Column("avatar_media_id", Text),
    Column("website_url", Text),
    Column("user_id", Text),
    _zero("is_guest"),
    _legacy_now("created_at"),
    _legacy_now("updated_at"),
    # A byline per locale, its translations grouped, as emdash keeps them.
    Column("locale", Text, nullable=False, server_default=sa.text("'en'")),
    Column("translation_group", Text),
    sa.ForeignKeyConstraint(["avatar_media_id"], ["media.id"], ondelete="SET NULL"),
    sa.UniqueConstraint("slug", "locale", name="_emdash_bylines_slug_locale_unique"),
    Index("idx_bylines_slug", "slug"),
    Index("idx__emdash_bylines_locale", "locale"),
    Index("idx__emdash_bylines_translation_group", "translation_group"),
)

HOST_REFERENCE_TABLES = (options, users, bylines)

# --- clean-up (this project's own; docs/operations.md, "Cleaning up unused media") -----------

# A retired media item, kept whole: its ``media`` row as it was, and when, why and by whom it
# left the library. ``restore`` puts the row back exactly.
quarantine = Table(
    "_media_usage_worker_quarantine",
    metadata,
    *(Column(c.name, c.type, nullable=c.nullable) for c in media.columns),
    Column("retired_at", Text, nullable=False),
    Column("retired_by", Text, nullable=False),
    Column("reason", Text, nullable=False),
    sa.PrimaryKeyConstraint("id", name="_media_usage_worker_quarantine_pk"),
    Index("idx__media_usage_worker_quarantine_retired", "retired_at", "id"),
    # A URL use resolves a storage key to a retired item too, and a purge asks whether any
    # other row names a key.
    Index("idx__media_usage_worker_quarantine_storage_key", "storage_key"),
)

# Who retired, restored or purged what, and when: one row per action.
audit = Table(
    "_media_usage_worker_audit",
    metadata,
    Column("id", Text, primary_key=True),
    Column("at", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("media_ids", Text, nullable=False),  # JSON list
    Column("detail", Text),
    Index("idx__media_usage_worker_audit_at", "at", "id"),
)

# Purged items' files not yet handed to the host: a purge writes a row here in the transaction
# that deletes the item from the quarantine, and a delivery deletes it once the file is gone
# (or the host's purge task accepted it), so a crash between the two loses nothing.
purges = Table(
    "_media_usage_worker_purges",
    metadata,
    Column("media_id", Text, primary_key=True),
    Column("storage_key", Text, nullable=False),
    Column("purged_at", Text, nullable=False),
    _zero("attempt_count"),
    Column("last_error", Text),
    # Set when the key stopped being tried (too many failures, or never deliverable).
    Column("parked_at", Text),
)

CLEANUP_TABLES = (quarantine, audit, purges)

# What the dispatch tick saw, one row a sample (at most one every few seconds, an hour kept):
# the writes captured so far (the sum of every scope's change epoch) and the writes queued
# (work rows that are not a running reconciliation's own). ``status`` compares the last
# minute's samples to say whether the workers keep up with the site (docs/design.md §5).
pace_samples = Table(
    "_media_usage_worker_pace",
    metadata,
    Column("sampled_at", Text, primary_key=True),
    Column("writes", BigInteger, nullable=False),
    Column("queued", BigInteger, nullable=False),
)

# This project's own: the key ranges a reconciliation's scan hands to the workers instead of a
# work row per entry (docs/design.md §6, "Ranges"). A range is the collection's content ids in
# ``(after_key, last_key]``; ``after_key`` moves on as the holder commits each chunk, and the
# row goes when the range is done. It is leased like a work item; ``dispatched_at`` says when
# its message was last sent and ``dispatch_count`` how often, so a lost or starved message is
# sent again (ahead of backfill work) and a live one is not doubled.
backfill_ranges = Table(
    "_media_usage_worker_backfill_ranges",
    metadata,
    Column("range_id", Text, primary_key=True),
    Column("collection_id", Text, nullable=False),
    Column("collection_slug", Text, nullable=False),
    Column("run_token", Text, nullable=False),
    Column("change_epoch", BigInteger, nullable=False),
    Column("after_key", StoredText),
    Column("last_key", StoredText, nullable=False),
    Column("state", Text, nullable=False, server_default=sa.text("'pending'")),
    _zero("claim_count"),
    Column("lease_token", Text),
    Column("lease_expires_at", Text),
    Column("dispatched_at", Text),
    _zero("dispatch_count"),
    _sortable_now("created_at"),
    _sortable_now("updated_at"),
    Index("idx__media_usage_worker_backfill_ranges_collection", "collection_id", "last_key"),
    Index("idx__media_usage_worker_backfill_ranges_dispatch", "dispatched_at", "range_id"),
)
