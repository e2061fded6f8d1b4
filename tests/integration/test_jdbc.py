"""PostgreSQL as a source and an exactly-once sink, with a real server (issue 28).

A throw-away PostgreSQL server (tests/integration/postgres.py) and one HA cluster (a real
ZooKeeper, a standby JobMaster process, two task executors with real Spark sessions that load
Debian's JDBC driver). Every row written must be in the target exactly once whatever was killed
while the job ran; a job the database refuses fails with a message naming the table and never
the password, which appears in no log either.
"""

from __future__ import annotations

import time
import uuid
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
from sparkmill.services.taskexecutor.spark.jdbc import staging_table
from tests.integration.conftest import (
    SPARK_SESSIONS,
    eventually,
    holding,
    start_local_cluster,
)
from tests.integration.postgres import PostgresServer, postgres_available
from tests.integration.test_pyspark_failover import job_master_of, sigkill

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper package is missing"),
    pytest.mark.skipif(
        not postgres_available(),
        reason="Debian's postgresql and libpostgresql-jdbc-java packages are missing "
        "(scripts/bootstrap.sh --test installs them)",
    ),
]

CUSTOMERS = 40
ORDERS = 3000
PARALLELISM = 4
RESTARTS = {
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.attempts": "5",
    "restart-strategy.fixed-delay.delay": "500 ms",
}


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    server.psql(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer INT, amount BIGINT);"
        f"INSERT INTO orders SELECT g, g % {CUSTOMERS}, g * 3 FROM generate_series(1, {ORDERS}) g"
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer
) -> Iterator[LocalCluster]:
    local = start_local_cluster(
        tmp_path_factory.mktemp("jdbc"),
        task_executors=2,
        slots=2,
        ha=True,
        standbys=1,
        extra_config={**SPARK_SESSIONS},
        wait_timeout_s=180,
    )
    yield local
    # The password is in no service log (Spark's included: the task executors' JVMs log there).
    logs = "".join(p.read_text(errors="replace") for p in local.log_dir.glob("*.log"))
    local.stop()
    assert postgres.password not in logs


@pytest.fixture(scope="module")
def credentials(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer) -> Path:
    return postgres.credentials_file(tmp_path_factory.mktemp("secrets"))


@pytest.fixture(scope="module")
def regions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CSV file: customer -> region."""
    path = tmp_path_factory.mktemp("files") / "regions.csv"
    lines = ["customer,region"] + [f"{c},region-{c % 3}" for c in range(CUSTOMERS)]
    path.write_text("\n".join(lines) + "\n")
    return path


def summary_pipeline(
    postgres: PostgresServer,
    credentials: Path,
    regions: Path,
    target: str,
    *,
    mode: str = "append",
    transform: Any = None,
    config: dict[str, str] | None = None,
) -> sm.Pipeline:
    """orders (PostgreSQL, read in strides of id) joined with regions (CSV) -> one row per order
    with its region -> ``target``."""
    pipeline = sm.Pipeline(f"summary-{target}", parallelism=PARALLELISM, config=config)
    orders = pipeline.read_jdbc(
        postgres.url,
        table="orders",
        credentials_file=str(credentials),
        partition_column="id",
        lower_bound=1,
        upper_bound=ORDERS + 1,
    )
    names = pipeline.read_csv(str(regions), schema="customer INT, region STRING")
    joined = orders.join(names, on="customer").select("id", "customer", "region", "amount")
    if transform is not None:
        joined = joined.transform(transform, name="hold")
    joined.write_jdbc(postgres.url, target, mode=mode, credentials_file=str(credentials))
    return pipeline


def expected() -> Counter[tuple[int, int, str, int]]:
    return Counter(
        (i, i % CUSTOMERS, f"region-{(i % CUSTOMERS) % 3}", i * 3) for i in range(1, ORDERS + 1)
    )


def target_rows(postgres: PostgresServer, table: str) -> Counter[tuple[int, int, str, int]]:
    rows = postgres.psql(f"SELECT id, customer, region, amount FROM {table}")
    return Counter((int(a), int(b), c, int(d)) for a, b, c, d in rows)


def leftovers(postgres: PostgresServer) -> list[str]:
    """Staging tables still in the database."""
    rows = postgres.psql(
        "SELECT table_name FROM information_schema.tables WHERE table_name LIKE '%\\_\\_sm\\_%'"
    )
    return [r[0] for r in rows]


def run(client: ClusterClient, pipeline: sm.Pipeline) -> Any:
    result = client.wait(client.submit(pipeline.build_job_graph()), timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    return result


def test_read_a_table_join_files_and_write_another_table(
    cluster: LocalCluster,
    client: ClusterClient,
    postgres: PostgresServer,
    credentials: Path,
    regions: Path,
) -> None:
    run(client, summary_pipeline(postgres, credentials, regions, "summary"))
    assert target_rows(postgres, "summary") == expected()
    run(client, summary_pipeline(postgres, credentials, regions, "summary"))  # append
    assert target_rows(postgres, "summary") == expected() + expected()
    run(client, summary_pipeline(postgres, credentials, regions, "summary", mode="overwrite"))
    assert target_rows(postgres, "summary") == expected()
    committed = postgres.psql("SELECT COUNT(DISTINCT job_id), COUNT(*) FROM sparkmill_commits")
    assert committed == [["3", str(3 * PARALLELISM)]]
    assert leftovers(postgres) == []


def _slow(df: Any) -> Any:
    time.sleep(3.0)
    return df


def test_task_executor_killed_during_the_write_leaves_every_row_once(
    cluster: LocalCluster,
    client: ClusterClient,
    postgres: PostgresServer,
    credentials: Path,
    regions: Path,
) -> None:
    pipeline = summary_pipeline(
        postgres, credentials, regions, "summary_te", transform=_slow, config=RESTARTS
    )
    job_id = client.submit(pipeline.build_job_graph())

    def writing() -> bool:
        details = client.status(job_id, timeout=60)
        return any(
            v.tasks_by_state.get(common_pb2.EXECUTION_RUNNING, 0) > 0
            for v in details.vertices
            if "write_jdbc" in v.name
        )

    eventually(writing, timeout=300)
    time.sleep(1.0)
    view = client.cluster_status(timeout=60)
    busy = [
        te.info.pid
        for te in view.resource_manager.task_executors
        if any(s.job_id == job_id for s in te.slots)
    ]
    sigkill(cluster, busy[0])
    cluster.add_task_executor()
    result = client.wait(job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert result.details.restarts >= 1
    assert target_rows(postgres, "summary_te") == expected()
    assert leftovers(postgres) == []


def test_job_master_killed_after_some_subtasks_committed_writes_once(
    cluster: LocalCluster,
    client: ClusterClient,
    postgres: PostgresServer,
    credentials: Path,
    regions: Path,
    tmp_path: Path,
) -> None:
    if len(client.cluster_status(timeout=60).job_master_process_infos) < 2:
        cluster.add_process("job-master")
    eventually(
        lambda: len(client.cluster_status(timeout=60).job_master_process_infos) >= 2, timeout=120
    )
    eventually(
        lambda: client.cluster_status(timeout=60).resource_manager.slots_total >= 4, timeout=180
    )
    markers, release = tmp_path / "markers", tmp_path / "release"
    hold = holding(markers, release, held=(2, 3))
    pipeline = summary_pipeline(postgres, credentials, regions, "summary_jm", transform=hold)
    job_id = client.submit(pipeline.build_job_graph())

    def two_committed_two_held() -> bool:
        details = client.status(job_id, timeout=60)
        done = sum(
            v.tasks_by_state.get(common_pb2.EXECUTION_FINISHED, 0)
            for v in details.vertices
            if "write_jdbc" in v.name
        )
        return done == 2 and len(list(markers.glob("held-*"))) == 2

    eventually(two_committed_two_held, timeout=300)
    staged = postgres.psql("SELECT COUNT(*) FROM sparkmill_staged WHERE target = 'summary_jm'")
    assert staged == [["2"]]  # two subtasks committed their attempts
    address, job_master = job_master_of(client, job_id)
    sigkill(cluster, job_master)
    eventually(
        lambda: client.status(job_id, timeout=60).job_master_address not in ("", address),
        timeout=120,
    )
    release.touch()
    result = client.wait(job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, result.failure.message
    time.sleep(3.0)  # the deposed JobMaster's held attempts finish late: they must add nothing
    assert target_rows(postgres, "summary_jm") == expected()
    commits = postgres.psql(
        f"SELECT COUNT(*), SUM(rows_committed) FROM sparkmill_commits WHERE job_id = '{job_id}'"
    )
    assert commits == [[str(PARALLELISM), str(ORDERS)]]


@pytest.mark.parametrize("problem", ["missing table", "wrong password", "unknown database"])
def test_a_refused_job_fails_naming_the_table_without_the_password(
    cluster: LocalCluster,
    client: ClusterClient,
    postgres: PostgresServer,
    tmp_path: Path,
    problem: str,
) -> None:
    wrong = "not-the-password-" + uuid.uuid4().hex[:8]
    credentials = postgres.credentials_file(
        tmp_path, password=wrong if problem == "wrong password" else None
    )
    url = postgres.url
    if problem == "unknown database":
        url = url.rsplit("/", 1)[0] + "/no_such_database"
    table = "no_such_table" if problem == "missing table" else "orders"
    pipeline = sm.Pipeline(f"refused-{problem}", parallelism=2)
    pipeline.read_jdbc(url, table=table, credentials_file=str(credentials)).with_column(
        "x", F.lit(1)
    ).write_jdbc(url, "refused_target", credentials_file=str(credentials))
    result = client.wait(client.submit(pipeline.build_job_graph()), timeout=300)
    assert result.status == common_pb2.FAILED
    message = result.failure.message
    assert f"table {table}" in message, message
    assert postgres.password not in message and wrong not in message, message
    assert result.details.restarts == 0  # no restart can fix it


def test_staging_tables_of_a_cancelled_job_go_with_the_next_commit_to_the_database(
    cluster: LocalCluster,
    client: ClusterClient,
    postgres: PostgresServer,
    credentials: Path,
    regions: Path,
    tmp_path: Path,
) -> None:
    # The source's subtasks stage their rows (and record them) while the job's other vertex,
    # behind an exchange, holds: the job is cancelled with its staging tables written.
    markers, release = tmp_path / "markers", tmp_path / "release"
    pipeline = sm.Pipeline("cancelled-writer", parallelism=2)
    rows = pipeline.range(1000)
    rows.write_jdbc(postgres.url, "cancelled_target", credentials_file=str(credentials))
    (
        rows.key_by("id")
        .agg(F.count("*").alias("n"))
        .transform(holding(markers, release, held=(0, 1)), name="hold")
        .write_json(str(tmp_path / "held-out"))
    )
    job_id = client.submit(pipeline.build_job_graph())

    def staged() -> list[str]:
        return [t for t in leftovers(postgres) if t.startswith("cancelled_target__sm_")]

    def held_with_rows_staged() -> bool:
        try:
            recorded = postgres.psql(
                f"SELECT COUNT(*) FROM sparkmill_staged WHERE job_id = '{job_id}'"
            )
        except RuntimeError:  # no attempt recorded its table yet (nor created the bookkeeping)
            return False
        return recorded == [["2"]] and bool(list(markers.glob("held-*")))

    eventually(held_with_rows_staged, timeout=300)
    assert len(staged()) == 2
    client.cancel(job_id)
    release.touch()  # the hold does not listen for the cancellation
    result = client.wait(job_id, timeout=300)
    assert result.status == common_pb2.CANCELED
    time.sleep(2.0)  # the JobMaster hands the job's tables over after the outcome is recorded
    assert len(staged()) == 2  # nothing of the job's own drops them

    # The next commit to the same database drops them (and the bookkeeping rows).
    run(client, summary_pipeline(postgres, credentials, regions, "after_cancel"))
    assert target_rows(postgres, "after_cancel") == expected()
    assert staged() == []
    recorded = postgres.psql(f"SELECT COUNT(*) FROM sparkmill_staged WHERE job_id = '{job_id}'")
    assert recorded == [["0"]]
    assert postgres.psql("SELECT to_regclass('cancelled_target') IS NULL") == [["t"]]


def test_an_attempt_that_fails_after_staging_its_rows_drops_its_staging_table(
    cluster: LocalCluster,
    client: ClusterClient,
    postgres: PostgresServer,
    credentials: Path,
) -> None:
    # The bookkeeping table of this schema refuses every record (a column it cannot fill): each
    # attempt stages its rows, then fails recording them. Nothing else names such a table (a
    # late attempt whose job has committed and been cleaned up already is one), so the attempt
    # drops it itself, not the next commit to the database.
    postgres.psql(
        "CREATE SCHEMA refusing; CREATE TABLE refusing.sparkmill_staged (job_id VARCHAR(64),"
        " target VARCHAR(512), subtask INTEGER, epoch BIGINT, attempt INTEGER,"
        " staging VARCHAR(512), columns_json TEXT, refused INTEGER NOT NULL)"
    )
    pipeline = sm.Pipeline(
        "fails-after-staging", parallelism=2, config={"restart-strategy.type": "none"}
    )
    pipeline.range(500).write_jdbc(
        postgres.url, "refusing.target", credentials_file=str(credentials)
    )
    result = client.wait(client.submit(pipeline.build_job_graph()), timeout=300)
    assert result.status == common_pb2.FAILED
    assert "recording the staged rows" in result.failure.message, result.failure.message
    assert [t for t in leftovers(postgres) if t.startswith("target__sm_")] == []


def test_a_staging_table_held_by_a_dead_writer_neither_hangs_the_commit_nor_stays(
    cluster: LocalCluster,
    client: ClusterClient,
    postgres: PostgresServer,
    credentials: Path,
    regions: Path,
) -> None:
    # A host that powers off in the middle of an attempt's write leaves that attempt's
    # transaction open at the database, holding its staging table, until the server finds the
    # session dead. The job's commit drops the job's staging tables after moving the rows: it
    # must not wait for that lock (it did, for ever: the job never ended).
    pipeline = sm.Pipeline("outlived-writer", parallelism=2)
    pipeline.range(1000).write_jdbc(postgres.url, "outlived", credentials_file=str(credentials))
    graph = pipeline.build_job_graph()
    dead = staging_table("outlived", graph.job_id, subtask=0, epoch=99, attempt=9)
    postgres.psql(f"CREATE TABLE {dead} (id BIGINT)")
    with postgres.open_transaction(f"INSERT INTO {dead} VALUES (1)"):
        started = time.monotonic()
        result = client.wait(client.submit(graph), timeout=120)
        assert result.status == common_pb2.FINISHED, result.failure.message
        assert time.monotonic() - started < 60
        rows = postgres.psql("SELECT id, COUNT(*) FROM outlived GROUP BY id")
        assert sorted((int(i), int(n)) for i, n in rows) == [(i, 1) for i in range(1000)]
        assert [t for t in leftovers(postgres) if t.startswith("outlived__sm_")] == [dead]
    # The session is gone (here it ends; on a real failure the server's keepalive probes end
    # it): the next commit to the database drops the table.
    run(client, summary_pipeline(postgres, credentials, regions, "after_outlived"))
    assert [t for t in leftovers(postgres) if t.startswith("outlived__sm_")] == []
