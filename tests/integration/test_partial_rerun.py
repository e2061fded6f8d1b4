"""Lost intermediate results cost a partial re-run, not the whole job (issue 5).

Real processes and real PySpark: a local cluster of two task executors whose exchange storage
is declared ``local`` (each executor's results are lost with it). The pipeline
(tests/integration/held_pipeline.py) holds its second source until the test lets it go, so the
first stage's results are finished and unread while the test deletes one of them or kills the
executor that wrote some of them. The output must still equal what plain PySpark computes, and
only the producers of what was lost may run again.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmill.client import ClusterClient
from sparkmill.common.v1 import common_pb2, jobs_pb2
from sparkmill.local_cluster import LocalCluster
from tests.integration.conftest import SPARK_SESSIONS, eventually, start_local_cluster
from tests.integration.held_pipeline import (
    A_PARALLELISM,
    expected_rows,
    held,
    held_pipeline,
    output_rows,
    runs,
    vertex,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

RESTARTS = {
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.attempts": "5",
    "restart-strategy.fixed-delay.delay": "200 ms",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_local_cluster(
        tmp_path_factory.mktemp("partial-rerun"),
        task_executors=2,
        slots=3,
        extra_config={
            **SPARK_SESSIONS,
            "exchange.storage": "local",
            # Every input gate offloaded: a consumer deployed after its producer ran again
            # must fetch the gate's new generation, never reuse the old one.
            "jobmanager.deployment.offload-min-partitions": "1",
        },
        wait_timeout_s=180,
    )
    yield local
    local.stop()


def test_a_deleted_result_partition_reruns_only_its_producer(
    cluster: LocalCluster, client: ClusterClient, tmp_path: Path
) -> None:
    out, markers, release = tmp_path / "out", tmp_path / "markers", tmp_path / "release"
    job_id = client.submit(
        held_pipeline("lost-partition", out, markers, release, RESTARTS).build_job_graph()
    )
    eventually(lambda: held(client.status(job_id, timeout=60)), timeout=240)
    # Only stage-a has written results so far: partition 2 of its data set is one directory.
    job_dir = cluster.directory / "exchange" / job_id
    written = sorted(job_dir.glob("*/2/*/_schema.json"))
    assert len(written) == 1, written
    shutil.rmtree(written[0].parent)  # a lost disk, a careless cleanup job...
    release.touch()

    result = client.wait(job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert output_rows(out) == expected_rows()
    stage_a = vertex(result.details, "stage-a")
    assert list(stage_a.subtask_attempts) == [0, 0, 1, 0]
    assert runs(markers, "a") == A_PARALLELISM + 1
    assert list(vertex(result.details, "stage-b").subtask_attempts) == [0]
    assert runs(markers, "b") == 1
    causes = [e.error.exception_type for e in result.details.exceptions]
    assert "PartitionNotFoundError" in causes, causes
    assert "fetched offloaded input gate" in cluster.logs()  # the gates took that path


def test_results_of_a_killed_task_executor_are_produced_again(
    cluster: LocalCluster, client: ClusterClient, tmp_path: Path
) -> None:
    # Runs last in the module: it kills one of the two task executors.
    out, markers, release = tmp_path / "out", tmp_path / "markers", tmp_path / "release"
    job_id = client.submit(
        held_pipeline("lost-executor", out, markers, release, RESTARTS).build_job_graph()
    )

    def held_details() -> jobs_pb2.JobDetails | None:
        details = client.status(job_id, timeout=60)
        return details if held(details) else None

    details = eventually(held_details, timeout=240)
    where_a = list(vertex(details, "stage-a").subtask_task_executors)
    where_b = vertex(details, "stage-b").subtask_task_executors[0]
    victim = next((te for te in where_a if te != where_b), None)
    assert victim is not None, f"every stage-a subtask ran next to stage-b: {where_a}"
    lost = [i for i, te in enumerate(where_a) if te == victim]
    pid = next(
        te.info.pid
        for te in client.cluster_status(timeout=60).resource_manager.task_executors
        if te.resource_id == victim
    )
    os.kill(pid, signal.SIGKILL)
    # The results it wrote are written off (and produced again) while nothing reads them yet.
    eventually(lambda: client.status(job_id, timeout=60).restarts >= 1, timeout=60)
    release.touch()

    result = client.wait(job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert output_rows(out) == expected_rows()
    attempts = list(vertex(result.details, "stage-a").subtask_attempts)
    assert attempts == [1 if i in lost else 0 for i in range(A_PARALLELISM)]
    assert runs(markers, "a") == A_PARALLELISM + len(lost)
    assert list(vertex(result.details, "stage-b").subtask_attempts) == [0]
    causes = [e.error.exception_type for e in result.details.exceptions]
    assert "ResultPartitionLost" in causes, causes
