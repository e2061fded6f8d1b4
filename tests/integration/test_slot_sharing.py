"""Slot sharing end to end: subtasks of one slot sharing group share the slots of a cluster."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sparkmill.common.v1 import common_pb2
from sparkmill.testing import TestPipeline, noop_pipeline
from tests.integration.conftest import RunningCluster, _start

pytestmark = pytest.mark.integration

RUNNING = common_pb2.EXECUTION_RUNNING
TERMINAL = (common_pb2.FINISHED, common_pb2.FAILED, common_pb2.CANCELED)


@pytest.fixture(scope="module")
def four_slots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """Exactly 4 slots: 1 task executor x 4 slots."""
    running = _start(tmp_path_factory.mktemp("cluster"), task_executors=1, slots=4)
    yield running
    running.close()


def _run_and_watch(cluster: RunningCluster, pipeline: TestPipeline) -> tuple[int, int, int]:
    """Submit, poll until done: (final job status, max RUNNING subtasks, min free slots)."""
    client = cluster.client
    job_id = client.submit(pipeline.build_job_graph())
    peak_running, min_free = 0, 1 << 30
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        details = client.status(job_id)
        running = sum(v.tasks_by_state.get(RUNNING, 0) for v in details.vertices)
        peak_running = max(peak_running, running)
        min_free = min(min_free, client.cluster_status().resource_manager.slots_free)
        if details.status in TERMINAL:
            return details.status, peak_running, min_free
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not end in time")


def test_pipelined_job_runs_all_twelve_subtasks_in_four_shared_slots(
    four_slots: RunningCluster,
) -> None:
    # 3 PIPELINED vertices x 4 subtasks form one region: 12 slots without slot sharing.
    status, peak, _ = _run_and_watch(
        four_slots,
        noop_pipeline("shared", 4, vertices=3, result_type="PIPELINED", sleep_s=6.0),
    )
    assert status == common_pb2.FINISHED
    assert peak == 12


def test_blocking_job_reuses_the_shared_slots(four_slots: RunningCluster) -> None:
    status, peak, _ = _run_and_watch(
        four_slots, noop_pipeline("blocking", 4, vertices=3, sleep_s=1.0)
    )
    assert status == common_pb2.FINISHED
    assert peak <= 4


def test_separate_groups_need_separate_slots(four_slots: RunningCluster) -> None:
    # Parallelism 2: the default group would need 2 slots; groups a, a, b need 4.
    status, peak, min_free = _run_and_watch(
        four_slots,
        noop_pipeline(
            "groups",
            2,
            vertices=3,
            result_type="PIPELINED",
            sleep_s=6.0,
            slot_sharing_groups=("a", "a", "b"),
        ),
    )
    assert status == common_pb2.FINISHED
    assert peak == 6
    assert min_free == 0
