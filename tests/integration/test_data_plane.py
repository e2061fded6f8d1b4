"""The data plane end to end: pipelines run by a real local cluster, checked row for row
against the same computation done directly in one PySpark session.

One cluster (2 task executors x 2 slots, each with a local[1] Spark session started eagerly)
serves every test of the module; the data is tiny, so the run time is dominated by the Spark
sessions' start and per-task overhead.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sparkmill as sm
from sparkmill import functions as F
from sparkmill.client import ClusterClient
from sparkmill.common.v1 import common_pb2
from sparkmill.local_cluster import LocalCluster
from tests.integration.conftest import WORKER_AS_TEST_USER

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

JOB_TIMEOUT_S = 300.0


class DataCluster:
    def __init__(self, cluster: LocalCluster, client: ClusterClient) -> None:
        self.cluster = cluster
        self.client = client

    @property
    def exchange_dir(self) -> Path:
        return self.cluster.directory / "exchange"

    def run(self, pipeline: sm.Pipeline, expect: int = common_pb2.FINISHED) -> Any:
        graph = pipeline.build_job_graph()
        job_id = self.client.submit(graph)
        result = self.client.wait(job_id, timeout=JOB_TIMEOUT_S)
        assert result.status == expect, (
            f"job {graph.name} ended {common_pb2.JobStatus.Name(result.status)}: "
            f"{result.failure.message}"
        )
        return result


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataCluster]:
    local = LocalCluster(
        tmp_path_factory.mktemp("data-plane"),
        task_executors=2,
        slots=2,
        extra_config={
            "spark.session.start": "eager",
            "spark.master": "local[1]",
            **WORKER_AS_TEST_USER,
        },
    )
    try:
        local.start(wait_timeout_s=120)
    except Exception:
        print(local.logs())
        local.stop()
        raise
    client = ClusterClient.from_config_file(local.config_path)
    yield DataCluster(local, client)
    client.close()
    local.stop()


def rows(df: Any) -> list[tuple[Any, ...]]:
    """All rows as tuples, in a stable order (None sorts first)."""
    return sorted((tuple(r) for r in df.collect()), key=_sort_key)


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is not None, v if v is not None else 0) for v in row)


def collected(pipeline: sm.Pipeline, result: Any, name: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in pipeline.collected(result)[name]), key=_sort_key)


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


# -- results ----------------------------------------------------------------------------------


def test_wordcount_with_unicode_matches_pyspark(
    cluster: DataCluster, spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql import functions as PF

    write_lines(tmp_path / "in/a.txt", ["hello world", "hello  spark ", "", "naïve café"])
    write_lines(tmp_path / "in/b.txt", ["東京 東京 données", "Straße straße STRASSE", "hello"])
    write_lines(tmp_path / "in/c.txt", ["🙂 🙂 world"])
    (tmp_path / "in/_ignored.txt").write_text("hidden files are not read\n")
    out = tmp_path / "out"

    pipeline = sm.Pipeline("wordcount", parallelism=3)
    (
        pipeline.read_text(str(tmp_path / "in"))
        .select(F.explode(F.split("value", r"\s+")).alias("word"))
        .where(F.col("word") != "")
        .key_by("word")
        .agg(F.count("*").alias("count"))
        .write_parquet(str(out))
    )
    result = cluster.run(pipeline)

    expected = (
        spark.read.text([str(tmp_path / f"in/{n}.txt") for n in "abc"])
        .select(PF.explode(PF.split("value", r"\s+")).alias("word"))
        .where(PF.col("word") != "")
        .groupBy("word")
        .agg(PF.count("*").alias("count"))
    )
    assert rows(spark.read.parquet(str(out))) == rows(expected)
    assert ("東京", 2) in rows(expected)
    names = sorted(p.name for p in out.iterdir())
    assert "_SUCCESS" in names and "_temporary" not in names
    assert all(n == "_SUCCESS" or n.startswith("part-000") for n in names)
    assert not (cluster.exchange_dir / result.job_id).exists(), "exchange data left behind"


def test_join_and_aggregation_match_pyspark(
    cluster: DataCluster, spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql import functions as PF

    write_lines(
        tmp_path / "orders/1.csv",
        ["order_id,customer_id,product,quantity"]
        + [f"{i},{i % 7},{['a', 'b', 'c'][i % 3]},{i % 5 + 1}" for i in range(0, 60, 2)],
    )
    write_lines(
        tmp_path / "orders/2.csv",
        ["order_id,customer_id,product,quantity"]
        + [f"{i},{i % 9},{['a', 'b'][i % 2]},{i % 4}" for i in range(1, 60, 2)],
    )
    write_lines(
        tmp_path / "customers.csv",
        ["customer_id,country"] + [f"{c},{['DE', 'FR', 'JP'][c % 3]}" for c in range(8)],
    )
    prices = [("a", 1.5), ("b", 2.0), ("c", 10.0)]
    orders_schema = "order_id BIGINT, customer_id INT, product STRING, quantity INT"
    customers_schema = "customer_id BIGINT, country STRING"  # a different key type on purpose

    pipeline = sm.Pipeline("sales", parallelism=3)
    orders = pipeline.read_csv(str(tmp_path / "orders/*.csv"), schema=orders_schema)
    customers = pipeline.read_csv(
        str(tmp_path / "customers.csv"), schema=customers_schema
    ).set_parallelism(1)
    price_list = pipeline.from_rows(prices, ["product", "price"]).set_parallelism(1)
    (
        orders.join(customers, on="customer_id")
        .join(price_list.broadcast(), on="product")
        .with_column("revenue", F.col("quantity") * F.col("price"))
        .key_by("country")
        .agg(
            F.sum("revenue").alias("revenue"),
            F.count("*").alias("orders"),
            F.max("quantity").alias("largest"),
        )
        .set_parallelism(2)
        .write_parquet(str(tmp_path / "report"))
    )
    cluster.run(pipeline)

    ref_orders = spark.read.csv(str(tmp_path / "orders/*.csv"), header=True, schema=orders_schema)
    ref_customers = spark.read.csv(
        str(tmp_path / "customers.csv"), header=True, schema=customers_schema
    )
    expected = (
        ref_orders.join(ref_customers, on="customer_id")
        .join(spark.createDataFrame(prices, ["product", "price"]), on="product")
        .withColumn("revenue", PF.col("quantity") * PF.col("price"))
        .groupBy("country")
        .agg(
            PF.sum("revenue").alias("revenue"),
            PF.count("*").alias("orders"),
            PF.max("quantity").alias("largest"),
        )
    )
    actual = spark.read.parquet(str(tmp_path / "report"))
    assert [(f.name, f.dataType) for f in actual.schema] == [
        (f.name, f.dataType) for f in expected.schema
    ]
    assert rows(actual) == rows(expected)


def test_null_and_skewed_keys_match_pyspark(cluster: DataCluster, spark: Any) -> None:
    from pyspark.sql import functions as PF

    left = [(None, 1), ("a", 2), (None, 3), ("b", 4), ("a", 5), ("c", None)]
    right = [(None, "x"), ("a", "y"), ("b", "z"), ("b", "zz")]
    skew_key = F.when(F.col("id") % 10 < 8, F.lit(0)).otherwise(F.col("id") % 50)

    pipeline = sm.Pipeline("keys", parallelism=3)
    lhs = pipeline.from_rows(left, "k STRING, v INT")
    rhs = pipeline.from_rows(right, "k STRING, w STRING").set_parallelism(2)
    lhs.key_by("k").agg(F.count("*").alias("n"), F.sum("v").alias("total")).collect(name="agg")
    # From one producer subtask the final aggregation merges nothing: a projection.
    (
        pipeline.from_rows(left, "k STRING, v INT")
        .set_parallelism(1)
        .key_by("k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.max("v").alias("top"))
        .collect(name="one producer")
    )
    lhs.join(rhs, on="k", how="left").collect(name="left")
    lhs.join(rhs, on="k", how="inner").collect(name="inner")
    (
        pipeline.range(3000)
        .with_column("key", skew_key)
        .key_by("key")
        .agg(F.count("*").alias("n"), F.min("id").alias("first"))
        .collect(name="skew")
    )
    result = cluster.run(pipeline)

    l_df = spark.createDataFrame(left, "k STRING, v INT")
    r_df = spark.createDataFrame(right, "k STRING, w STRING")
    skew = spark.range(3000).withColumn(
        "key", PF.when(PF.col("id") % 10 < 8, PF.lit(0)).otherwise(PF.col("id") % 50)
    )
    expected = {
        "agg": l_df.groupBy("k").agg(PF.count("*").alias("n"), PF.sum("v").alias("total")),
        "one producer": l_df.groupBy("k").agg(
            PF.count("*").alias("n"), PF.sum("v").alias("total"), PF.max("v").alias("top")
        ),
        "left": l_df.join(r_df, on="k", how="left"),
        "inner": l_df.join(r_df, on="k", how="inner"),
        "skew": skew.groupBy("key").agg(PF.count("*").alias("n"), PF.min("id").alias("first")),
    }
    for name, df in expected.items():
        assert collected(pipeline, result, name) == rows(df), name
    assert (None, 2, 4) in collected(pipeline, result, "agg")
    assert ("c", 1, None, None) in collected(pipeline, result, "one producer")
    assert (0, 2400, 0) in collected(pipeline, result, "skew")


def test_empty_input(cluster: DataCluster, spark: Any, tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("")
    pipeline = sm.Pipeline("empty", parallelism=2)
    counts = (
        pipeline.read_text(str(tmp_path / "empty.txt"))
        .select(F.explode(F.split("value", " ")).alias("word"))
        .key_by("word")
        .agg(F.count("*").alias("count"))
    )
    counts.write_parquet(str(tmp_path / "out"))
    counts.collect(name="rows")
    result = cluster.run(pipeline)
    assert pipeline.collected(result) == {"rows": []}
    written = spark.read.parquet(str(tmp_path / "out"))
    assert written.columns == ["word", "count"] and written.count() == 0
    assert (tmp_path / "out/_SUCCESS").exists()


def test_parallelism_changes_lose_and_duplicate_nothing(cluster: DataCluster) -> None:
    pipeline = sm.Pipeline("rescale", parallelism=3)
    numbers = pipeline.range(500).set_parallelism(3)
    (
        numbers.transform(lambda df: df.withColumn("twice", df.id * 2), name="3 to 7")
        .set_parallelism(7)  # POINTWISE 3 -> 7
        .select("id", "twice")
        .set_parallelism(3)  # POINTWISE 7 -> 3
        .collect(limit=1000, name="pointwise")
    )
    numbers.rebalance().select("id").set_parallelism(4).collect(limit=1000, name="rebalanced")
    result = cluster.run(pipeline)
    assert collected(pipeline, result, "pointwise") == [(i, 2 * i) for i in range(500)]
    assert collected(pipeline, result, "rebalanced") == [(i,) for i in range(500)]


def test_an_ordered_result_keeps_its_order_in_every_output(
    cluster: DataCluster, spark: Any, tmp_path: Path
) -> None:
    # Two outputs of one subtask from a sorted result: written from a persisted copy, never
    # from files read back (which come in no order).
    pipeline = sm.Pipeline("ordered-outputs", parallelism=1)
    top = pipeline.range(200).transform(
        lambda df: df.orderBy(df.id.desc()).limit(50).coalesce(1), name="top 50"
    )
    top.write_csv(str(tmp_path / "top"))
    top.collect(limit=100, name="top")
    result = cluster.run(pipeline)
    assert [tuple(r) for r in pipeline.collected(result)["top"]] == [
        (i,) for i in range(199, 149, -1)
    ]
    assert rows(spark.read.csv(str(tmp_path / "top"), schema="id LONG", header=True)) == [
        (i,) for i in range(150, 200)
    ]


def test_further_outputs_come_from_the_files_of_the_first(spark: Any, tmp_path: Path) -> None:
    from sparkmill.common.exchange.layout import SCHEMA_FILE
    from sparkmill.common.pipeline import plan as S
    from sparkmill.services.taskexecutor.spark import exchange, sources
    from sparkmill.services.taskexecutor.spark.runner import has_order

    df = spark.createDataFrame(
        [(i % 5, f"w{i}", float(i) if i % 3 else None) for i in range(40)],
        "k INT NOT NULL, word STRING, x DOUBLE",
    )
    assert not has_order(df.groupBy("k").count().where("count > 1"))
    assert not has_order(df.orderBy("word").groupBy("k").count())  # the sort is useless
    assert has_order(df.orderBy("word").limit(3).select("k"))  # sorted by a dropped column
    assert has_order(df.sortWithinPartitions("x"))
    output = S.ExchangeOutput("d", S.HASH, ("k",), 3)
    exchange.write_partition(df, output, tmp_path / "hash", 0, 1)
    back = exchange.read_back(spark, tmp_path / "hash", df.schema)
    assert back.columns == df.columns and rows(back) == rows(df)
    # A further exchange output records the subtask's schema, not the nullable one of files.
    exchange.write_partition(back, output, tmp_path / "again", 0, 1, schema=df.schema)
    assert (tmp_path / "again" / SCHEMA_FILE).read_text() == df.schema.json()
    # The schema Spark wrote into a Parquet footer is the one it infers, read without a job.
    first = sorted((tmp_path / "hash").rglob("*.parquet"))[0]
    inferred = spark.read.parquet(str(first)).schema
    assert sources.spark_parquet_schema(spark, str(first)) == inferred
    (tmp_path / "plain.parquet").write_bytes(b"not parquet")
    assert sources.spark_parquet_schema(spark, str(tmp_path / "plain.parquet")) is None


# -- failures ---------------------------------------------------------------------------------


def _explode_on_13(df: Any) -> Any:
    from pyspark.sql import functions as PF

    def check(value: int) -> int:
        if value == 13:
            raise ValueError(f"boom: bad record {value}")
        return value

    return df.select(PF.udf(check, "long")("id").alias("id"))


def test_a_failing_user_function_fails_the_job_with_its_error(cluster: DataCluster) -> None:
    pipeline = sm.Pipeline("failing-udf", parallelism=2)
    pipeline.range(40).transform(_explode_on_13, name="validate").collect()
    result = cluster.run(pipeline, expect=common_pb2.FAILED)
    assert "ValueError: boom: bad record 13" in result.failure.message
    first = result.details.exceptions[0].error
    assert first.message.splitlines()[0].endswith("ValueError: boom: bad record 13"), first.message
    assert "\tat org.apache" not in first.message

    columns = sm.Pipeline("unknown-column", parallelism=1)
    columns.range(3).where(F.col("nope") > 1).collect()
    result = cluster.run(columns, expect=common_pb2.FAILED)
    message = result.details.exceptions[0].error.message
    assert "operator 'where'" in message and "`nope`" in message, message
    assert "UNRESOLVED_COLUMN" in message and "'Project" not in message, message


def _spark_cancel_warnings(cluster: DataCluster) -> int:
    logs = cluster.cluster.log_dir.glob("*.log")
    return sum(p.read_text(errors="replace").count("Failed to cancel job group") for p in logs)


def _submit_and_await(cluster: DataCluster, pipeline: sm.Pipeline, marker: Path, what: str) -> str:
    """Submit ``pipeline``; its job id once ``marker`` exists (``what`` writes it)."""
    job_id = cluster.client.submit(pipeline.build_job_graph())
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not marker.exists():
        assert time.monotonic() < deadline, f"{what} never started"
        time.sleep(0.1)
    return job_id


def test_cancelling_an_attempt_between_its_spark_jobs_logs_no_warning_per_retry(
    cluster: DataCluster, tmp_path: Path
) -> None:
    # The attempt's own Python code runs (a transform that waits, on the driver): no Spark job
    # is there to cancel. The task executor retries the cancellation until the attempt ends,
    # in case a Spark job starts meanwhile, and must not make Spark warn at every retry.
    started = tmp_path / "started"

    def wait_on_the_driver(df: Any) -> Any:
        started.touch()
        time.sleep(3.0)  # six retries of the cancellation
        return df

    before = _spark_cancel_warnings(cluster)
    pipeline = sm.Pipeline("waits-on-the-driver", parallelism=1)
    pipeline.range(10).transform(wait_on_the_driver, name="wait").collect()
    job_id = _submit_and_await(cluster, pipeline, started, "the transform")
    cluster.client.cancel(job_id)
    result = cluster.client.wait(job_id, timeout=60)
    assert result.status == common_pb2.CANCELED
    time.sleep(1.0)  # the attempt ended with the transform (CANCELED came after); Spark's log
    assert _spark_cancel_warnings(cluster) == before


def test_cancel_stops_the_running_spark_job(cluster: DataCluster, tmp_path: Path) -> None:
    heartbeat = tmp_path / "heartbeat"

    def slow(df: Any) -> Any:
        from pyspark.sql import functions as PF

        def tick(value: int) -> int:
            heartbeat.write_text(f"{value} {time.time()}")
            time.sleep(0.3)
            return value

        return df.repartition(1).select(PF.udf(tick, "long")("id").alias("id"))

    pipeline = sm.Pipeline("long-running", parallelism=1)
    pipeline.range(100_000).transform(slow, name="slow").collect()
    job_id = _submit_and_await(cluster, pipeline, heartbeat, "the Spark job")
    time.sleep(1.0)
    cancelled_at = time.monotonic()
    cluster.client.cancel(job_id)
    result = cluster.client.wait(job_id, timeout=60)
    took = time.monotonic() - cancelled_at
    assert result.status == common_pb2.CANCELED
    assert took < 15, f"cancelling took {took:.1f}s"
    # The Spark job itself stopped: the UDF stops ticking (a Python worker gets up to
    # spark.python.task.killTimeout, 2 s, to die after its Spark task was killed).
    last, stable_since = heartbeat.read_text(), time.monotonic()
    while time.monotonic() - stable_since < 2.0:
        assert time.monotonic() - cancelled_at < 15, "the Spark job kept running after the cancel"
        time.sleep(0.1)
        current = heartbeat.read_text()
        if current != last:
            last, stable_since = current, time.monotonic()


def test_automatic_parallelism_join_and_aggregation_match_pyspark(
    cluster: DataCluster, spark: Any, tmp_path: Path
) -> None:
    """No parallelism anywhere: the JobMaster decides from the files' sizes (scaled down by
    the job's own avg-data-volume-per-task), and the result is exact."""
    from pyspark.sql import functions as PF

    for part in range(2):
        write_lines(
            tmp_path / f"orders/{part}.csv",
            ["order_id,customer_id,quantity"]
            + [f"{i},{i % 11},{i % 5 + 1}" for i in range(part, 12_000, 2)],
        )
    write_lines(
        tmp_path / "customers.csv",
        ["customer_id,country"] + [f"{c},{['DE', 'FR', 'JP'][c % 3]}" for c in range(11)],
    )
    orders_bytes = sum(p.stat().st_size for p in (tmp_path / "orders").iterdir())
    orders_schema = "order_id BIGINT, customer_id BIGINT, quantity INT"
    customers_schema = "customer_id BIGINT, country STRING"
    auto = "execution.batch.adaptive.auto-parallelism."
    pipeline = sm.Pipeline(
        "auto-sales",
        config={auto + "avg-data-volume-per-task": "32kb", auto + "max-parallelism": 3},
    )
    orders = pipeline.read_csv(str(tmp_path / "orders"), schema=orders_schema)
    customers = pipeline.read_csv(str(tmp_path / "customers.csv"), schema=customers_schema)
    (
        orders.join(customers, on="customer_id")
        .key_by("country")
        .agg(F.sum("quantity").alias("quantity"), F.count("*").alias("orders"))
        .write_parquet(str(tmp_path / "report"))
    )
    graph = pipeline.build_job_graph()
    assert [v.is_auto for v in graph.vertices] == [True, True, True, True, False]
    job_id = cluster.client.submit(graph)
    result = cluster.client.wait(job_id, timeout=JOB_TIMEOUT_S)
    assert result.status == common_pb2.FINISHED, result.failure.message

    details = cluster.client.status(job_id)
    decided = {v.name: (v.parallelism, v.parallelism_decision) for v in details.vertices}
    assert orders_bytes > 3 * 32 * 1024  # so the bound, not the size, limits the orders
    assert decided["read_csv"] == (
        3,
        f"auto: {orders_bytes / 1024:.1f} KiB input, 32.0 KiB per subtask",
    )
    assert decided["read_csv #2"][0] == 1  # 11 customers
    # Decided once their inputs had finished, from the bytes those wrote, and never more than
    # the 3 sub-partitions written for them; the final aggregation reads a few partial sums.
    for name in ("join -> partial agg", "agg -> write_parquet"):
        parallelism, why = decided[name]
        assert 1 <= parallelism <= 3 and "written by its inputs, 32.0 KiB per subtask" in why
    assert decided["agg -> write_parquet"][0] == 1
    assert decided["commit"] == (1, "")

    ref_orders = spark.read.csv(str(tmp_path / "orders"), header=True, schema=orders_schema)
    ref_customers = spark.read.csv(
        str(tmp_path / "customers.csv"), header=True, schema=customers_schema
    )
    expected = (
        ref_orders.join(ref_customers, on="customer_id")
        .groupBy("country")
        .agg(PF.sum("quantity").alias("quantity"), PF.count("*").alias("orders"))
    )
    assert rows(spark.read.parquet(str(tmp_path / "report"))) == rows(expected)


def test_a_speculative_attempt_outruns_a_held_subtask_and_one_output_is_committed(
    cluster: DataCluster, spark: Any, tmp_path: Path
) -> None:
    """Speculative execution with real Spark: the first sink subtask to start holds on its
    task executor's driver until the test releases it; the other three finish, the JobMaster
    finds it slow, blocks its task executor and runs a speculative attempt on the other one,
    which finishes first. The held attempt is cancelled; the output is every row once."""
    markers, release, out = tmp_path / "markers", tmp_path / "release", tmp_path / "out"
    markers.mkdir()

    def hold_the_first(df: Any) -> Any:
        import os

        (markers / f"run-{os.getpid()}-{time.monotonic_ns()}").touch()
        try:
            os.close(os.open(markers / "held", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return df  # not the first run: no wait
        deadline = time.monotonic() + 120
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return df

    pipeline = sm.Pipeline(
        "speculative-sink",
        parallelism=4,
        config={
            "execution.batch.speculative.enabled": "true",
            "slow-task-detector.check-interval": "100 ms",
            "slow-task-detector.execution-time.baseline-lower-bound": "1 s",
            "execution.batch.speculative.block-slow-node-duration": "1 min",
        },
    )
    pipeline.range(4000).transform(hold_the_first, name="hold").write_parquet(str(out))
    job_id = cluster.client.submit(pipeline.build_job_graph())
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while True:
            details = cluster.client.status(job_id)
            sink = next(v for v in details.vertices if v.name.endswith("write_parquet"))
            if sink.speculative_wins or details.status != common_pb2.RUNNING:
                break
            assert time.monotonic() < deadline, "no speculative attempt won"
            time.sleep(0.2)
        result = cluster.client.wait(job_id, timeout=JOB_TIMEOUT_S)
    finally:
        release.touch()
    assert result.status == common_pb2.FINISHED, result.failure.message
    details = cluster.client.status(job_id)
    sink = next(v for v in details.vertices if v.name.endswith("write_parquet"))
    assert (sink.speculative_attempts, sink.speculative_wins) == (1, 1)
    assert max(sink.subtask_attempts) == 1  # the winner is the subtask's attempt
    assert len(details.blocked_task_executors) == 1
    held_on = details.blocked_task_executors[0].resource_id
    winner = list(sink.subtask_attempts).index(1)
    assert sink.subtask_task_executors[winner] != held_on
    assert sink.records_out == 4000  # the loser's work is not counted
    assert len(list(markers.glob("run-*"))) == 5  # four subtasks and one speculative attempt
    # Exactly one attempt's output per subtask: every row once.
    ids = [r[0] for r in spark.read.parquet(str(out)).collect()]
    assert sorted(ids) == list(range(4000))
    assert not (out / "_temporary").exists()


ORDERS_SCHEMA = "order_id BIGINT, customer_id BIGINT, quantity INT"
CUSTOMERS_SCHEMA = "customer_id BIGINT, country STRING"


def _orders_and_customers(directory: Path, files: int, customers: int) -> tuple[Path, Path]:
    """30,000 orders in ``files`` CSV files, 80 % of them of customer 0, the others of
    customers 0..``customers``-1; 37 customers."""
    orders = directory / "orders"
    per_file = 30_000 // files
    for part in range(files):
        write_lines(
            orders / f"part-{part}.csv",
            ["order_id,customer_id,quantity"]
            + [
                f"{i},{0 if i % 10 < 8 else i % customers},{i % 5 + 1}"
                for i in range(part * per_file, (part + 1) * per_file)
            ],
        )
    write_lines(
        directory / "customers.csv",
        ["customer_id,country"] + [f"{c},{['DE', 'FR', 'JP'][c % 3]}" for c in range(37)],
    )
    return orders, directory / "customers.csv"


def _join_pipeline(
    name: str, orders: Path, customers: Path, how: str, output: Path, config: dict[str, Any]
) -> sm.Pipeline:
    pipeline = sm.Pipeline(name, config=config)
    left = pipeline.read_csv(str(orders), schema=ORDERS_SCHEMA)
    right = pipeline.read_csv(str(customers), schema=CUSTOMERS_SCHEMA)
    left.join(right, on="customer_id", how=how).select("order_id", "country").write_parquet(
        str(output)
    )
    return pipeline


def _joined_by_pyspark(spark: Any, orders: Path, customers: Path, how: str) -> Any:
    return (
        spark.read.csv(str(orders), header=True, schema=ORDERS_SCHEMA)
        .join(
            spark.read.csv(str(customers), header=True, schema=CUSTOMERS_SCHEMA),
            on="customer_id",
            how=how,
        )
        .select("order_id", "country")
    )


def test_a_skewed_join_decided_late_reads_ranges_balanced_by_bytes(
    cluster: DataCluster, spark: Any, tmp_path: Path
) -> None:
    """Most orders belong to one customer: the join's hash exchange puts them in one
    sub-partition. The join, decided once the sources finished, reads ranges balanced by the
    bytes each sub-partition holds, names the hot one, and the result is exact."""
    orders, customers = _orders_and_customers(tmp_path, 1, 37)
    auto = "execution.batch.adaptive.auto-parallelism."
    config = {auto + "avg-data-volume-per-task": "64kb", auto + "max-parallelism": 8}
    output = tmp_path / "joined"
    result = cluster.run(_join_pipeline("skewed-join", orders, customers, "inner", output, config))
    details = cluster.client.status(result.job_id)
    join = next(v for v in details.vertices if v.name.startswith("join"))
    assert 1 < join.parallelism < 8, join.parallelism_decision
    assert "ranges balanced by bytes" in join.parallelism_decision, join.parallelism_decision
    assert "alone holds" in join.parallelism_decision, join.parallelism_decision
    got = rows(spark.read.parquet(str(output)))
    assert got == rows(_joined_by_pyspark(spark, orders, customers, "inner"))
    assert len(got) == 30_000


def test_a_skewed_sub_partition_of_a_left_join_is_split_across_subtasks_and_exact(
    cluster: DataCluster, spark: Any, tmp_path: Path
) -> None:
    """Most orders belong to customer 0, and some to customers that do not exist. The left
    join, decided once the sources finished, reads the hot sub-partition of the orders in
    pieces (each from some of their producers, each with all of that sub-partition's
    customers): every order is joined once, the unmatched ones with nulls, and the decision
    says so."""
    # Six files: six source subtasks write the hot key.
    orders, customers = _orders_and_customers(tmp_path, 6, 41)
    auto = "execution.batch.adaptive.auto-parallelism."
    config = {
        auto + "avg-data-volume-per-task": "16kb",
        auto + "max-parallelism": 8,
        "table.optimizer.skewed-join-optimization.skewed-threshold": "8kb",
    }
    output = tmp_path / "joined"
    result = cluster.run(_join_pipeline("split-join", orders, customers, "left", output, config))
    details = cluster.client.status(result.job_id)
    join = next(v for v in details.vertices if v.name.startswith("join"))
    assert "skewed join: sub-partition" in join.parallelism_decision, join.parallelism_decision
    assert "of input 'read_csv" in join.parallelism_decision, join.parallelism_decision
    got = rows(spark.read.parquet(str(output)))
    assert got == rows(_joined_by_pyspark(spark, orders, customers, "left"))
    assert len(got) == 30_000
    assert sum(1 for _, country in got if country is None) > 0
