"""A forked child (a Celery pool process) starts with a fresh lease keeper."""

from __future__ import annotations

import os
import threading

from media_usage_worker.pipeline.lease_keeper import keeper


def test_a_child_forked_while_another_thread_holds_the_keeper_lock_can_still_hold_leases() -> None:
    taken, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with keeper._wake:
            taken.set()
            release.wait(timeout=10)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert taken.wait(timeout=10)
    pid = os.fork()
    if pid == 0:  # the child: the holding thread does not exist here, nor may its lock
        fresh = keeper._wake.acquire(timeout=2) and not keeper._held
        os._exit(0 if fresh else 1)
    release.set()
    holder.join(timeout=10)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
