"""``repository.collections``: the collection registry by its fixed import path.

The code lives in ``media_usage_worker.repository.registry.collections``; every public name
this module has ever offered stays importable from here, so host code written against it keeps
working.
"""

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import CollectionExists, CollectionNotFound, FieldExists
from media_usage_worker.repository.registry.collections import (
    Collection,
    CollectionRegistry,
    invalidate_coverage,
    is_registered,
    load_fields,
)

__all__ = [
    "Collection",
    "CollectionExists",
    "CollectionNotFound",
    "CollectionRegistry",
    "FieldDefinition",
    "FieldExists",
    "invalidate_coverage",
    "is_registered",
    "load_fields",
]
