"""Failures of tasks and task executors (issue 5), with real processes.

Restart strategies decide between restarting and failing; a dead (SIGKILL) or hung (SIGSTOP)
task executor is detected by heartbeats and only the affected region runs again.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from sparkmill.common.v1 import common_pb2
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import ClusterFactory, RunningCluster, eventually

pytestmark = pytest.mark.integration

RUNNING = common_pb2.EXECUTION_RUNNING
FIXED_DELAY = {
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.delay": "200 ms",
}

# Every input gate offloaded (fetched by the task executors): consumers deployed after their
# producers ran again must see the new attempts.
OFFLOAD_ALL = {"jobmanager.deployment.offload-min-partitions": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    factory = ClusterFactory(tmp_path_factory.mktemp("failover"))
    running = factory(task_executors=2, slots=2)
    yield running
    running.close()


def run(cluster: RunningCluster, pipeline: object, timeout: float = 90):
    job_id = cluster.client.submit(pipeline.build_job_graph())  # type: ignore[attr-defined]
    return job_id, cluster.client.wait(job_id, timeout=timeout)


def test_fixed_delay_restarts_a_flaky_subtask_until_it_succeeds(cluster: RunningCluster) -> None:
    config = {**FIXED_DELAY, "restart-strategy.fixed-delay.attempts": "3"}
    # Like Flink, every failover counts against the attempts (here: one subtask, two failures).
    _, result = run(cluster, noop_pipeline("flaky-ok", 1, fail_attempts=2, config=config))
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert list(result.details.vertices[0].subtask_attempts) == [2]
    assert result.details.restarts == 2
    assert [e.attempt_number for e in result.details.exceptions] == [0, 1]


def test_fixed_delay_with_too_few_attempts_fails_with_the_task_error(
    cluster: RunningCluster,
) -> None:
    config = {**FIXED_DELAY, "restart-strategy.fixed-delay.attempts": "1"}
    _, result = run(cluster, noop_pipeline("flaky-fail", 1, fail_attempts=2, config=config))
    assert result.status == common_pb2.FAILED
    assert "fails attempt 1 as configured" in result.failure.message
    assert "fixed-delay" in result.failure.message


def test_failure_rate_allows_failures_within_the_rate(cluster: RunningCluster) -> None:
    config = {
        "restart-strategy.type": "failure-rate",
        "restart-strategy.failure-rate.max-failures-per-interval": "2",
        "restart-strategy.failure-rate.failure-rate-interval": "1 min",
        "restart-strategy.failure-rate.delay": "100 ms",
    }
    _, ok = run(cluster, noop_pipeline("rate-ok", 1, fail_attempts=2, config=config))
    assert ok.status == common_pb2.FINISHED, ok.failure.message
    _, failed = run(cluster, noop_pipeline("rate-exceeded", 1, fail_attempts=3, config=config))
    assert failed.status == common_pb2.FAILED
    assert "failure-rate" in failed.failure.message


def test_exponential_delay_backs_off(cluster: RunningCluster) -> None:
    config = {
        "restart-strategy.type": "exponential-delay",
        "restart-strategy.exponential-delay.initial-backoff": "400 ms",
        "restart-strategy.exponential-delay.backoff-multiplier": "2.0",
        "restart-strategy.exponential-delay.max-backoff": "10 s",
        "restart-strategy.exponential-delay.jitter-factor": "0",
    }
    started = time.monotonic()
    _, result = run(cluster, noop_pipeline("backoff", 1, fail_attempts=3, config=config))
    elapsed = time.monotonic() - started
    assert result.status == common_pb2.FINISHED, result.failure.message
    # Back-offs of 0.4 + 0.8 + 1.6 s; loosely, since scheduling adds a little.
    assert 2.6 <= elapsed < 20, elapsed


def _stage0_running(cluster: RunningCluster, job_id: str) -> bool:
    details = cluster.client.status(job_id)
    return details.vertices[0].tasks_by_state.get(RUNNING, 0) == 4


def _victim(cluster: RunningCluster, job_id: str) -> tuple[int, int]:
    """A task executor running tasks of the job: (pid, number of the job's slots on it)."""
    view = cluster.client.cluster_status()
    for te in view.resource_manager.task_executors:
        held = sum(1 for s in te.slots if s.job_id == job_id)
        if held:
            return te.info.pid, held
    raise AssertionError("no task executor holds a slot of the job")


def _check_region_rerun(result, held: int) -> None:
    assert result.status == common_pb2.FINISHED, result.failure.message
    first, second = result.details.vertices
    # Only the subtasks that ran on the lost executor ran again (each its own region).
    assert sorted(first.subtask_attempts) == [0] * (4 - held) + [1] * held
    assert list(second.subtask_attempts) == [0, 0, 0, 0]


def test_killed_task_executor_reruns_only_the_affected_region(
    cluster_factory: ClusterFactory,
) -> None:
    running = cluster_factory(task_executors=3, slots=2)
    config = {**FIXED_DELAY, "restart-strategy.fixed-delay.attempts": "5", **OFFLOAD_ALL}
    pipeline = noop_pipeline(
        "te-kill", 4, vertices=2, pattern="POINTWISE", sleep_s=4, config=config
    )
    job_id = running.client.submit(pipeline.build_job_graph())
    eventually(lambda: _stage0_running(running, job_id), timeout=60)
    pid, held = _victim(running, job_id)
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    eventually(lambda: running.client.status(job_id).restarts >= held, timeout=30)
    detected = time.monotonic() - killed_at
    assert detected < 10, f"detection took {detected:.1f}s"
    _check_region_rerun(running.client.wait(job_id, timeout=120), held)


def test_hung_task_executor_is_detected_and_its_stale_tasks_refused(
    cluster_factory: ClusterFactory,
) -> None:
    running = cluster_factory(task_executors=3, slots=2)
    config = {**FIXED_DELAY, "restart-strategy.fixed-delay.attempts": "5", **OFFLOAD_ALL}
    pipeline = noop_pipeline(
        "te-hang", 4, vertices=2, pattern="POINTWISE", sleep_s=3, config=config
    )
    job_id = running.client.submit(pipeline.build_job_graph())
    eventually(lambda: _stage0_running(running, job_id), timeout=60)
    pid, held = _victim(running, job_id)
    os.kill(pid, signal.SIGSTOP)  # a hang: no socket is closed
    try:
        # Detected within the heartbeat timeout (6 s on local clusters) plus a little.
        eventually(lambda: running.client.status(job_id).restarts >= held, timeout=15)
    finally:
        os.kill(pid, signal.SIGCONT)
    result = running.client.wait(job_id, timeout=120)
    _check_region_rerun(result, held)
    # The resumed executor's old attempts finished later; their reports were refused as stale,
    # so nothing was counted twice and no extra restart happened.
    assert result.details.restarts == held
    # It re-registers and its slots come back.
    eventually(
        lambda: running.client.cluster_status().resource_manager.slots_total == 6, timeout=60
    )
