"""A resource-manager failover on an elastic local cluster with high availability: the workers
the killed leader started keep running (sessions of their own), the standby that takes over
finds them through their pid files, adopts them and starts none while the job holds every
slot; the job finishes exact, and the adopted workers go once idle. Real processes, real
ZooKeeper, real Spark."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sparkmill as sm
from sparkmill.client import ClusterClient
from sparkmill.common.runtime.service_process import is_alive, running_workers
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from tests.integration.conftest import RunningCluster, start_local_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SLOTS = 2
PARALLELISM = 4  # two workers of two slots
ROWS = 400
IDLE_TIMEOUT_S = 5.0
HOLD_LIMIT_S = 300.0


def hold_until_released(directory: str) -> Any:
    """Each subtask marks that it runs, then waits for ``release`` (bounded)."""

    def hold(df: Any) -> Any:
        markers = Path(directory)
        (markers / f"run-{uuid.uuid4().hex}").touch()
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not (markers / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return df

    return hold


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RunningCluster]:
    running = RunningCluster(
        start_local_cluster(
            tmp_path / "cluster",
            wait_timeout_s=180,
            slots=SLOTS,
            elastic=True,
            max_task_executors=3,
            ha=True,
            standbys=1,
            extra_config={
                "spark.master": "local[1]",
                "resourcemanager.taskmanager-timeout": f"{IDLE_TIMEOUT_S:g} s",
                "resourcemanager.start-worker.retry-interval": "1 s",
            },
        )
    )
    yield running
    pids = list(running_workers(running.cluster.worker_dir).values())
    running.close()
    # The whole cluster's stop stops the workers, whoever started them.
    assert not [pid for pid in pids if is_alive(pid)]


def _status(client: ClusterClient) -> resource_manager_pb2.ClusterStatus:
    status: resource_manager_pb2.ClusterStatus = client.cluster_status(timeout=10).resource_manager
    return status


def _wait(what: str, probe: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except Exception as exc:  # the cluster is failing over: ask again
            last = exc
        else:
            if last:
                return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {last!r})")


def test_the_new_leader_adopts_the_running_workers_and_starts_none(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    local, client = cluster.cluster, cluster.client
    hold = tmp_path / "hold"
    hold.mkdir()
    pipeline = sm.Pipeline("adopted", parallelism=PARALLELISM)
    (
        pipeline.range(ROWS)
        .transform(hold_until_released(str(hold)), name="hold")
        .transform(lambda df: df.withColumn("twice", df.id * 2), name="double")
        .collect(limit=ROWS * 2, name="out")
    )
    job_id = client.submit(pipeline.build_job_graph())
    _wait(
        f"{PARALLELISM} subtasks holding",
        lambda: len(list(hold.glob("run-*"))) >= PARALLELISM,
        timeout_s=240,
    )
    workers = running_workers(local.worker_dir)
    assert len(workers) == PARALLELISM // SLOTS, workers
    before = _status(client)
    assert before.workers.registered == 2 and before.workers.started_total == 2, before.workers

    leader_pid = before.resource_manager.pid
    [leader] = local.find("resource-manager", leader_pid)
    local.kill(leader)
    assert all(is_alive(pid) for pid in workers.values())  # they outlive their parent

    def adopted() -> resource_manager_pb2.ClusterStatus | None:
        status = _status(client)
        if status.resource_manager.pid in (0, leader_pid):
            return None
        return status if status.workers.registered == 2 else None

    after = _wait("the standby leads and adopts both workers", adopted, timeout_s=120)
    assert (after.workers.started_total, after.workers.failed_total) == (0, 0), after.workers
    assert running_workers(local.worker_dir) == workers  # the same processes, no duplicate

    (hold / "release").touch()
    result = client.wait(job_id, timeout=300)
    assert result.status == common_pb2.FINISHED, result.failure.message
    rows = sorted(tuple(r) for r in pipeline.collected(result)["out"])
    assert rows == [(i, 2 * i) for i in range(ROWS)]
    assert running_workers(local.worker_dir) == workers

    def released() -> resource_manager_pb2.ClusterStatus | None:
        status = _status(client)
        gone = not running_workers(local.worker_dir)
        return status if gone and not status.task_executors else None

    final = _wait("the adopted workers released when idle", released, timeout_s=IDLE_TIMEOUT_S + 90)
    assert final.workers.released_total == 2 and final.workers.started_total == 0, final.workers
