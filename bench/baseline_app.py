"""The comparison point for drain throughput: plain Celery running the same per-item refresh,
with ``acks_late`` but no lease, no work table and no fencing."""

from __future__ import annotations

import os

import redis
from celery import Celery

from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.snapshots import ContentEntry
from media_usage_worker.pipeline.refresh import refresh_entry
from media_usage_worker.tasks.engines import get_engine

QUEUE = "bench_baseline"
app = Celery("bench_baseline", broker=os.environ.get("MEDIA_USAGE_BROKER_URL"))
# The same Celery settings as tasks.app (JSON, late acks, prefetch 1, task events for Flower):
# only the lease, the work table and the fencing are missing.
app.conf.update(
    task_serializer="json", accept_content=["json"], task_acks_late=True,
    worker_prefetch_multiplier=1, task_ignore_result=True, task_default_queue=QUEUE,
    worker_send_task_events=True, task_send_sent_event=True,
)  # fmt: skip
_counter = {}


@app.task(name="bench.refresh")
def refresh(collection_id: str, collection_slug: str, content_id: str) -> None:
    code = refresh_entry(
        get_engine(), ContentEntry(collection_id, collection_slug, content_id), Limits()
    )
    if code is not None:
        raise RuntimeError(code)
    client = _counter.get("c") or _counter.setdefault(
        "c", redis.Redis.from_url(os.environ["MEDIA_USAGE_BROKER_URL"])
    )
    client.incr("bench:done")
