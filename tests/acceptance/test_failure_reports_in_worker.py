"""Failed items are visible where operators look: the worker log of the documented command,
structured logs, and the task state monitors such as Flower filter by."""

from __future__ import annotations

import json
import threading

from celery.signals import task_failure

from media_usage_worker.domain.errors import ItemsFailed
from tests.processes import wait_for
from tests.support import PAST, broken_repeater_entry, get_work, set_work


def test_the_documented_worker_logs_a_retry_and_a_failure_also_as_json(db, processes) -> None:
    posts = broken_repeater_entry(db)
    processes.beat()
    text_log = processes.next_log("worker")
    worker = processes.documented_worker()
    wait_for(lambda: "will retry" in text_log.read_text(errors="replace"), timeout=90)
    (line,) = [x for x in text_log.read_text().splitlines() if "will retry" in x]
    assert "WARNING" in line and "posts/e1" in line, line
    assert "MEDIA_USAGE_PROCESSING_FAILED" in line and "FieldDiscoveryError" in line, line
    processes.kill(worker)

    # The last attempt, in a worker that writes JSON lines.
    set_work(db, posts.id, "e1", attempt_count=4, next_attempt_at=PAST)
    processes.env["MEDIA_USAGE_LOG_FORMAT"] = "json"
    json_log = processes.next_log("worker")
    processes.documented_worker()
    wait_for(lambda: get_work(db, posts.id, "e1")["state"] == "failed", timeout=90)
    wait_for(lambda: "failed for good" in json_log.read_text(errors="replace"), timeout=30)
    entries = [json.loads(x) for x in json_log.read_text().splitlines() if x.startswith("{")]
    assert entries, json_log.read_text()[:2000]
    (failure,) = [e for e in entries if e.get("event") == "media_usage.item_failed"]
    assert failure["level"] == "ERROR"
    assert (failure["collection"], failure["content_id"]) == ("posts", "e1")
    assert failure["error_code"] == "MEDIA_USAGE_PROCESSING_FAILED"
    assert failure["attempt"] == 5 and "FieldDiscoveryError" in failure["cause"]


def test_a_message_whose_item_failed_for_good_ends_as_a_task_failure(
    db, celery_worker, broker_url
) -> None:
    import redis

    from media_usage_worker.tasks.work import process_batch, process_work

    posts = broken_repeater_entry(db)
    set_work(db, posts.id, "e1", attempt_count=4)
    version = get_work(db, posts.id, "e1")["work_version"]
    failures: list[BaseException] = []
    seen = threading.Event()

    def on_failure(sender=None, exception=None, **_) -> None:
        failures.append(exception)
        seen.set()

    task_failure.connect(on_failure, weak=False)
    try:
        process_batch.apply_async(args=([[posts.id, "e1", version]],))
        assert seen.wait(60)
    finally:
        task_failure.disconnect(on_failure)
    (failure,) = failures[:1]
    assert len(failures) == 1
    assert isinstance(failure, ItemsFailed)
    assert failure.summary["failed"] == [[posts.id, "e1", "MEDIA_USAGE_PROCESSING_FAILED"]]
    assert failure.summary["outcomes"] == {"failed": 1}
    assert get_work(db, posts.id, "e1")["state"] == "failed"
    # Acknowledged, not redelivered: nothing of it waits in the queue, and a duplicate of the
    # message is an ordinary claim_lost success, not another failure.
    assert redis.Redis.from_url(broker_url).llen("media_usage") == 0
    assert process_work.apply(args=(posts.id, "e1", version)).get()["outcome"] == "claim_lost"

    # A message of one item that fails for good names the item and its code too.
    set_work(db, posts.id, "e1", state="retry", attempt_count=4, next_attempt_at=PAST)
    seen.clear()
    task_failure.connect(on_failure, weak=False)
    try:
        process_work.apply_async(args=(posts.id, "e1", version))
        assert seen.wait(60)
    finally:
        task_failure.disconnect(on_failure)
    single = failures[-1]
    assert isinstance(single, ItemsFailed)
    assert str(single).endswith(f": {posts.id}/e1 (MEDIA_USAGE_PROCESSING_FAILED)"), str(single)
    assert single.summary["failed"] == [[posts.id, "e1", "MEDIA_USAGE_PROCESSING_FAILED"]]
