"""Integration fixtures: the repositories on a fresh migrated database of each dialect.

``db`` (the migrated engine) comes from tests/conftest.py. A fixture name has one meaning
across the suite: ``posts`` is always the sample collection with capture active; a module
that needs a collection in another state gives its fixture a name that says which.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from media_usage_worker.repository.registry.collections import Collection, CollectionRegistry
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository


@pytest.fixture
def repo(db: sa.Engine) -> MediaUsageWorkRepository:
    return MediaUsageWorkRepository(db)


@pytest.fixture
def posts(db: sa.Engine) -> Collection:
    """The ``posts`` collection (no fields) with incremental capture active.

    ``migrated_url`` clones it from a template (tests/conftest.py), so it is only looked up.
    """
    collection = CollectionRegistry(db).get("posts")
    assert collection is not None, "migrated_url did not clone the posts template"
    return collection
