"""With no restart configuration at all (the defaults), a lost machine never fails a job, and a
user's bug still fails it fast with its own error as the root cause (issue 24).

* A PySpark pipeline whose transform raises on every row fails in under 10 s with that error;
  a source path that matches nothing fails at once, without a restart.
* A task executor SIGKILLed with its Spark JVM and Python workers (its whole process tree, as a
  machine dies) while it runs first-stage subtasks: the job finishes with exactly the output
  plain PySpark computes.
* With ZooKeeper HA, a killed task executor, the killed job-master process leading the job and
  the killed dispatcher leader, all during the same job: it finishes, every subtask done.

No cluster, pipeline or test here sets a ``restart-strategy`` key.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sparkmill as sm
from sparkmill import functions as F
from sparkmill.client import ClusterClient
from sparkmill.common.v1 import common_pb2, jobs_pb2
from sparkmill.local_cluster import LocalCluster
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import (
    SPARK_SESSIONS,
    ClusterFactory,
    RunningCluster,
    eventually,
    start_local_cluster,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROWS = 4000
KEYS = 13
HOLD_LIMIT_S = 180.0
RUNNING = common_pb2.EXECUTION_RUNNING
FINISHED = common_pb2.EXECUTION_FINISHED


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_local_cluster(
        tmp_path_factory.mktemp("default-failover"),
        task_executors=2,
        slots=2,
        extra_config={**SPARK_SESSIONS},
        wait_timeout_s=180,
    )
    # Warm: every task executor's Spark session and Python workers are up, so the tests time
    # sparkmill, not a JVM starting (the times are of a warm cluster too).
    warm_up = sm.Pipeline("warm-up", parallelism=4)
    warm_up.range(400).transform(_identity_udf, name="udf").collect()
    try:
        with ClusterClient.from_config_file(local.config_path) as client:
            result = client.wait(client.submit(warm_up.build_job_graph()), timeout=240)
        assert result.status == common_pb2.FINISHED, result.failure.message
    except BaseException:
        local.stop()
        raise
    yield local
    local.stop()


def _identity_udf(df: Any) -> Any:
    from pyspark.sql import functions as PF

    return df.select(PF.udf(lambda value: value, "long")("id").alias("id"))


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


# -- a user's bug fails fast -------------------------------------------------------------------


def _raises_on_every_row(df: Any) -> Any:
    from pyspark.sql import functions as PF

    def check(value: int) -> int:
        raise ValueError(f"no good row here (id {value % 1})")

    return df.select(PF.udf(check, "long")("id").alias("id"))


def test_a_transform_that_raises_on_every_row_fails_fast_with_its_error(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    pipeline = sm.Pipeline("raises-everywhere", parallelism=4)
    (
        pipeline.range(ROWS)
        .transform(_raises_on_every_row, name="validate")
        .write_parquet(str(tmp_path / "never"))
    )
    with ClusterClient.from_config_file(cluster.config_path) as client:
        started = time.monotonic()
        result = client.wait(client.submit(pipeline.build_job_graph()), timeout=120)
        took = time.monotonic() - started
    print(f"deterministic user error failed the job in {took:.1f}s")
    assert result.status == common_pb2.FAILED, common_pb2.JobStatus.Name(result.status)
    message = result.failure.message
    assert "ValueError: no good row here (id 0)" in message, message
    assert "failed with the same error" in message, message
    # Fast means without the back-off of ten restarts (about 60 s with the defaults): each
    # subtask (its own failover region) runs again once at most, as a first failure may be
    # transient. The time itself is the failure-cost benchmark's to measure: load stretches it.
    assert result.details.restarts <= 4, result.details.restarts
    for v in result.details.vertices:
        assert max(v.subtask_attempts, default=0) <= 1, (v.name, list(v.subtask_attempts))
    # Nothing was published (a failed job's attempt directories are staging, not output).
    assert not (tmp_path / "never" / "_SUCCESS").exists()


def test_a_source_path_that_matches_nothing_fails_at_once(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    pipeline = sm.Pipeline("bad-path", parallelism=2)
    pipeline.read_text(str(tmp_path / "nowhere" / "*.txt")).write_parquet(str(tmp_path / "out"))
    with ClusterClient.from_config_file(cluster.config_path) as client:
        result = client.wait(client.submit(pipeline.build_job_graph()), timeout=120)
    assert result.status == common_pb2.FAILED, common_pb2.JobStatus.Name(result.status)
    assert "nowhere" in result.failure.message, result.failure.message
    assert "restarting cannot help" in result.failure.message, result.failure.message
    assert result.details.restarts == 0


# -- a lost machine costs a partial re-run -----------------------------------------------------


def _holding(markers: str, release: str) -> Callable[[Any], Any]:
    """Marks each run; runs before ``release`` exists wait for it, so the first stage is
    certainly running on every subtask while the test kills a machine."""

    def hold(df: Any) -> Any:
        folder = Path(markers)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{os.getpid()}-{uuid.uuid4().hex}").touch()
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not Path(release).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        return df

    return hold


def _vertex(details: jobs_pb2.JobDetails, label: str) -> jobs_pb2.VertexDetails:
    found = [v for v in details.vertices if label in v.name]
    assert len(found) == 1, [v.name for v in details.vertices]
    return found[0]


def test_a_killed_task_executor_costs_a_partial_rerun_with_the_defaults(
    cluster: LocalCluster, spark: Any, tmp_path: Path
) -> None:
    # Last of the Spark tests in this module: it kills one of the cluster's task executors.
    from pyspark.sql import functions as PF

    out, markers, release = tmp_path / "out", tmp_path / "markers", tmp_path / "release"
    pipeline = sm.Pipeline("machine-lost", parallelism=2)
    (
        pipeline.range(ROWS)
        .set_parallelism(4)
        .transform(_holding(str(markers), str(release)), name="stage-a")
        .with_column("k", F.col("id") % KEYS)
        .key_by("k")
        .agg(F.count("*").alias("n"), F.sum("id").alias("total"))
        .write_parquet(str(out))
    )
    with ClusterClient.from_config_file(cluster.config_path) as client:
        eventually(lambda: client.cluster_status(timeout=60).resource_manager.slots_free == 4, 120)
        job_id = client.submit(pipeline.build_job_graph())
        try:

            def stage_a_held() -> jobs_pb2.JobDetails | None:
                details = client.status(job_id, timeout=60)
                a = _vertex(details, "stage-a")
                running = a.tasks_by_state.get(RUNNING, 0) == 4 and all(a.subtask_task_executors)
                return details if running and len(list(markers.glob("*"))) == 4 else None

            details = eventually(stage_a_held, timeout=240)
            where = list(_vertex(details, "stage-a").subtask_task_executors)
            view = client.cluster_status(timeout=60)
            pids = {te.resource_id: te.info.pid for te in view.resource_manager.task_executors}
            victim = where[0]
            lost = [i for i, te in enumerate(where) if te == victim]
            cluster.kill_machine(cluster.find("task-executor", pids[victim])[0])
            eventually(lambda: client.status(job_id, timeout=60).restarts >= 1, 30)
        finally:
            release.touch()
        result = client.wait(job_id, timeout=300)

    assert result.status == common_pb2.FINISHED, result.failure.message
    expected = (
        spark.range(ROWS)
        .withColumn("k", PF.col("id") % KEYS)
        .groupBy("k")
        .agg(PF.count("*").alias("n"), PF.sum("id").alias("total"))
    )
    assert rows(spark.read.parquet(str(out))) == rows(expected)
    # Only the lost machine's subtasks ran again.
    stage_a = _vertex(result.details, "stage-a")
    assert list(stage_a.subtask_attempts) == [1 if i in lost else 0 for i in range(4)]
    assert result.details.restarts == 1, "the subtasks of one lost machine are one restart"


# -- and with ZooKeeper HA: a task executor, the job master and the dispatcher leader ----------


def test_defaults_survive_a_task_executor_job_master_and_dispatcher_killed_in_one_job(
    cluster_factory: ClusterFactory,
) -> None:
    ha: RunningCluster = cluster_factory(task_executors=3, slots=2, ha=True, standbys=1)
    client = ha.client
    # 3 stages x 4 subtasks x 1 s, ALL_TO_ALL: ~3-6 s of work in waves.
    job = noop_pipeline("ha-defaults", parallelism=4, vertices=3, pattern="ALL_TO_ALL", sleep_s=1.0)
    job_id = client.submit(job.build_job_graph())

    def finished_tasks() -> int:
        details = client.status(job_id, timeout=30)
        return sum(v.tasks_by_state.get(FINISHED, 0) for v in details.vertices)

    def running_on() -> int | None:
        view = client.cluster_status(timeout=30)
        for te in view.resource_manager.task_executors:
            if any(s.job_id == job_id for s in te.slots):
                return te.info.pid
        return None

    eventually(lambda: finished_tasks() >= 2, timeout=60)
    ha.cluster.kill_machine(ha.cluster.find("task-executor", eventually(running_on, timeout=30))[0])
    # The loss is noticed (its slots are gone) before the control processes die too.
    eventually(
        lambda: len(client.cluster_status(timeout=30).resource_manager.task_executors) == 2,
        timeout=30,
    )

    address = client.status(job_id).job_master_address
    view = client.cluster_status()
    job_master = next(p.pid for p in view.job_master_process_infos if p.address == address)
    dispatcher = view.dispatcher.pid
    for pid in (job_master, dispatcher):
        os.kill(pid, signal.SIGKILL)
        popen = ha.cluster._popen.get(pid)
        if popen is not None:
            popen.wait(timeout=30)

    result = client.wait(job_id, timeout=240)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert sum(v.tasks_by_state.get(FINISHED, 0) for v in result.details.vertices) == 12
    assert client.status(job_id).job_master_address != address
    assert client.cluster_status().dispatcher.pid != dispatcher
