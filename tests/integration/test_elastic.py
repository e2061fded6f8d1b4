"""Task executors on demand: a local cluster started elastic (no task executor up front) whose
resource manager starts task executor processes through its ``local`` driver when a job needs
slots, and stops them once idle. Real processes, real Spark."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sparkmill as sm
from sparkmill.common.runtime.service_process import is_alive, kill_tree
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import RunningCluster, start_local_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

JOB_TIMEOUT_S = 300.0
IDLE_TIMEOUT_S = 3.0
SLOTS = 2
MAX_EXECUTORS = 4


class Elastic(RunningCluster):
    """The module's cluster with what its tests ask of the resource manager's workers."""

    def status(self) -> resource_manager_pb2.ClusterStatus:
        status: resource_manager_pb2.ClusterStatus = self.client.cluster_status(
            timeout=10
        ).resource_manager
        return status

    def worker_pids(self) -> dict[str, int]:
        """Every worker the driver started so far, by resource id (from its pid file)."""
        pids = {}
        for pid_file in self.cluster.worker_dir.glob("*/pid"):
            text = pid_file.read_text().strip()
            if text:
                pids[pid_file.parent.name] = int(text)
        return pids

    def run(self, pipeline: sm.Pipeline) -> Any:
        job_id = self.client.submit(pipeline.build_job_graph())
        result = self.client.wait(job_id, timeout=JOB_TIMEOUT_S)
        assert result.status == common_pb2.FINISHED, result.failure.message
        return result

    def wait_all_released(self, timeout_s: float) -> resource_manager_pb2.ClusterStatus:
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status()
            alive = [pid for pid in self.worker_pids().values() if is_alive(pid)]
            if not status.task_executors and not alive and not status.workers.registered:
                return status
            assert time.monotonic() < deadline, (
                f"task executors still there after {timeout_s:g}s: "
                f"{len(status.task_executors)} registered, processes {alive}"
            )
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Elastic]:
    # Named ``cluster``: a test that fails gets the cluster's service logs (the conftest's).
    running = Elastic(
        start_local_cluster(
            tmp_path_factory.mktemp("elastic"),
            wait_timeout_s=120,
            slots=SLOTS,
            elastic=True,
            max_task_executors=MAX_EXECUTORS,
            extra_config={
                "spark.master": "local[1]",
                "resourcemanager.taskmanager-timeout": f"{IDLE_TIMEOUT_S:g} s",
                "resourcemanager.start-worker.retry-interval": "1 s",
            },
        )
    )
    yield running
    pids = running.worker_pids()
    running.close()
    # Stopping the cluster stops the workers the resource manager started.
    assert not [pid for pid in pids.values() if is_alive(pid)]


def doubled(name: str, parallelism: int, rows: int) -> sm.Pipeline:
    pipeline = sm.Pipeline(name, parallelism=parallelism)
    (
        pipeline.range(rows)
        .transform(lambda df: df.withColumn("twice", df.id * 2), name="double")
        .collect(limit=rows * 2, name="out")
    )
    return pipeline


def collected(pipeline: sm.Pipeline, result: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in pipeline.collected(result)["out"])


def test_an_elastic_cluster_starts_with_no_task_executor(cluster: Elastic) -> None:
    status = cluster.status()
    assert not status.task_executors
    assert status.workers.driver == "local"
    assert status.workers.max_slots == MAX_EXECUTORS * SLOTS


def test_a_job_gets_executors_on_demand_finishes_exact_and_they_go_when_idle(
    cluster: Elastic,
) -> None:
    pipeline = doubled("on-demand", parallelism=6, rows=600)
    result = cluster.run(pipeline)
    assert collected(pipeline, result) == [(i, 2 * i) for i in range(600)]
    started = cluster.worker_pids()
    # 6 subtasks, 2 slots per executor: more than one executor, never more than the maximum.
    assert 2 <= len(started) <= MAX_EXECUTORS
    status = cluster.wait_all_released(IDLE_TIMEOUT_S + 60)
    assert status.workers.released_total >= len(started)
    assert status.workers.failed_total == 0
    assert status.workers.pending == 0


def test_a_worker_killed_while_starting_is_replaced(cluster: Elastic) -> None:
    before = set(cluster.worker_pids())
    failed_before = cluster.status().workers.failed_total
    pipeline = doubled("replaced", parallelism=2, rows=100)
    job_id = cluster.client.submit(pipeline.build_job_graph())
    # The first new worker's pid file appears as soon as its process is forked: kill it (with
    # anything it started) before it can register.
    deadline = time.monotonic() + 60
    victim = None
    while victim is None:
        assert time.monotonic() < deadline, "no worker was started for the job"
        fresh = {r: p for r, p in cluster.worker_pids().items() if r not in before}
        if fresh:
            victim = next(iter(fresh.items()))
        else:
            time.sleep(0.01)
    kill_tree(victim[1])
    registered = {te.resource_id for te in cluster.status().task_executors}
    result = cluster.client.wait(job_id, timeout=JOB_TIMEOUT_S)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert collected(pipeline, result) == [(i, 2 * i) for i in range(100)]
    status = cluster.status()
    assert victim[0] not in {te.resource_id for te in status.task_executors}
    assert status.workers.failed_total == failed_before + 1, (
        f"the killed worker {victim[0]} (registered when killed: {victim[0] in registered})"
    )
    replacements = set(cluster.worker_pids()) - before - {victim[0]}
    assert replacements, "no worker replaced the killed one"


def test_workers_have_their_own_files(cluster: Elastic) -> None:
    registered = 0
    for resource_id in cluster.worker_pids():
        directory: Path = cluster.cluster.worker_dir / resource_id
        config = (directory / "task-executor.yaml").read_text()
        assert f"taskmanager.resource-id: {resource_id}" in config
        assert f"spark.conf.spark.local.dir: {directory / 'spark-local'}" in config
        # The killed one may have died before it wrote a line.
        registered += (
            "registered at resource manager" in (directory / "task-executor.log").read_text()
        )
    assert registered >= 3


def test_a_job_needing_more_than_the_maximum_waits_and_jobs_status_says_why(
    cluster: Elastic,
) -> None:
    # Test operators: no Spark session, so the four workers start in seconds. Ten subtasks of
    # one slot sharing group need ten slots; the maximum is eight.
    pipeline = noop_pipeline("too-big", parallelism=MAX_EXECUTORS * SLOTS + 2, sleep_s=120.0)
    job_id = cluster.client.submit(pipeline.build_job_graph())
    expected = (
        "waiting for 2 slot(s): the resource manager is at slotmanager.number-of-slots.max = "
        f"{MAX_EXECUTORS * SLOTS}"
    )
    deadline = time.monotonic() + 120
    shown = ""
    try:
        while expected not in shown:
            if time.monotonic() >= deadline:
                # What the resource manager counts, to tell a need it lost from a reason that
                # did not reach the JobMaster.
                rm = cluster.status()
                raise AssertionError(
                    f"jobs status never said why: {shown}\nresource manager: slots "
                    f"{rm.slots_total} ({rm.slots_free} free, {rm.slots_allocated} allocated, "
                    f"{rm.slots_pending} pending), {rm.pending_slot_requests} slot(s) waited "
                    f"for, workers {rm.workers}"
                )
            time.sleep(1.0)
            shown = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "sparkmill",
                    "jobs",
                    "status",
                    job_id,
                    "--config",
                    str(cluster.config_path),
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        details = cluster.client.status(job_id)
        assert details.status == common_pb2.RUNNING  # it waits: nothing timed out
        assert details.slot_wait_reason.startswith(expected)
        status = cluster.status()
        assert status.workers.registered == MAX_EXECUTORS
        assert status.pending_slot_requests == 2
    finally:
        cluster.client.cancel(job_id)
    result = cluster.client.wait(job_id, timeout=JOB_TIMEOUT_S)
    assert result.status == common_pb2.CANCELED
    assert not result.details.slot_wait_reason
