"""Appending partitions to a table, exactly once through every failure (issue 28).

One HA cluster (a real ZooKeeper, a standby JobMaster process, two task executors with real
Spark sessions). A "nightly" pipeline appends a day's rows to a Parquet table partitioned by
day; the table must hold every row exactly once whatever was killed while a job wrote it, and
``overwrite`` with ``partition_by`` replaces only the days a job wrote.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sparkmill as sm
from sparkmill import functions as F
from sparkmill.client import ClusterClient
from sparkmill.common.ha.zookeeper.server import zookeeper_available
from sparkmill.common.v1 import common_pb2
from sparkmill.local_cluster import LocalCluster
from tests.integration.conftest import (
    SPARK_SESSIONS,
    eventually,
    holding,
    start_local_cluster,
)
from tests.integration.test_pyspark_failover import job_master_of, sigkill

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper package is missing"),
]

ROWS_PER_DAY = 600
PARALLELISM = 4
RESTARTS = {
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.attempts": "5",
    "restart-strategy.fixed-delay.delay": "500 ms",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_local_cluster(
        tmp_path_factory.mktemp("append"),
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
    time.sleep(3.0)
    return df


def nightly(
    table: Path,
    days: list[int],
    *,
    mode: str = "append",
    value: int = 0,
    transform: Any = None,
    config: dict[str, str] | None = None,
) -> sm.Pipeline:
    """``ROWS_PER_DAY`` rows per day (``id``, ``day``, ``value``) into ``table`` (``days``
    are consecutive)."""
    pipeline = sm.Pipeline(f"nightly-{days}", parallelism=PARALLELISM, config=config)
    rows = (
        pipeline.range(ROWS_PER_DAY * len(days))
        .with_column("day", F.col("id") % len(days) + days[0])
        .with_column("value", F.lit(value))
    )
    if transform is not None:
        rows = rows.transform(transform, name="hold")
    rows.write_parquet(str(table), mode=mode, partition_by=["day"])
    return pipeline


def table_rows(spark: Any, table: Path) -> Counter[tuple[int, int, int]]:
    return Counter(
        (r["id"], r["day"], r["value"]) for r in spark.read.parquet(str(table)).collect()
    )


def expected(days: list[int], value: int = 0) -> Counter[tuple[int, int, int]]:
    n = len(days)
    return Counter((i, days[i % n], value) for i in range(ROWS_PER_DAY * n))


def run(client: ClusterClient, pipeline: sm.Pipeline) -> Any:
    result = client.wait(client.submit(pipeline.build_job_graph()), timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    return result


def test_appended_days_and_a_partition_overwrite(
    cluster: LocalCluster, client: ClusterClient, spark: Any, tmp_path: Path
) -> None:
    table = tmp_path / "events"
    run(client, nightly(table, [1, 2]))
    run(client, nightly(table, [3]))
    assert sorted(p.name for p in table.iterdir() if p.is_dir()) == ["day=1", "day=2", "day=3"]
    assert table_rows(spark, table) == expected([1, 2]) + expected([3])
    # Day 2 again, with new values: days 1 and 3 stay as they were.
    run(client, nightly(table, [2], mode="overwrite", value=7))
    assert table_rows(spark, table) == (
        Counter({k: v for k, v in expected([1, 2]).items() if k[1] == 1})
        + expected([3])
        + expected([2], value=7)
    )
    # sparkmill reads the partitioned table back with its partition column.
    pipeline = sm.Pipeline("read-back", parallelism=2)
    days = pipeline.read_parquet(str(table)).key_by("day").count().collect(name="days")
    result = run(client, pipeline)
    assert sorted((r["day"], r["count"]) for r in days.rows(result)) == [
        (1, ROWS_PER_DAY),
        (2, ROWS_PER_DAY),
        (3, ROWS_PER_DAY),
    ]


def test_task_executor_killed_while_appending_leaves_every_row_once(
    cluster: LocalCluster, client: ClusterClient, spark: Any, tmp_path: Path
) -> None:
    table = tmp_path / "events"
    run(client, nightly(table, [1]))
    job_id = client.submit(
        nightly(table, [2, 3], transform=_slow, config=RESTARTS).build_job_graph()
    )
    eventually(
        lambda: any(
            s.job_id == job_id
            for te in client.cluster_status(timeout=60).resource_manager.task_executors
            for s in te.slots
        ),
        timeout=240,
    )
    time.sleep(1.0)  # inside the slow transform: the attempt has started writing
    view = client.cluster_status(timeout=60)
    victim = next(
        te.info.pid
        for te in view.resource_manager.task_executors
        if any(s.job_id == job_id for s in te.slots)
    )
    sigkill(cluster, victim)
    cluster.add_task_executor()
    result = client.wait(job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert result.details.restarts >= 1
    assert table_rows(spark, table) == expected([1]) + expected([2, 3])
    assert not (table / "_temporary").exists()


def test_job_master_killed_after_some_subtasks_committed_appends_once(
    cluster: LocalCluster, client: ClusterClient, spark: Any, tmp_path: Path
) -> None:
    if len(client.cluster_status(timeout=60).job_master_process_infos) < 2:
        cluster.add_process("job-master")
    eventually(
        lambda: len(client.cluster_status(timeout=60).job_master_process_infos) >= 2, timeout=120
    )
    eventually(
        lambda: client.cluster_status(timeout=60).resource_manager.slots_total >= 4, timeout=180
    )
    table, markers, release = tmp_path / "events", tmp_path / "markers", tmp_path / "release"
    run(client, nightly(table, [1]))
    # Four sink subtasks start at once: the first two to run commit, the next two hold.
    hold = holding(markers, release, held=(2, 3))
    job_id = client.submit(nightly(table, [4, 5], transform=hold).build_job_graph())

    def two_committed_two_held() -> bool:
        details = client.status(job_id, timeout=60)
        done = sum(
            v.tasks_by_state.get(common_pb2.EXECUTION_FINISHED, 0)
            for v in details.vertices
            if "write_parquet" in v.name
        )
        return done == 2 and len(list(markers.glob("held-*"))) == 2

    eventually(two_committed_two_held, timeout=300)
    address, job_master = job_master_of(client, job_id)
    sigkill(cluster, job_master)
    eventually(
        lambda: client.status(job_id, timeout=60).job_master_address not in ("", address),
        timeout=120,
    )
    release.touch()  # the deposed JobMaster's held attempts finish late: they must not count
    result = client.wait(job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    time.sleep(3.0)  # let the released old attempts try to commit, too late
    assert table_rows(spark, table) == expected([1]) + expected([4, 5])
