"""The dispatch tick's pace samples and what ``status`` makes of them, on both dialects."""

from __future__ import annotations

import json

import sqlalchemy as sa

from media_usage_worker.repository.base.schema import pace_samples
from media_usage_worker.repository.work_queue import pace
from tests.integration.test_cleanup import cleanup_site, cli, sql


def test_samples_are_taken_at_most_every_few_seconds_and_read_as_a_pace(db) -> None:
    site = cleanup_site(db)
    assert pace.record_sample(site) is True
    assert pace.record_sample(site) is False  # a sample younger than SAMPLE_EVERY_SECONDS
    assert pace.read_pace(site) is None  # one sample is no window
    with site.begin() as conn:
        (taken,) = conn.execute(sa.select(pace_samples)).all()
        assert taken.queued == 0 and taken.writes >= 2  # the site's two entries so far
        # A sample from 30 s before, with 600 fewer writes and 200 fewer queued.
        conn.execute(
            pace_samples.insert().values(
                sampled_at=_seconds_before(taken.sampled_at, 30),
                writes=taken.writes - 600,
                queued=-200,
            )
        )
    found = pace.read_pace(site)
    assert found is not None and found.falling_behind
    assert (found.writes_per_second, found.queued) == (20.0, 0)
    shown = json.loads(cli(site, "status", "--json").output)["pace"]
    assert shown["falling_behind"] is True
    checked = cli(site, "status", "--check")
    assert checked.exit_code == 1 and "falling behind: 20.0 writes/s" in checked.output
    sql(site, "DELETE FROM _media_usage_worker_pace")
    assert json.loads(cli(site, "status", "--json").output)["pace"] is None


def _seconds_before(at: str, seconds: int) -> str:
    from datetime import datetime, timedelta

    from media_usage_worker.domain.timestamps import SORTABLE_FORMAT

    earlier = datetime.strptime(at, SORTABLE_FORMAT) - timedelta(seconds=seconds)
    return earlier.strftime(SORTABLE_FORMAT)[:-4] + "Z"
