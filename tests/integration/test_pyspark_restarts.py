"""Failures of PySpark tasks and of task executors running them (issue 5), with real processes.

One standalone cluster (three task executors x two slots, each with an eager local[1] Spark
session) serves the module:

* a PySpark stage whose function raises on its first two runs is restarted by the
  ``fixed-delay`` strategy - alone, the finished subtasks upstream stay as they are - and the
  output equals what plain PySpark computes; with too few attempts the job fails with the
  user's own error;
* ``failure-rate`` and ``exponential-delay`` behave as configured, and a resource profile no
  executor offers fails the job at once with a diagnostic;
* a task executor hung with SIGSTOP (no socket closes) while it runs first-stage subtasks of a
  multi-stage pipeline is detected by heartbeats, only its subtasks run again, and resuming it
  (SIGCONT) corrupts nothing: its stale attempts are refused and its slots come back. This test
  runs last: it is the one that disturbs the cluster.

Every result is checked row for row against the same computation in a plain PySpark session.
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
from tests.integration.conftest import SPARK_SESSIONS, eventually, start_local_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROWS = 4000
KEYS = 13
JOB_TIMEOUT_S = 300.0
HOLD_LIMIT_S = 180.0
RUNNING = common_pb2.EXECUTION_RUNNING
FIXED_DELAY = {
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.delay": "200 ms",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_local_cluster(
        tmp_path_factory.mktemp("pyspark-restarts"),
        task_executors=3,
        slots=2,
        extra_config={**SPARK_SESSIONS},
        wait_timeout_s=180,
    )
    yield local
    local.stop()


# -- helpers ------------------------------------------------------------------------------------


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def runs(markers: Path, prefix: str = "") -> list[Path]:
    """The marker files the pipeline's functions left, one per run."""
    return sorted(markers.glob(f"{prefix}*")) if markers.exists() else []


def vertex(details: jobs_pb2.JobDetails, label: str) -> jobs_pb2.VertexDetails:
    found = [v for v in details.vertices if label in v.name]
    assert len(found) == 1, [v.name for v in details.vertices]
    return found[0]


def check_output(spark: Any, out: Path, expected: Any) -> None:
    """``out`` holds exactly the rows of ``expected``: no row lost, none twice, published."""
    actual = rows(spark.read.parquet(str(out)))
    assert actual == rows(expected)
    keys = [r[0] for r in actual]
    assert len(keys) == len(set(keys)), "a key was written twice"
    names = sorted(p.name for p in out.iterdir())
    assert "_SUCCESS" in names and "_temporary" not in names, names


# -- a flaky PySpark stage under fixed-delay ---------------------------------------------------


def _flaky(markers: str, failing_runs: int) -> Callable[[Any], Any]:
    """Adds a column with PySpark; its first ``failing_runs`` runs raise first (each run leaves
    a marker, so the count survives across attempts and processes)."""

    def flaky(df: Any) -> Any:
        from pyspark.sql import functions as PF

        folder = Path(markers)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"run-{uuid.uuid4().hex}").touch()
        run = sum(1 for _ in folder.glob("run-*"))
        if run <= failing_runs:
            raise RuntimeError(f"flaky stage fails attempt {run}")
        return df.withColumn("mean", PF.col("total") / PF.col("n"))

    return flaky


def flaky_pipeline(
    name: str, out: Path, markers: Path, config: dict[str, str], failing_runs: int = 2
) -> sm.Pipeline:
    #   [2] range -> with_column(k) -> partial agg
    #   [2] agg                                      (hash)
    #   [1] flaky -> write_parquet                   (forward, 2 -> 1)
    #   [1] commit
    pipeline = sm.Pipeline(name, parallelism=2, config=config)
    (
        pipeline.range(ROWS)
        .with_column("k", F.col("id") % KEYS)
        .key_by("k")
        .agg(F.count("*").alias("n"), F.sum("id").alias("total"))
        .transform(_flaky(str(markers), failing_runs), name="flaky")
        .set_parallelism(1)  # one subtask: the run count is the attempt count
        .write_parquet(str(out))
    )
    return pipeline


def flaky_expected(spark: Any) -> Any:
    from pyspark.sql import functions as PF

    return (
        spark.range(ROWS)
        .withColumn("k", PF.col("id") % KEYS)
        .groupBy("k")
        .agg(PF.count("*").alias("n"), PF.sum("id").alias("total"))
        .withColumn("mean", PF.col("total") / PF.col("n"))
    )


def test_flaky_pyspark_stage_is_restarted_until_it_succeeds(
    cluster: LocalCluster, client: ClusterClient, spark: Any, tmp_path: Path
) -> None:
    out, markers = tmp_path / "out", tmp_path / "markers"
    config = {**FIXED_DELAY, "restart-strategy.fixed-delay.attempts": "3"}
    pipeline = flaky_pipeline("flaky-ok", out, markers, config)
    job_id = client.submit(pipeline.build_job_graph())
    result = client.wait(job_id, timeout=JOB_TIMEOUT_S)

    assert result.status == common_pb2.FINISHED, result.failure.message
    check_output(spark, out, flaky_expected(spark))
    assert len(runs(markers)) == 3
    details = result.details
    assert details.restarts == 2
    # Region failover: only the flaky subtask ran again, not the finished stages before it.
    for v in details.vertices:
        expected_attempts = [2] if "flaky" in v.name else [0] * v.parallelism
        assert list(v.subtask_attempts) == expected_attempts, (v.name, list(v.subtask_attempts))
    flaky = vertex(details, "flaky").name
    failures = [(e.vertex_name, e.subtask_index, e.attempt_number) for e in details.exceptions]
    assert failures == [(flaky, 0, 0), (flaky, 0, 1)]
    messages = [e.error.message for e in details.exceptions]
    assert "RuntimeError: flaky stage fails attempt 1" in messages[0], messages[0]
    assert "RuntimeError: flaky stage fails attempt 2" in messages[1], messages[1]
    assert not (cluster.directory / "exchange" / job_id).exists(), "exchange data left behind"


def test_flaky_pyspark_stage_with_too_few_attempts_fails_with_the_user_error(
    cluster: LocalCluster, client: ClusterClient, tmp_path: Path
) -> None:
    out, markers = tmp_path / "out", tmp_path / "markers"
    config = {**FIXED_DELAY, "restart-strategy.fixed-delay.attempts": "1"}
    pipeline = flaky_pipeline("flaky-fail", out, markers, config)
    job_id = client.submit(pipeline.build_job_graph())
    result = client.wait(job_id, timeout=JOB_TIMEOUT_S)

    assert result.status == common_pb2.FAILED, common_pb2.JobStatus.Name(result.status)
    message = result.failure.message
    # The last failure's own error, and why it was not restarted again.
    assert "RuntimeError: flaky stage fails attempt 2" in message, message
    assert "fixed-delay" in message, message
    assert result.details.restarts == 1
    assert len(runs(markers)) == 2  # no third attempt
    assert [e.attempt_number for e in result.details.exceptions] == [0, 1]
    # Nothing was published.
    assert not (out / "_SUCCESS").exists()
    assert not list(out.glob("part-*"))
    exchange = cluster.directory / "exchange" / job_id
    eventually(lambda: not exchange.exists(), timeout=60)


def test_failure_rate_restarts_within_the_rate_and_fails_beyond_it(
    client: ClusterClient, spark: Any, tmp_path: Path
) -> None:
    config = {
        "restart-strategy.type": "failure-rate",
        "restart-strategy.failure-rate.max-failures-per-interval": "2",
        "restart-strategy.failure-rate.failure-rate-interval": "1 min",
        "restart-strategy.failure-rate.delay": "100 ms",
    }
    out = tmp_path / "ok"
    job_id = client.submit(
        flaky_pipeline("rate-ok", out, tmp_path / "ok-markers", config, 2).build_job_graph()
    )
    result = client.wait(job_id, timeout=JOB_TIMEOUT_S)
    assert result.status == common_pb2.FINISHED, result.failure.message
    check_output(spark, out, flaky_expected(spark))
    assert result.details.restarts == 2

    markers = tmp_path / "exceeded-markers"
    job_id = client.submit(
        flaky_pipeline("rate-exceeded", tmp_path / "no", markers, config, 3).build_job_graph()
    )
    result = client.wait(job_id, timeout=JOB_TIMEOUT_S)
    assert result.status == common_pb2.FAILED, common_pb2.JobStatus.Name(result.status)
    assert "failure-rate" in result.failure.message, result.failure.message
    assert "flaky stage fails attempt 3" in result.failure.message, result.failure.message
    assert len(runs(markers)) == 3


def test_exponential_delay_waits_longer_before_each_restart(
    client: ClusterClient, spark: Any, tmp_path: Path
) -> None:
    config = {
        "restart-strategy.type": "exponential-delay",
        "restart-strategy.exponential-delay.initial-backoff": "1 s",
        "restart-strategy.exponential-delay.backoff-multiplier": "2.0",
        "restart-strategy.exponential-delay.max-backoff": "10 s",
        "restart-strategy.exponential-delay.jitter-factor": "0",
    }
    out, markers = tmp_path / "out", tmp_path / "markers"
    job_id = client.submit(flaky_pipeline("backoff", out, markers, config).build_job_graph())
    result = client.wait(job_id, timeout=JOB_TIMEOUT_S)
    assert result.status == common_pb2.FINISHED, result.failure.message
    check_output(spark, out, flaky_expected(spark))
    first, second = (e.timestamp for e in result.details.exceptions)
    # 1 s before the second attempt, 2 s before the third (loosely: Spark adds its own time).
    assert second - first >= 1.0, second - first
    assert result.details.ended_at - second >= 2.0, result.details.ended_at - second


def test_a_resource_profile_no_executor_offers_fails_fast_with_a_diagnostic(
    client: ClusterClient, tmp_path: Path
) -> None:
    pipeline = sm.Pipeline("too-big", parallelism=1)
    (
        pipeline.range(10)
        .set_resources(cpu_cores=64, memory_mb=1_000_000)
        .write_parquet(str(tmp_path / "never"))
    )
    started = time.monotonic()
    result = client.wait(client.submit(pipeline.build_job_graph()), timeout=60)
    assert result.status == common_pb2.FAILED, common_pb2.JobStatus.Name(result.status)
    message = result.failure.message
    assert "can never be served" in message, message
    assert "cpu=64" in message and "3 task executors registered" in message, message
    assert time.monotonic() - started < 10.0
    assert not (tmp_path / "never").exists()


# -- a hung task executor (SIGSTOP) in the middle of a multi-stage pipeline --------------------


def _holding(markers: str, release: str) -> Callable[[Any], Any]:
    """Marks each run (``{task executor pid}-{random}``); runs before ``release`` exists wait for
    it, so the first stage is certainly running - on every subtask - while the test hangs an
    executor."""

    def hold(df: Any) -> Any:
        folder = Path(markers)
        folder.mkdir(parents=True, exist_ok=True)
        # This runs in the task executor's pipeline worker, whose parent is the task executor.
        (folder / f"{os.getppid()}-{uuid.uuid4().hex}").touch()
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not Path(release).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        return df

    return hold


def hung_pipeline(out: Path, markers: Path, release: Path) -> sm.Pipeline:
    #   [4] range -> stage-a -> with_column(k) -> partial agg
    #   [2] agg -> write_parquet                     (hash)
    #   [1] commit
    config = {**FIXED_DELAY, "restart-strategy.fixed-delay.attempts": "5"}
    pipeline = sm.Pipeline("te-hang", parallelism=2, config=config)
    (
        pipeline.range(ROWS)
        .set_parallelism(4)
        .transform(_holding(str(markers), str(release)), name="stage-a")
        .with_column("k", F.col("id") % KEYS)
        .key_by("k")
        .agg(F.count("*").alias("n"), F.sum("id").alias("total"))
        .write_parquet(str(out))
    )
    return pipeline


def test_hung_task_executor_reruns_only_its_subtasks_and_resumes_harmlessly(
    cluster: LocalCluster, client: ClusterClient, spark: Any, tmp_path: Path
) -> None:
    # Runs last in the module: it hangs (and resumes) one of the task executors.
    from pyspark.sql import functions as PF

    out, markers, release = tmp_path / "out", tmp_path / "markers", tmp_path / "release"
    eventually(lambda: client.cluster_status(timeout=60).resource_manager.slots_free == 6, 120)
    job_id = client.submit(hung_pipeline(out, markers, release).build_job_graph())
    try:
        # Every stage-a subtask is running (inside its function) on some task executor.
        def stage_a_held() -> jobs_pb2.JobDetails | None:
            details = client.status(job_id, timeout=60)
            a = vertex(details, "stage-a")
            running = a.tasks_by_state.get(RUNNING, 0) == 4 and all(a.subtask_task_executors)
            return details if running and len(runs(markers)) == 4 else None

        details = eventually(stage_a_held, timeout=240)
        where = list(vertex(details, "stage-a").subtask_task_executors)
        view = client.cluster_status(timeout=60)
        pids = {te.resource_id: te.info.pid for te in view.resource_manager.task_executors}
        victim = where[0]
        pid = pids[victim]
        lost = [i for i, te in enumerate(where) if te == victim]
        assert len(runs(markers, f"{pid}-")) == len(lost)

        os.kill(pid, signal.SIGSTOP)  # a hang: no socket is closed
        stopped_at = time.monotonic()
        try:
            # Detected within the heartbeat timeout (6 s on local clusters) plus a little.
            eventually(lambda: client.status(job_id, timeout=60).restarts >= len(lost), 15)
            detected = time.monotonic() - stopped_at
            release.touch()  # the held attempts go on (stale ones too, unless cancelled)
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        release.touch()
    print(f"hung task executor detected after {detected:.1f}s")
    assert detected < 15, f"detection took {detected:.1f}s"
    result = client.wait(job_id, timeout=JOB_TIMEOUT_S)

    assert result.status == common_pb2.FINISHED, result.failure.message
    expected = (
        spark.range(ROWS)
        .withColumn("k", PF.col("id") % KEYS)
        .groupBy("k")
        .agg(PF.count("*").alias("n"), PF.sum("id").alias("total"))
    )
    check_output(spark, out, expected)
    details = result.details
    # Only the subtasks that ran on the hung executor ran again (each its own region); the
    # second stage had not started, so it ran once.
    stage_a = vertex(details, "stage-a")
    assert list(stage_a.subtask_attempts) == [1 if i in lost else 0 for i in range(4)]
    for v in details.vertices:
        if v.name != stage_a.name:
            assert list(v.subtask_attempts) == [0] * v.parallelism, v.name
    assert len(runs(markers)) == 4 + len(lost)
    # The resumed executor's old attempts went on after the restarts; whatever they reported
    # was refused as stale: no extra restart, no failure beyond the lost subtasks.
    assert details.restarts == len(lost)
    failed = sorted((e.vertex_name, e.subtask_index, e.task_executor) for e in details.exceptions)
    assert failed == [(stage_a.name, i, victim) for i in lost]
    # The resumed executor is the same process, registers again and its slots come back.
    popen = cluster._popen[pid]
    assert popen.poll() is None, f"the resumed task executor exited with {popen.returncode}"

    def all_slots_back() -> bool:
        status = client.cluster_status(timeout=60).resource_manager
        again = any(te.info.pid == pid for te in status.task_executors)
        return again and status.slots_total == 6 and status.slots_free == 6

    eventually(all_slots_back, timeout=90)
    # Nothing the stale attempts did outlived the job.
    assert not (cluster.directory / "exchange" / job_id).exists(), "exchange data left behind"
