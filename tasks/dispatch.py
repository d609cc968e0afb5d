"""``tasks.dispatch.after_write`` (SPEC §7), for hosts that import this project.

Hosts that would rather not import it send ``media_usage.after_write`` by name (see
``docs/operations.md``, "Beside an existing Celery app").
"""

from media_usage_worker.tasks.dispatch import after_write

__all__ = ["after_write"]
