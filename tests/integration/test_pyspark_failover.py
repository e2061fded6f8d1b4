"""Leaders and task executors die in the middle of a multi-stage PySpark pipeline (issues 4, 5).

One HA cluster with real Spark sessions: a real ZooKeeper server, a standby for every control
role, two task executors. The pipeline's output must be row-for-row what plain PySpark computes,
with no duplicates, whatever was killed while it ran.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sparkmill as sm
from sparkmill import functions as F
from sparkmill.client import ClusterClient
from sparkmill.common.ha.progress_log import FileJobProgressStore, replay
from sparkmill.common.ha.zookeeper.server import zookeeper_available
from sparkmill.common.v1 import common_pb2, jobs_pb2
from sparkmill.local_cluster import LocalCluster
from tests.integration.conftest import SPARK_SESSIONS, eventually, start_local_cluster
from tests.integration.held_pipeline import (
    A_PARALLELISM,
    decided_pipeline,
    held,
    held_pipeline,
    output_rows,
    runs,
    vertex,
)
from tests.integration.held_pipeline import expected_rows as expected_held_rows

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper package is missing"),
]

FINISHED = common_pb2.EXECUTION_FINISHED


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_local_cluster(
        tmp_path_factory.mktemp("pyspark-ha"),
        task_executors=2,
        slots=2,
        ha=True,
        standbys=1,
        extra_config={**SPARK_SESSIONS},
        wait_timeout_s=180,
    )
    yield local
    local.stop()


def _slow(df: Any) -> Any:
    time.sleep(2.0)  # runs once per task on the task executor: every subtask takes a while
    return df


def sales_pipeline(out: Path, config: dict[str, str] | None = None) -> sm.Pipeline:
    pipeline = sm.Pipeline("ha-sales", parallelism=4, config=config)
    (
        pipeline.range(4000)
        .transform(_slow, name="slow")
        .with_column("k", F.col("id") % 13)
        .key_by("k")
        .agg(F.count("*").alias("n"), F.sum("id").alias("total"))
        .write_parquet(str(out))
    )
    return pipeline


def expected_rows() -> list[tuple[int, int, int]]:
    groups: dict[int, list[int]] = {}
    for i in range(4000):
        groups.setdefault(i % 13, []).append(i)
    return sorted((k, len(v), sum(v)) for k, v in groups.items())


def finished(client: ClusterClient, job_id: str) -> int:
    details = client.status(job_id, timeout=60)
    return sum(v.tasks_by_state.get(FINISHED, 0) for v in details.vertices)


def job_master_of(client: ClusterClient, job_id: str) -> tuple[str, int]:
    """The address and pid of the process whose JobMaster leads ``job_id``."""
    address = client.status(job_id, timeout=60).job_master_address
    processes = client.cluster_status(timeout=60).job_master_process_infos
    return address, next(p.pid for p in processes if p.address == address)


def sigkill(cluster: LocalCluster, pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    popen = cluster._popen.get(pid)
    if popen is not None:
        popen.wait(timeout=30)


def two_job_master_processes(cluster: LocalCluster, client: ClusterClient) -> None:
    """A process to take a job over: a test before may have killed one of the two."""
    if len(client.cluster_status(timeout=60).job_master_process_infos) < 2:
        cluster.add_process("job-master")
    eventually(
        lambda: len(client.cluster_status(timeout=60).job_master_process_infos) >= 2, timeout=120
    )


def kill_job_master_until_taken_over(
    cluster: LocalCluster, client: ClusterClient, job_id: str
) -> None:
    """SIGKILL the process whose JobMaster leads ``job_id``; return once another leads it."""
    address, job_master = job_master_of(client, job_id)
    sigkill(cluster, job_master)
    eventually(
        lambda: client.status(job_id, timeout=60).job_master_address not in ("", address),
        timeout=120,
    )


def test_leaders_killed_mid_pipeline_output_matches_pyspark(
    cluster: LocalCluster, client: ClusterClient, tmp_path: Path
) -> None:
    out = tmp_path / "sales"
    job_id = client.submit(sales_pipeline(out).build_job_graph())
    eventually(lambda: finished(client, job_id) >= 1, timeout=240)
    # Everything to kill is looked up first: right after the dispatcher leader dies, its
    # successor may not know yet where the job's JobMaster runs.
    view = client.cluster_status(timeout=60)
    _, job_master = job_master_of(client, job_id)
    sigkill(cluster, view.dispatcher.pid)
    sigkill(cluster, view.resource_manager.resource_manager.pid)
    sigkill(cluster, job_master)
    result = client.wait(job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert output_rows(out) == expected_rows()
    assert (out / "_SUCCESS").exists()


def test_job_master_takeover_keeps_the_finished_subtasks(
    cluster: LocalCluster, client: ClusterClient, tmp_path: Path
) -> None:
    # stage-a finishes, stage-b holds: the JobMaster dies with stage-a's results unread. The
    # JobMaster that takes over restores stage-a's finished subtasks instead of running them.
    two_job_master_processes(cluster, client)
    out, markers, release = tmp_path / "out", tmp_path / "markers", tmp_path / "release"
    job_id = client.submit(held_pipeline("jm-takeover", out, markers, release).build_job_graph())

    def held_details() -> jobs_pb2.JobDetails | None:
        details = client.status(job_id, timeout=60)
        return details if held(details) else None

    details = eventually(held_details, timeout=240)
    # The JobMaster reports a subtask FINISHED at once and records it in its progress log on
    # the HA storage a moment later (batched, off its event loop): only what is recorded can
    # be restored. Wait for the record of every stage-a subtask, as a successor would read it.
    stage_a = vertex(details, "stage-a").vertex_id
    store = FileJobProgressStore(cluster.directory / "ha-storage" / "job-progress")
    eventually(
        lambda: sum(v == stage_a for v, _ in replay(store.load(job_id)).finished) == A_PARALLELISM,
        timeout=60,
    )
    kill_job_master_until_taken_over(cluster, client, job_id)
    release.touch()  # lets the old stage-b attempt's thread end; the new attempt never waits
    result = client.wait(job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert output_rows(out) == expected_held_rows()
    assert runs(markers, "a") == A_PARALLELISM  # not one stage-a subtask ran again
    assert result.details.recovered_subtasks == A_PARALLELISM
    assert runs(markers, "b") == 2  # stage-b had not finished: it ran again


def test_job_master_takeover_applies_the_decisions_and_keeps_the_decided_subtasks(
    cluster: LocalCluster, client: ClusterClient, tmp_path: Path
) -> None:
    # Automatic parallelism: stage-x was decided from what the source wrote and finished,
    # stage-y was decided and holds when the JobMaster dies. Its successor applies both
    # recorded decisions and keeps every finished subtask of the source and of stage-x.
    two_job_master_processes(cluster, client)
    out, markers, release = tmp_path / "out", tmp_path / "markers", tmp_path / "release"
    job_id = client.submit(
        decided_pipeline("auto-takeover", out, markers, release).build_job_graph()
    )
    eventually(lambda: (markers / "y-held").exists(), timeout=240)
    details = client.status(job_id, timeout=60)
    decided = {v.name: (v.parallelism, v.parallelism_decision) for v in details.vertices}
    source, x, y = details.vertices[0], vertex(details, "stage-x"), vertex(details, "stage-y")
    assert source.parallelism == 3 and "input size unknown" in source.parallelism_decision
    assert "written by its inputs" in x.parallelism_decision
    assert "written by its inputs" in y.parallelism_decision
    store = FileJobProgressStore(cluster.directory / "ha-storage" / "job-progress")

    def recorded() -> bool:
        progress = replay(store.load(job_id))
        kept = sum(v == x.vertex_id for v, _ in progress.finished)
        return {x.vertex_id, y.vertex_id} <= set(progress.decisions) and kept == x.parallelism

    eventually(recorded, timeout=60)
    kill_job_master_until_taken_over(cluster, client, job_id)
    release.touch()
    result = client.wait(job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert output_rows(out) == expected_held_rows()
    assert runs(markers, "x") == x.parallelism  # not one stage-x subtask ran again
    assert result.details.recovered_subtasks >= source.parallelism + x.parallelism
    after = {v.name: (v.parallelism, v.parallelism_decision) for v in result.details.vertices}
    assert {name: after[name] for name in decided} == decided  # never decided twice


def test_task_executor_killed_mid_pipeline_output_matches_pyspark(
    cluster: LocalCluster, client: ClusterClient, tmp_path: Path
) -> None:
    # Runs last in the module: it leaves the cluster with one task executor fewer plus a new one.
    cluster.add_task_executor()
    eventually(
        lambda: client.cluster_status(timeout=60).resource_manager.slots_total >= 6, timeout=180
    )
    out = tmp_path / "sales-te"
    config = {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "5",
        "restart-strategy.fixed-delay.delay": "500 ms",
    }
    job_id = client.submit(sales_pipeline(out, config).build_job_graph())
    eventually(
        lambda: any(
            s.job_id == job_id
            for te in client.cluster_status(timeout=60).resource_manager.task_executors
            for s in te.slots
        ),
        timeout=240,
    )
    view = client.cluster_status(timeout=60)
    victim = next(
        te.info.pid
        for te in view.resource_manager.task_executors
        if any(s.job_id == job_id for s in te.slots)
    )
    sigkill(cluster, victim)
    result = client.wait(job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert result.details.restarts >= 1
    assert output_rows(out) == expected_rows()
