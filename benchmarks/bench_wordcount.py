"""Word count through sparkmill versus plain PySpark on the same machine.

    PYTHONPATH=. python benchmarks/bench_wordcount.py            # 1 GB of text
    PYTHONPATH=. python benchmarks/bench_wordcount.py --mb 100

Generates ``--mb`` MB of text once (kept under ``--dir`` for the next run), then

1. sparkmill: starts a local cluster (``--task-executors`` x ``--slots``, each task executor
   with its own ``--spark-master`` session), runs a tiny warm-up job (so every session is up),
   then times the word count job (read text, split, count per word, write Parquet);
2. PySpark: one ``local[*]`` session in this process, a warm-up job, then the same word count.

Both time only the job, not the sessions' start; both outputs are compared (row count). The
cluster is stopped before PySpark runs, so the two never compete for the CPU.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sparkmill as sm  # noqa: E402
from sparkmill import functions as F  # noqa: E402

FILES = 16


def generate(directory: Path, megabytes: int, seed: int = 42) -> Path:
    """``megabytes`` MB of text in FILES files (Zipf-like words); reused when present."""
    target = directory / f"text-{megabytes}mb"
    if (target / "_COMPLETE").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10)))
        for _ in range(50_000)
    ]
    # Cumulative weights once: choices() would sum all 50,000 weights again on every call.
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocabulary))))
    lines = [
        " ".join(rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(4, 16)))
        for _ in range(20_000)
    ]
    block = ("\n".join(lines) + "\n").encode()
    per_file = megabytes * 1024 * 1024 // FILES
    started = time.monotonic()
    for index in range(FILES):
        with open(target / f"part-{index:03d}.txt", "wb") as out:
            written = 0
            while written < per_file:
                offset = rng.randrange(len(block) // 2)
                start = block.index(b"\n", offset) + 1
                chunk = block[start : start + min(len(block) // 2, per_file - written)]
                chunk = chunk[: chunk.rfind(b"\n") + 1] or chunk
                out.write(chunk)
                written += len(chunk)
    (target / "_COMPLETE").touch()
    print(f"generated {megabytes} MB in {time.monotonic() - started:.1f}s: {target}")
    return target


def wordcount_pipeline(source: str, output: str, parallelism: int) -> sm.Pipeline:
    pipeline = sm.Pipeline("bench-wordcount", parallelism=parallelism)
    (
        pipeline.read_text(source)
        .select(F.explode(F.split("value", " ")).alias("word"))
        .where(F.col("word") != "")
        .key_by("word")
        .agg(F.count("*").alias("count"))
        .write_parquet(output, mode="overwrite")
    )
    return pipeline


def run_sparkmill(args: argparse.Namespace, data: Path, work: Path) -> float:
    from sparkmill.client import ClusterClient
    from sparkmill.common.v1 import common_pb2
    from sparkmill.local_cluster import LocalCluster

    parallelism = args.parallelism or args.task_executors * args.slots
    cluster = LocalCluster(
        work / "cluster",
        task_executors=args.task_executors,
        slots=args.slots,
        extra_config={
            "spark.session.start": "eager",
            "spark.master": args.spark_master,
            # Its files are in a private temporary directory: the worker runs as its user.
            "taskmanager.pipeline-worker.user": "same-user",
        },
    )
    started = time.monotonic()
    cluster.start(wait_timeout_s=180)
    try:
        with ClusterClient.from_config_file(cluster.config_path) as client:
            tiny = work / "warmup.txt"
            tiny.write_text("warm up the spark sessions\n")
            for attempt, source in enumerate((str(tiny), str(data / "*.txt"))):
                pipeline = wordcount_pipeline(
                    source, str(work / f"sparkmill-out-{attempt}"), parallelism
                )
                job_started = time.monotonic()
                job_id = client.submit(pipeline.build_job_graph())
                result = client.wait(job_id, timeout=3600)
                took = time.monotonic() - job_started
                if result.status != common_pb2.FINISHED:
                    print(cluster.logs()[-5000:])
                    raise RuntimeError(f"sparkmill job failed: {result.failure.message}")
                if attempt == 0:
                    print(f"sparkmill: cluster up and warm in {time.monotonic() - started:.1f}s")
            return took
    finally:
        cluster.stop()


def run_pyspark(args: argparse.Namespace, data: Path, work: Path) -> tuple[float, Any]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as PF

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[*]")
        .appName("bench-wordcount-pyspark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    took = 0.0
    for attempt, source in enumerate((str(work / "warmup.txt"), str(data / "*.txt"))):
        started = time.monotonic()
        (
            spark.read.text(source)
            .select(PF.explode(PF.split("value", " ")).alias("word"))
            .where(PF.col("word") != "")
            .groupBy("word")
            .agg(PF.count("*").alias("count"))
            .write.mode("overwrite")
            .parquet(str(work / f"pyspark-out-{attempt}"))
        )
        took = time.monotonic() - started
    return took, spark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the text (default 1024)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "sparkmill-bench")
    parser.add_argument("--task-executors", type=int, default=2)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--parallelism", type=int, default=0, help="default: all slots")
    parser.add_argument("--spark-master", default="local[2]", help="each task executor's")
    args = parser.parse_args()

    data = generate(args.dir, args.mb)
    work = args.dir / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "warmup.txt").write_text("warm up the spark sessions\n")

    sparkmill_s = run_sparkmill(args, data, work)
    pyspark_s, spark = run_pyspark(args, data, work)
    ours = spark.read.parquet(str(work / "sparkmill-out-1")).count()
    theirs = spark.read.parquet(str(work / "pyspark-out-1")).count()
    spark.stop()
    if ours != theirs:
        print(f"RESULTS DIFFER: sparkmill {ours} words, pyspark {theirs}")
        return 1
    cores = os.cpu_count()
    print(f"data:      {args.mb} MB of text in {FILES} files ({ours} distinct words)")
    print(
        f"sparkmill: {sparkmill_s:.1f}s ({args.task_executors} task executors x {args.slots} "
        f"slots, {args.spark_master} each, parallelism "
        f"{args.parallelism or args.task_executors * args.slots})"
    )
    print(f"pyspark:   {pyspark_s:.1f}s (local[*], {cores} cores)")
    print(f"ratio:     {sparkmill_s / pyspark_s:.2f}x (sparkmill / pyspark)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
