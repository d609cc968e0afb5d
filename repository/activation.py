"""``repository.activation``: turning capture on and off by the fixed import path.

The code lives in ``media_usage_worker.repository.lifecycle.activation``.
"""

from media_usage_worker.domain.errors import ActivationError
from media_usage_worker.repository.lifecycle.activation import (
    activate,
    deactivate,
    finish_new_collection,
    install_for_new_collection,
    is_activation_active,
    prepare_new_collection,
)

__all__ = [
    "ActivationError",
    "activate",
    "deactivate",
    "finish_new_collection",
    "install_for_new_collection",
    "is_activation_active",
    "prepare_new_collection",
]
