"""``repository.activation``: turning capture on and off by the fixed import path.

The statements live in ``media_usage_worker.repository.lifecycle.activation``; the flows
(activate, deactivate) in ``media_usage_worker.pipeline.capture``.
"""

from media_usage_worker.domain.errors import ActivationError
from media_usage_worker.pipeline.capture import activate, deactivate
from media_usage_worker.repository.lifecycle.activation import (
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
