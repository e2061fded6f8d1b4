"""A join with one hot key, its skewed sub-partition split across subtasks or not.

    PYTHONPATH=. python benchmarks/bench_skewed_join.py                 # 2 pairs, defaults
    PYTHONPATH=. python benchmarks/bench_skewed_join.py --rows 2000000 --pairs 1  # a quick look

The job: ``orders`` (``--files`` CSV files of ``--rows`` rows in all; ``--hot`` of them belong
to customer 0, the rest to 1,000 customers of which the last 10 do not exist) left-joined with
``customers`` on the customer id, the order id and the customer's country written as Parquet.
The join's parallelism is left to the JobMaster, so it is decided once both sources finished,
and the hot customer's rows land in one sub-partition of the orders' hash exchange. Two cases,
alternated (``none`` then ``auto``, ``--pairs`` times) on one warm local cluster of
``--task-executors`` x ``--slots`` with ``local[1]`` Spark sessions (one core each: what the
split can gain is spreading the hot key over executors, and on a 2-core machine two one-core
executors stand for two machines):

* **none** - ``table.optimizer.skewed-join-optimization.strategy: none``: the hot sub-partition
  is one subtask's;
* **auto** - the default: the JobMaster splits it across subtasks by producer.

Both cases set ``avg-data-volume-per-task`` and ``skewed-threshold`` (``--share``, 16 MiB) so
that a data set that fits this machine counts as skewed; the defaults (256 MiB) need gigabytes
per hot key. Each output is checked: as many rows as orders, and exactly the orders of unknown
customers without a country. The script prints per job the wall time, the 1-minute load
average at its start and end, the join vertex's decision and its slowest subtask. Time it only
on an otherwise quiet machine (``wait-quiet`` first); the cluster itself loads both cores while
a job runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sparkmill import Pipeline
from sparkmill.local_cluster import LocalCluster

CUSTOMERS = 1000
MISSING = 10  # the last customers of the orders have no row in customers


def load1() -> float:
    return os.getloadavg()[0]


def generate(directory: Path, rows: int, files: int, hot: float) -> tuple[Path, Path, int]:
    """The orders (``files`` CSV files) and the customers; returns them and the number of
    orders whose customer does not exist. Cached under ``directory``."""
    orders = directory / f"orders-{rows}-{files}-{hot:g}"
    customers = directory / "customers.csv"
    missing_file = orders / "_missing"
    if not missing_file.exists():
        orders.mkdir(parents=True, exist_ok=True)
        missing = 0
        per_file = rows // files
        threshold = int(hot * 1000)
        for part in range(files):
            lines = ["order_id,customer_id,quantity"]
            for i in range(part * per_file, (part + 1) * per_file):
                customer = 0 if (i * 7919) % 1000 < threshold else 1 + i % (CUSTOMERS - 1 + MISSING)
                missing += customer >= CUSTOMERS
                lines.append(f"{i},{customer},{i % 5 + 1}")
            (orders / f"part-{part:03d}.csv").write_text("\n".join(lines) + "\n")
        customers.write_text(
            "customer_id,country\n"
            + "".join(f"{c},{('DE', 'FR', 'JP')[c % 3]}\n" for c in range(CUSTOMERS))
        )
        missing_file.write_text(str(missing))
    return orders, customers, int(missing_file.read_text())


def join_job(orders: Path, customers: Path, output: Path, strategy: str, share: str) -> Pipeline:
    pipeline = Pipeline(
        f"skewed-join-{strategy}",
        config={
            "execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task": share,
            "table.optimizer.skewed-join-optimization.skewed-threshold": share,
            "table.optimizer.skewed-join-optimization.strategy": strategy,
        },
    )
    left = pipeline.read_csv(
        str(orders), schema="order_id BIGINT, customer_id BIGINT, quantity INT"
    )
    right = pipeline.read_csv(str(customers), schema="customer_id BIGINT, country STRING")
    left.join(right, on="customer_id", how="left").select("order_id", "country").write_parquet(
        str(output)
    )
    return pipeline


def describe(details: Any) -> list[str]:
    join = next(v for v in details.vertices if v.name.startswith("join"))
    durations = [
        end - start
        for start, end in zip(join.subtask_start_times, join.subtask_end_times, strict=False)
        if start and end
    ]
    slowest = f"{max(durations):.1f}s" if durations else "?"
    return [
        f"join: {join.parallelism} subtasks, slowest {slowest}",
        f"decision: {join.parallelism_decision}",
    ]


def check(outputs: list[Path], rows: int, missing: int) -> list[str]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    builder = SparkSession.builder.master("local[1]").appName("check")
    spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    problems = []
    try:
        for output in outputs:
            df = spark.read.parquet(str(output))
            row = df.agg(
                F.count("*"),
                F.count(F.when(F.col("country").isNull(), 1)),
                F.countDistinct("order_id"),
            ).first()
            total, nulls, distinct = tuple(row) if row is not None else (0, 0, 0)
            if (total, nulls, distinct) != (rows, missing, rows):
                problems.append(
                    f"{output.name}: {total} rows ({distinct} orders), {nulls} without a "
                    f"country; expected {rows} rows, {missing} without"
                )
    finally:
        spark.stop()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=12_000_000, help="orders (default 12M)")
    parser.add_argument("--files", type=int, default=8, help="orders files (default 8)")
    parser.add_argument("--hot", type=float, default=0.8, help="share of customer 0 (0.8)")
    parser.add_argument("--share", default="16mb", help="bytes per subtask and threshold")
    parser.add_argument("--pairs", type=int, default=2, help="none/auto pairs (default 2)")
    parser.add_argument("--task-executors", type=int, default=2)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "sparkmill-bench")
    args = parser.parse_args()

    began = time.monotonic()
    orders, customers, missing = generate(args.dir / "skewed-join", args.rows, args.files, args.hot)
    rows = args.rows // args.files * args.files
    print(
        f"data: {rows} orders in {args.files} files, {missing} of unknown customers "
        f"({time.monotonic() - began:.1f}s)"
    )
    from sparkmill.client import ClusterClient
    from sparkmill.common.v1 import common_pb2

    work = Path(tempfile.mkdtemp(prefix="skewed-join-", dir=args.dir))
    cluster = LocalCluster(
        work / "cluster",
        task_executors=args.task_executors,
        slots=args.slots,
        extra_config={
            "spark.session.start": "eager",
            "spark.master": "local[1]",
            "taskmanager.pipeline-worker.user": "same-user",
        },
    )
    outputs: list[Path] = []
    times: dict[str, list[float]] = {"none": [], "auto": []}
    try:
        cluster.start(wait_timeout_s=300)
        with ClusterClient.from_config_file(cluster.config_path) as client:
            runs = ["none"] + ["none", "auto"] * args.pairs  # the first: warm-up, untimed
            for index, strategy in enumerate(runs):
                output = work / f"out-{index}-{strategy}"
                graph = join_job(orders, customers, output, strategy, args.share).build_job_graph()
                load_start, started = load1(), time.monotonic()
                result = client.wait(client.submit(graph), timeout=3600)
                took = time.monotonic() - started
                if result.status != common_pb2.FINISHED:
                    print(cluster.logs()[-8000:], file=sys.stderr)
                    print(f"job {output.name} failed: {result.failure.message}")
                    return 1
                label = "warm-up, untimed" if index == 0 else strategy
                print(f"{label}: {took:.1f}s, load {load_start:.2f} -> {load1():.2f}")
                for line in describe(result.details):
                    print(f"    {line}")
                sys.stdout.flush()
                outputs.append(output)
                if index:
                    times[strategy].append(took)
    finally:
        cluster.stop()
    problems = check(outputs, rows, missing)
    for problem in problems:
        print(f"WRONG: {problem}")
    if times["none"] and times["auto"]:
        ratios = ", ".join(
            f"{n / a:.2f}x" for n, a in zip(times["none"], times["auto"], strict=True)
        )
        print(f"none/auto per pair: {ratios}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
