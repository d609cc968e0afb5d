"""Binding this project's tasks, routes and beat entries onto a host's own Celery app.

For hosts that run one worker and one beat for everything: after the host has configured its
app, ``bind(app)`` gives it the ``media_usage.*`` tasks (the same functions, with the same
per-task options), routes them to this project's queue, and adds the two beat entries. The host
keeps its own tasks, routes and schedule. Work messages a bound tick sends go through the host
app's broker (``dispatch.sending_app``). See ``docs/operations.md``, "Beside an existing Celery
app".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery import Celery

from media_usage_worker.domain.errors import BindingConflict
from media_usage_worker.tasks import deletion, reconciliation, work  # noqa: F401  (fills TASKS)
from media_usage_worker.tasks.app import TASKS, task_options
from media_usage_worker.tasks.names import PREFIX
from media_usage_worker.tasks.schedule import beat_schedule
from media_usage_worker.tasks.settings import check_all, queue_name


def bind(host: Celery) -> list[str]:
    """Register every ``media_usage.*`` task on ``host``, route them to the ``media_usage``
    queue (``MEDIA_USAGE_QUEUE``) ahead of the host's own routes, and add this project's beat
    entries to the host's schedule. Returns the task names bound.

    Call it once the host's configuration is loaded (after ``config_from_object``); calling it
    again changes nothing. Raises, binding nothing, ``InvalidSetting`` when a ``MEDIA_USAGE_*``
    setting is bad and ``BindingConflict`` when the host already has another task or beat entry
    under one of these names.
    """
    check_all()
    _refuse_conflicts(host)
    options = task_options()
    for spec in TASKS:
        if spec.name not in host.tasks:
            host.task(name=spec.name, bind=spec.bind, **options)(spec.run)
    route = {f"{PREFIX}*": {"queue": queue_name()}}
    routes = _as_list(host.conf.task_routes)
    if route not in routes:
        host.conf.task_routes = [route, *routes]
    host.conf.beat_schedule = {**(host.conf.beat_schedule or {}), **beat_schedule}
    return [spec.name for spec in TASKS]


def _refuse_conflicts(host: Celery) -> None:
    for spec in TASKS:
        existing = host.tasks.get(spec.name)
        if existing is not None and getattr(type(existing), "__wrapped__", None) is not spec.run:
            raise BindingConflict(f"The host app already has a task named {spec.name!r}.")
    hosted: Mapping[str, Any] = host.conf.beat_schedule or {}
    for key, entry in beat_schedule.items():
        if key in hosted and hosted[key] != entry:
            raise BindingConflict(f"The host app's beat schedule already has an entry {key!r}.")


def _as_list(routes: object) -> list[Any]:
    """Celery takes one router, a mapping, or a sequence of them; this is always the sequence."""
    if routes is None:
        return []
    if isinstance(routes, Sequence) and not isinstance(routes, str):
        return list(routes)
    return [routes]
