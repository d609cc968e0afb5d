"""Every name the fixed top-level modules offer stays importable from them.

Host code and deployments import these paths (``celery -A tasks``, ``from repository.collections
import FieldDefinition``, ...). The code behind them may move inside ``media_usage_worker``; the
names may not vanish. Each module is imported in a fresh interpreter, so one module's imports
cannot hide another's missing name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The public contract: module -> every name it must offer. A name is only ever added here.
FIXED_NAMES: dict[str, tuple[str, ...]] = {
    "tasks": ("app",),
    "tasks.app": (
        "app",
        "DEFAULT_BROKER_URL",
        "broker_folder",
        "broker_transport",
        "broker_url",
        "queue_name",
        "transport_options",
    ),
    "tasks.dispatch": (
        "after_write",
        "send",
        "release",
        "queued_messages",
        "ITEM_PRIORITY",
        "BATCH_PRIORITY",
    ),
    "tasks.work": ("tick", "process_work", "process_batch", "after_write"),
    "tasks.reconcile": ("reconcile_tick",),
    "beat_schedule": ("beat_schedule",),
    "repository.db": (
        "create_engine",
        "parse_database_url",
        "transaction",
        "read_transaction",
        "Bind",
        "InvalidDatabaseURL",
        "ACCEPTED_URLS",
        "POSTGRES_DRIVERS",
        "SQLITE_DRIVERS",
        "SQLITE_BUSY_TIMEOUT_SECONDS",
    ),
    "repository.migrate": (
        "upgrade",
        "downgrade",
        "current_revision",
        "head_revision",
        "check_revision",
        "schema_problem",
        "VERSION_TABLE",
        "MIGRATIONS_DIR",
        "ADVISORY_LOCK_KEY",
    ),
    "repository.work": (
        "MediaUsageWorkRepository",
        "WorkRecord",
        "OperatorWorkItem",
        "OperatorRetryResult",
        "Page",
    ),
    "repository.collections": (
        "CollectionRegistry",
        "FieldDefinition",
        "Collection",
        "CollectionExists",
        "CollectionNotFound",
        "FieldExists",
        "load_fields",
        "invalidate_coverage",
        "is_registered",
    ),
    "repository.activation": (
        "activate",
        "deactivate",
        "is_activation_active",
        "prepare_new_collection",
        "install_for_new_collection",
        "finish_new_collection",
        "ActivationError",
    ),
    "media_usage_worker.repository.activation": ("declare_source", "remove_declared_source"),
    # ``record_indexed_rules`` and ``rules_current`` moved to ``repository.rules_state``.
    "media_usage_worker.repository.rules": (
        "record_indexed_rules",
        "rules_current",
        "declare_reference_path",
        "add_media_url_prefix",
        "read_declared_rules",
    ),
    "media_usage_worker.repository.host_sources": ("list_sources", "SCOPES"),
    "media_usage_worker.domain.host_sources": ("HostSource", "SourceKind", "ColumnKind"),
    "media_usage_worker.api": (
        "MediaUsage",
        "RetireResult",
        "RestoreResult",
        "RetireRefusal",
        "UnusedPage",
        "UnusedItem",
    ),
    "media_usage_worker.tasks.binding": ("bind",),
}

_PROBE = """
import importlib, json, sys
module = importlib.import_module(sys.argv[1])
names = json.loads(sys.argv[2])
offered = getattr(module, "__all__", names)
print(json.dumps([n for n in names if not hasattr(module, n) or n not in offered]))
"""


@pytest.mark.parametrize("module", sorted(FIXED_NAMES))
def test_every_fixed_name_imports_from_a_fresh_interpreter(module: str) -> None:
    names = FIXED_NAMES[module]
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, module, json.dumps(names)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # A missing name, or one left out of ``__all__`` (``from module import *``), is listed.
    assert json.loads(done.stdout) == [], f"{module} lost names"


def test_names_that_moved_still_import_from_where_they_were() -> None:
    from media_usage_worker.cli.common import DEFAULT_DATABASE_URL as cli_default
    from media_usage_worker.domain import deletion, policy
    from media_usage_worker.tasks.app import late_duplicate_tick as moved
    from media_usage_worker.tasks.settings import DEFAULT_DATABASE_URL as task_default
    from media_usage_worker.tasks.ticks import late_duplicate_tick

    assert moved is late_duplicate_tick
    from media_usage_worker.repository import collections, field_registry, host_sources

    assert collections.collection_fields is field_registry.load_fields
    assert host_sources.all_sources is host_sources.list_sources
    assert cli_default == task_default == policy.DEFAULT_DATABASE_URL
    assert deletion.LEASE_SECONDS == deletion.DELETION_LEASE_SECONDS != policy.LEASE_SECONDS


def test_every_repository_module_imports_from_where_it_was_before_the_feature_split() -> None:
    """The data layer moved into one subpackage per feature; each module's old path is the very
    same module object, so names imported, bound or patched through either path agree."""
    import importlib

    from media_usage_worker import repository

    assert len(repository.MOVED) == 44
    assert repository.MOVED["usage"] == "media_usage_worker.repository.index.usage"
    for name, home in repository.MOVED.items():
        new = importlib.import_module(home)
        old = importlib.import_module(f"media_usage_worker.repository.{name}")
        assert old is new, name
        assert new.__spec__ is not None and new.__spec__.name == new.__name__, name
        assert getattr(repository, name) is new, name
    from media_usage_worker.repository.usage import usage_count as old_usage_count

    from media_usage_worker.repository import status, usage  # the form host code used most
    from media_usage_worker.repository.index.usage import usage_count

    assert old_usage_count is usage_count
    assert (
        status.overview
        is importlib.import_module("media_usage_worker.repository.reconciling.status").overview
    )
    assert usage.__name__ == "media_usage_worker.repository.index.usage"


def test_flows_that_moved_up_to_the_pipeline_import_from_their_old_modules() -> None:
    from media_usage_worker.pipeline import capture, registry
    from media_usage_worker.repository import activation, collections, rules, sample_content

    for name in ("activate", "deactivate", "capture_new_collections", "declare_source",
                 "remove_declared_source"):  # fmt: skip
        assert getattr(activation, name) is getattr(capture, name), name
    for name in ("declare_reference_path", "remove_reference_path", "add_media_url_prefix",
                 "remove_media_url_prefix"):  # fmt: skip
        assert getattr(rules, name) is getattr(registry, name), name
    assert collections.request_reindex is registry.request_reindex
    assert collections.request_source_reindex is registry.request_source_reindex
    assert sample_content.__name__ == "media_usage_worker.sample_content"

    with pytest.raises(AttributeError):
        _ = activation.no_such_flow
