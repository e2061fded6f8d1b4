"""resourcemanager.start-worker.max-failure-rate: a task executor that exits at once is not
started again every retry interval forever; the pause shows in the counts, the metric, the
advice of a timed-out slot request and the reason given to waiting jobs."""

from __future__ import annotations

import pytest

from sparkmill.services.resourcemanager.start_failure_rate import StartFailureRate
from tests.unit.active_workers_harness import Harness, worker_samples
from tests.unit.resource_manager_harness import TestingResourceManagerState


def test_the_rate_pauses_once_the_failures_of_a_minute_reach_the_maximum() -> None:
    rate = StartFailureRate(3.0)
    for t in (0.0, 10.0):
        rate.record(t)
    assert rate.paused_until(10.0) is None
    rate.record(20.0)
    assert rate.paused_until(20.0) == 60.0  # the first failure leaves the minute at 60 s
    assert rate.recent(59.9) == 3
    assert rate.paused_until(60.0) is None
    assert rate.recent(60.0) == 2


def test_a_fractional_rate_counts_whole_failures() -> None:
    rate = StartFailureRate(2.5)
    rate.record(0.0)
    rate.record(1.0)
    assert rate.paused_until(1.0) is None  # 2 < 2.5
    rate.record(2.0)
    assert rate.paused_until(2.0) == 60.0  # then 2 are left: below 2.5


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        StartFailureRate(0.0)


def _fail_next(h: Harness) -> None:
    """The last requested worker's process ends before it registered (a broken config)."""
    resource_id = h.driver.requested[-1]
    h.workers.on_worker_started(resource_id)
    h.workers.on_worker_terminated(resource_id, "exit code 1")


def test_a_worker_that_exits_at_once_is_started_at_most_max_rate_times_a_minute() -> None:
    h = Harness(start_retry_interval_s=3.0, max_start_failure_rate=3.0)
    h.ask(2)
    for attempt in range(3):
        assert len(h.driver.requested) == attempt + 1
        _fail_next(h)
        h.timers.advance(3.0)  # the cool-down ends: the next start, unless paused
    # Three failures in 6 s: paused until the first is a minute old (at 60 s), not every 3 s.
    assert len(h.driver.requested) == 3
    counts = h.workers.counts()
    assert (counts.failed_total, counts.recent_failures, counts.starts_paused) == (3, 3, True)
    assert h.ask(2) == 0
    assert "max-failure-rate is 3 per minute" in h.workers.wait_reason()
    assert "paused for 51s" in h.workers.wait_reason()
    assert "3 start(s) failed within a minute" in h.workers.more_slots_advice()
    h.timers.advance(50.9)  # now 59.9 s
    assert len(h.driver.requested) == 3
    h.timers.advance(0.1)  # the pause's timer checks the demand again
    assert len(h.driver.requested) == 4
    assert not h.workers.counts().starts_paused
    starting = "1 task executor(s) are starting (resourcemanager.driver: testing)"
    assert h.workers.wait_reason() == starting


def test_a_healthy_worker_after_a_failure_does_not_pause() -> None:
    h = Harness(start_retry_interval_s=1.0, max_start_failure_rate=2.0)
    h.ask(2)
    _fail_next(h)
    h.timers.advance(1.0)
    h.register(h.driver.requested[-1])
    assert h.workers.counts().registered == 1
    assert not h.workers.counts().starts_paused


def test_lost_and_unexpectedly_ended_workers_count_towards_the_rate() -> None:
    h = Harness(start_retry_interval_s=0.0, max_start_failure_rate=2.0)
    first = h.registered_worker()
    h.demand.registered -= 2
    h.demand.waiting = 2  # its job asks for its slots again
    h.workers.on_worker_terminated(first, "exit code 137")  # crashed after it registered
    second = h.driver.requested[-1]  # replaced at once (its slots are still wanted)
    h.register(second)
    h.workers.on_task_executor_lost(second, "heartbeat timeout")
    assert h.workers.counts().starts_paused
    assert len(h.driver.requested) == 2  # no third start while paused


def test_the_wait_reason_names_the_maximum() -> None:
    h = Harness(max_slots=4)
    assert h.ask(4) == 2
    for resource_id in h.driver.requested:
        h.register(resource_id)
    assert h.ask(2) == 0  # 4 slots registered, the maximum: nothing more starts
    reason = h.workers.wait_reason()
    assert reason.startswith("the resource manager is at slotmanager.number-of-slots.max = 4")
    assert "its task executors have 4 slot(s)" in reason


def test_the_wait_reason_names_the_cool_down() -> None:
    h = Harness(start_retry_interval_s=5.0)
    h.ask(2)
    h.workers.on_worker_start_failed(h.driver.requested[0], "no such file")
    assert "next one starts in 5s (resourcemanager.start-worker.retry-interval)" in (
        h.workers.wait_reason()
    )


def test_the_pause_is_a_metric() -> None:
    h = Harness(start_retry_interval_s=0.0, max_start_failure_rate=1.0)
    h.ask(2)
    rm = TestingResourceManagerState(h.workers)
    paused = ("sparkmill_resource_manager_worker_starts_paused", "")
    assert worker_samples(rm.collector())[paused] == 0
    _fail_next(h)
    assert worker_samples(rm.collector())[paused] == 1
