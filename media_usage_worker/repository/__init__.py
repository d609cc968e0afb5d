"""Everything that speaks SQL, one subpackage per feature (docs/design.md, "Layout"):

- ``base``: engines and transactions, the tables, the database clock, ids, shared predicates;
- ``migration``: the project's migrations, adoption of a CMS's tables, downgrade guards;
- ``work_queue``: the work table's statements (claims, leases, retries, operator listing);
- ``index``: the usage rows, written by a refresh and read by every usage answer;
- ``registry``: collections, fields, sources beyond content, declared rules;
- ``lifecycle``: activation, capture triggers, collection deletion;
- ``reconciling``: coverage, reconciliation runs, repairs, the status overview;
- ``quarantine``: the clean-up (unused, retire, purge, sweep, audit).

Each module used to sit directly in this package; ``MOVED`` keeps every old import path
working (``media_usage_worker.repository.usage`` is the very module
``media_usage_worker.repository.index.usage``). This package never imports Celery.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

# Old module name -> the feature subpackage it lives in now.
_FEATURES: dict[str, str] = {
    **dict.fromkeys(
        ("clock", "db", "ids", "predicates", "row_sets", "schema", "statistics", "stored_text",
         "upsert"),
        "base",
    ),
    **dict.fromkeys(("adoption", "guards", "migrate"), "migration"),
    **dict.fromkeys(
        ("leases", "pace", "pending", "work", "work_operator", "work_processing", "work_rescan",
         "work_rows"),
        "work_queue",
    ),
    **dict.fromkeys(("projection", "source_writes", "usage"), "index"),
    **dict.fromkeys(
        ("built_in_sources", "collections", "content_tables", "field_registry", "host_sources",
         "rules", "rules_state"),
        "registry",
    ),
    **dict.fromkeys(("activation", "deletion", "triggers"), "lifecycle"),
    **dict.fromkeys(("coverage", "reconciliation", "repair", "status"), "reconciling"),
    **dict.fromkeys(
        ("audit_log", "cleanup", "fence", "purge", "row_mirror", "sweep"), "quarantine"
    ),
}  # fmt: skip

# Old module name -> the module it is now. The sample content writes as a host application
# would (collections, rules, sources): it is no data access of this project's, so it moved out.
MOVED: dict[str, str] = {
    **{name: f"{__name__}.{feature}.{name}" for name, feature in _FEATURES.items()},
    "sample_content": "media_usage_worker.sample_content",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path as the module at its new home: one module object under two names,
    so a name bound or patched through either path is the same."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def __init__(self) -> None:
        self._own_specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name.rpartition(".")[2]])
        self._own_specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import machinery stamped the old path's spec on the module; it keeps its own.
        module.__spec__ = self._own_specs.pop(module.__name__)


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
