"""sparkmill versus plain PySpark on the same generated text, every case of issue 14 in one run.

    PYTHONPATH=. python benchmarks/bench_vs_pyspark.py       # 50 MB cold; 100 MB, 1 GB, 5 GB warm
    PYTHONPATH=. python benchmarks/bench_vs_pyspark.py --cold-mb 50 --sizes 100,300
    PYTHONPATH=. python benchmarks/bench_vs_pyspark.py --repo /path/to/other/checkout

The job is ``examples/wordcount.py`` (read text, lower/split/explode, count per word, write
Parquet, collect the ten most frequent words); plain PySpark runs the same DataFrame code in one
``local[2]`` session (``PLAIN_WORDCOUNT`` below) that computes the counts once, as a PySpark user
would: it writes them and takes the ten most frequent words from what it wrote (taken from the
unsaved DataFrame, they would make Spark read and count the whole input a second time). Cases:

* **cold** - the whole process, wall clock: ``python plain_wordcount.py`` versus
  ``sparkmill run examples/wordcount.py`` (CLI defaults) on ``--cold-mb``;
* **warm** - per size: plain PySpark with its session started (and a tiny job run) before
  timing, the job run twice, the second timed; sparkmill on a cluster already up
  (``--task-executors`` x ``--slots``, ``spark.session.start: eager``), the second job timed;
* **first job** - the first job on that freshly started cluster, once every task executor
  logged its Spark session up and warm, versus the second;
* **memory** - peak RSS (VmHWM) of a task executor process plus its Spark JVM, versus the plain
  PySpark driver (Python plus its JVM).

``--event-log DIR`` also writes the warm clusters' Spark event logs under ``DIR`` and prints,
per sparkmill job, its Spark jobs, tasks and task attempts (``spark_event_summary.py`` shows
them one by one).

Each side runs in its own process (``--worker``), one after the other, never concurrently; the
1-minute load average during each case is printed with it: on a shared machine, compare runs
with similar load only. ``--repo`` runs sparkmill from another checkout (its directory is put
first on ``PYTHONPATH``), to compare before/after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_wordcount import generate  # noqa: E402
from spark_event_summary import read_jobs  # noqa: E402

PLAIN_WORDCOUNT = """
import os, sys, time
from pyspark.sql import SparkSession, functions as F

def wordcount(spark, source, output):
    counts = (
        spark.read.text(source)
        .select(F.explode(F.split(F.lower("value"), r"\\s+")).alias("word"))
        .where(F.col("word") != "")
        .groupBy("word")
        .agg(F.count("*").alias("count"))
    )
    counts.write.mode("overwrite").parquet(output)
    # The top ten from what was written, as sparkmill takes them from the counts it wrote: on
    # ``counts`` itself Spark would read and count the whole input a second time.
    return spark.read.parquet(output).orderBy(F.desc("count"), "word").limit(10).collect()

def session():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("plain-wordcount")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark

if __name__ == "__main__":
    spark = session()
    rows = wordcount(spark, sys.argv[1], sys.argv[2])
    print("most frequent words:", [(r.word, r["count"]) for r in rows])
    spark.stop()
"""


# -- process tree memory ------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def peak_rss_mb(pid: int) -> float:
    """VmHWM of ``pid`` and all its descendants (the JVM of a PySpark process), in MB."""
    tree = _children()
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(tree.get(current, []))
        try:
            status = Path(f"/proc/{current}/status").read_text()
        except OSError:
            continue
        match = re.search(r"VmHWM:\s+(\d+) kB", status)
        total += int(match.group(1)) if match else 0
    return total / 1024


# -- workers (run in their own process) ---------------------------------------------------------


def worker_plain(args: argparse.Namespace) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(PLAIN_WORDCOUNT, namespace)  # the same code the cold case runs as a script
    spark = namespace["session"]()
    work = Path(args.work)
    namespace["wordcount"](spark, str(work / "warmup.txt"), str(work / "plain-warmup"))
    out: dict[str, Any] = {"warm": {}, "load": {}}
    for size, data in zip(args.sizes, args.data, strict=True):
        took = []
        for attempt in range(2):
            load = os.getloadavg()[0]
            started = time.monotonic()
            namespace["wordcount"](spark, f"{data}/*.txt", str(work / f"plain-{size}-{attempt}"))
            took.append(time.monotonic() - started)
        out["warm"][size] = took
        out["load"][size] = (load + os.getloadavg()[0]) / 2
    out["rss_mb"] = peak_rss_mb(os.getpid())
    spark.stop()
    return out


def _wait_sessions_up(cluster: Any, timeout_s: float) -> None:
    """Until every task executor logged its Spark session up and warm ("Spark session up and
    warm in", or "Spark session up in" from versions that warmed up before using it)."""
    deadline = time.monotonic() + timeout_s
    pending = [p for p in cluster.processes if p.role == "task-executor"]
    while pending and time.monotonic() < deadline:
        pending = [
            p
            for p in pending
            if not re.search(r"Spark session up (and warm )?in", Path(p.log_file).read_text())
        ]
        time.sleep(0.2)
    if pending:
        raise TimeoutError(f"Spark sessions not up after {timeout_s:g}s")


def worker_sparkmill(args: argparse.Namespace) -> dict[str, Any]:
    from sparkmill.cli import load_pipeline
    from sparkmill.client import ClusterClient
    from sparkmill.common.v1 import common_pb2
    from sparkmill.local_cluster import LocalCluster

    example = Path(args.repo) / "examples" / "wordcount.py"
    out: dict[str, Any] = {"jobs": {}, "load": {}, "ready_s": {}, "rss_mb": 0.0, "spark_jobs": {}}
    for size, data in zip(args.sizes, args.data, strict=True):
        # The benchmark's files live in its private temporary directory: the pipeline worker
        # runs as the benchmark's user (a process of its own all the same).
        config = {"spark.session.start": "eager", "taskmanager.pipeline-worker.user": "same-user"}
        if args.event_log:
            events = Path(args.event_log) / f"{size}mb"
            events.mkdir(parents=True, exist_ok=True)
            config["spark.conf.spark.eventLog.enabled"] = "true"
            config["spark.conf.spark.eventLog.dir"] = events.resolve().as_uri()
        cluster = LocalCluster(
            Path(args.work) / f"cluster-{size}",
            task_executors=args.task_executors,
            slots=args.slots,
            extra_config=config,
        )
        started = time.monotonic()
        cluster.start(wait_timeout_s=300)
        try:
            _wait_sessions_up(cluster, 900)  # a busy machine: minutes per JVM
            out["ready_s"][size] = time.monotonic() - started
            took, windows = [], []
            load = os.getloadavg()[0]
            with ClusterClient.from_config_file(cluster.config_path) as client:
                for attempt in range(2):
                    os.environ["WORDCOUNT_INPUT"] = f"{data}/*.txt"
                    os.environ["WORDCOUNT_OUTPUT"] = str(Path(args.work) / f"sm-{size}-{attempt}")
                    graph = load_pipeline(example).build_job_graph()
                    job_started, wall_started = time.monotonic(), time.time()
                    result = client.wait(client.submit(graph), timeout=3600)
                    took.append(time.monotonic() - job_started)
                    windows.append((wall_started, time.time()))
                    if result.status != common_pb2.FINISHED:
                        print(cluster.logs()[-5000:], file=sys.stderr)
                        raise RuntimeError(f"sparkmill job failed: {result.failure.message}")
            out["jobs"][size] = took
            out["load"][size] = (load + os.getloadavg()[0]) / 2
            executors = [p.pid for p in cluster.processes if p.role == "task-executor"]
            out["rss_mb"] = max([out["rss_mb"], *(peak_rss_mb(pid) for pid in executors)])
        finally:
            cluster.stop()
        if args.event_log:  # complete once the session stopped
            out["spark_jobs"][size] = event_log_counts(Path(args.event_log) / f"{size}mb", windows)
    return out


# -- the driver ---------------------------------------------------------------------------------


def event_log_counts(directory: Path, windows: list[tuple[float, float]]) -> list[str]:
    """Spark jobs, tasks and task attempts (job groups) of each sparkmill job, told apart by
    the wall-clock window (epoch seconds) each ran in; the session's warm-up is left out."""
    jobs = [j for log in directory.iterdir() for j in read_jobs(str(log)).values()]
    lines = []
    for number, (begin, finish) in enumerate(windows, 1):
        run = [j for j in jobs if j["group"] != "-" and begin * 1000 <= j["start"] <= finish * 1000]
        per_attempt: dict[str, int] = {}
        for j in run:
            per_attempt[j["group"]] = per_attempt.get(j["group"], 0) + 1
        tasks = sum(j["tasks"] for j in run)
        most = max(per_attempt.values(), default=0)
        lines.append(
            f"job {number}: {len(run)} Spark jobs, {tasks} Spark tasks, {len(per_attempt)} task "
            f"attempts (at most {most} Spark jobs in one)"
        )
    return lines


def _env(repo: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    load = os.getloadavg()[0]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-5000:], sep="\n", file=sys.stderr)
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode})")
    return took, (load + os.getloadavg()[0]) / 2


def _worker(kind: str, args: argparse.Namespace, sizes: list[int], data: list[Path]) -> Any:
    command = [
        sys.executable,
        __file__,
        "--worker",
        kind,
        "--repo",
        str(args.repo),
        "--work",
        str(args.work),
        "--task-executors",
        str(args.task_executors),
        "--slots",
        str(args.slots),
        "--sizes",
        ",".join(map(str, sizes)),
        "--data",
        ",".join(map(str, data)),
    ]
    if args.event_log:
        command += ["--event-log", str(args.event_log)]
    done = subprocess.run(command, env=_env(args.repo), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stderr[-5000:], file=sys.stderr)
        raise RuntimeError(f"the {kind} worker failed ({done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(case: str, plain: float | None, ours: float, load: float, note: str = "") -> str:
    base = f"{plain:7.1f} s" if plain is not None else "      —  "
    ratio = f"{ours / plain:5.2f}x" if plain else "   —  "
    return f"| {case:<34} | {base} | {ours:7.1f} s | {ratio} | {load:4.1f} | {note}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold-mb", type=int, default=50, help="0 skips the cold case")
    parser.add_argument(
        "--sizes", default="100,1024,5120", help="MB per warm case (comma-separated)"
    )
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "sparkmill-bench")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the sparkmill checkout to run")
    parser.add_argument("--task-executors", type=int, default=1, help="warm cluster")
    parser.add_argument("--slots", type=int, default=2, help="warm cluster")
    parser.add_argument("--repeat", type=int, default=1, help="cold runs (median reported)")
    parser.add_argument("--event-log", type=Path, help="write the warm clusters' event logs here")
    parser.add_argument("--worker", choices=("plain", "sparkmill"), help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.repo = args.repo.resolve()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.worker:
        args.sizes, args.data = sizes, (args.data or "").split(",")
        result = worker_plain(args) if args.worker == "plain" else worker_sparkmill(args)
        print(json.dumps(result))
        return 0

    data = {mb: generate(args.dir, mb) for mb in sorted({*sizes, args.cold_mb} - {0})}
    args.work = args.dir / "work"
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    (args.work / "warmup.txt").write_text("warm up the spark session\n")
    script = args.work / "plain_wordcount.py"
    script.write_text(PLAIN_WORDCOUNT)
    env = _env(args.repo)
    rows: list[str] = []

    def report(row: str) -> None:  # each case as soon as it is measured (runs are long)
        rows.append(row)
        print(row, flush=True)

    if args.cold_mb:
        source = f"{data[args.cold_mb]}/*.txt"
        plain_runs, ours_runs, loads = [], [], []
        for _ in range(args.repeat):
            took, load = _timed(
                [sys.executable, str(script), source, str(args.work / "plain-cold")], env
            )
            plain_runs.append(took)
            loads.append(load)
            cold_env = {**env, "WORDCOUNT_INPUT": source}
            cold_env["WORDCOUNT_OUTPUT"] = str(args.work / "sm-cold")
            sparkmill = str(Path(sys.executable).parent / "sparkmill")
            run = [sparkmill, "run", str(args.repo / "examples" / "wordcount.py")]
            took, load = _timed(run, cold_env)
            ours_runs.append(took)
            loads.append(load)
        report(
            _row(
                f"cold, whole process, {args.cold_mb} MB",
                statistics.median(plain_runs),
                statistics.median(ours_runs),
                statistics.mean(loads),
                f"plain {plain_runs}, sparkmill {ours_runs}" if args.repeat > 1 else "",
            )
        )
    if sizes:
        paths = [data[mb] for mb in sizes]
        plain = _worker("plain", args, sizes, paths)
        ours = _worker("sparkmill", args, sizes, paths)
        for mb in sizes:
            key = str(mb)
            first, second = ours["jobs"][key]
            load = (plain["load"][key] + ours["load"][key]) / 2
            report(_row(f"warm, {mb} MB (second job)", plain["warm"][key][1], second, load))
        for mb in sizes:
            key = str(mb)
            first, second = ours["jobs"][key]
            report(
                _row(
                    f"first job vs second, {mb} MB",
                    second,
                    first,
                    ours["load"][key],
                    f"cluster + sessions up in {ours['ready_s'][key]:.1f} s",
                )
            )
        report(
            f"| peak RSS: task executor + JVM vs plain driver + JVM | {plain['rss_mb']:.0f} MB | "
            f"{ours['rss_mb']:.0f} MB | {ours['rss_mb'] - plain['rss_mb']:+.0f} MB |"
        )
        for mb in sizes:
            for line in ours["spark_jobs"].get(str(mb), []):
                print(f"{mb} MB, Spark event log, {line}")
    print(f"sparkmill from {args.repo}; warm cluster {args.task_executors} x {args.slots} slots")
    print("| case | plain PySpark | sparkmill | ratio | load 1m | note")
    print("| --- | --- | --- | --- | --- | ---")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
