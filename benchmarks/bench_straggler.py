"""One slow task executor out of three: the job with and without speculative execution.

    PYTHONPATH=. python benchmarks/bench_straggler.py                   # cases a, b and c
    PYTHONPATH=. python benchmarks/bench_straggler.py --cases a,b       # no speculation needed
    PYTHONPATH=. python benchmarks/bench_straggler.py --mb 100 --cases a,b  # a quick check
    PYTHONPATH=. python benchmarks/bench_straggler.py --lower-bound "5 s" \\
        --speculation-conf slow-task-detector.execution-time.baseline-multiplier=2

The straggler benchmark of issue 27. One job, a word count (read text, split on spaces, count
per word, write Parquet) over ``--mb`` MB of generated text (``bench_wordcount.generate``,
cached under ``--dir``), on a local cluster of ``--task-executors`` x ``--slots`` (3 x 2), each
task executor with its Spark session started eagerly (``local[2]``), in three cases:

* **a** - no straggler, speculation off;
* **b** - the first task executor (``task-executor-0``) slowed, speculation off;
* **c** - the same task executor slowed, speculation on (Flink's keys:
  ``execution.batch.speculative.*`` and ``slow-task-detector.*``, given in the cluster's
  configuration, or the job's with ``--speculation-in job``).

Goals: c within 1.3x of a, b at least 2x a, and in every case the exact output with each word
once. The product is not touched: the benchmark itself slows the executor, with a thread that
SIGSTOPs that task executor's Spark JVM (the ``java`` process among its descendants: task
executor -> pipeline worker -> JVM) for ``--stopped`` of every ``--period`` (90 % of 1 s, see
below) and SIGCONTs it for the rest, from just before the timed job is submitted until it
ended; the JVM is always SIGCONTed when the benchmark stops, on errors, Ctrl-C and SIGTERM too
(not on SIGKILL: then ``kill -CONT`` it by hand).

Cases a and b share one cluster, c gets one of its own (speculation is configured when the
cluster starts). Every cluster first runs a tiny job, then one full-size job untimed (the JVMs
have compiled the hot code, the page cache holds the text), then the timed job of each of its
cases, a before b; only the jobs are timed. Each timed job's output must equal a reference
counted once in plain Python from the text files (cached under ``--dir`` next to the text);
the outputs are read back with a PySpark ``local[1]`` session once the clusters are stopped.
The script prints per case the wall time, the 1-minute load average at its start and end, the
CPU seconds each task executor's JVM used during the job, where the subtasks of the slowed
task executor ran and how long they took, and whatever the status API reports about
speculative attempts or blocked executors (nothing yet in versions without them); then the
ratios b/a and c/a against the goals. It exits 1 when an output is wrong and 2 when the
speculation keys are not known to the checkout (case c needs them).

Why these defaults: 1 GB at parallelism 12 takes some tens of seconds undisturbed on a 2-core
machine, each subtask of the source vertex reads about 85 MB and runs several seconds (much
longer than the 1 s duty cycle, so the slowdown averages out within a subtask), and 12 subtasks
in 6 slots are two per slot: every task executor gets work in every vertex, the slowed one holds
a sixth of the source vertex's subtasks at first, and a speculative copy or the subtasks the
slowed executor no longer gets have somewhere to go. Fewer, larger subtasks (6: one wave) make
the slow subtasks the whole tail and leave speculation no time to catch up; many small ones
shrink the straggler's share and add each subtask's fixed cost. The detector's lower bound
(``--lower-bound``, 3 s) is below an undisturbed source subtask, so a slowed one is found
within seconds of the others finishing.

Why the JVM is stopped 90 % of the time and not 80 %: on a machine with fewer cores than the
task executors' Spark threads (here 2 cores for 3 JVMs of 2 threads each) every JVM gets only
its share of the CPU in case a, while in case b the slowed JVM, whenever it runs, also gets
what the other two cannot use. Stopped 80 % of each second, its source subtasks ran only about
2.9x as long as in case a (34 s against 12 s; 1 GB, 2026-11-28); stopped 90 %, 5.9x (63 s
against 10.7 s), the issue's "about 5x". With a core per Spark thread, 80 % would be 5x; the
script prints the slowdown it measured (b's source subtasks on task-executor-0 against a's),
so that ``--stopped`` can be set for another machine. The other two executors run faster
meanwhile (two JVMs on two cores), so the job as a whole loses less than a third of its
capacity, and the load average falls while the JVM is stopped. The cluster itself keeps a
2-core machine's load around 9 to 10 while a job runs: compare runs of similar load only, on
an otherwise quiet machine.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_wordcount import generate  # noqa: E402
from google.protobuf.descriptor import FieldDescriptor  # noqa: E402
from google.protobuf.message import Message  # noqa: E402

from sparkmill import Pipeline  # noqa: E402
from sparkmill import functions as F  # noqa: E402
from sparkmill.local_cluster import LocalCluster, process_tree  # noqa: E402

GOAL_SLOWED = 2.0  # b / a at least
GOAL_SPECULATIVE = 1.3  # c / a at most
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    slowed: bool
    speculation: bool


CASES = (
    Case("a", "no straggler, speculation off", slowed=False, speculation=False),
    Case("b", "task-executor-0 slowed, speculation off", slowed=True, speculation=False),
    Case("c", "task-executor-0 slowed, speculation on", slowed=True, speculation=True),
)


@dataclass
class Outcome:
    case: Case
    seconds: float
    load_start: float
    load_end: float
    output: Path
    notes: list[str] = field(default_factory=list)
    # Durations of the first vertex's subtasks (the source): on task-executor-0, and all.
    source_slowed: list[float] = field(default_factory=list)
    source_all: list[float] = field(default_factory=list)


# -- processes ------------------------------------------------------------------------------


def load1() -> float:
    """The 1-minute load average (/proc/loadavg)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def jvm_pids(executor_pid: int) -> list[int]:
    """The Spark JVM(s) a task executor runs: the ``java`` processes among its descendants."""
    found = []
    for pid in process_tree(executor_pid)[1:]:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                found.append(pid)
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU time of ``pids`` (each process's own threads; children left out)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / CLOCK_TICKS


class DutyCycle:
    """Slows one task executor: SIGSTOPs its Spark JVM for ``stopped_s`` of every ``period_s``.

    The JVM is looked up again every period (a task executor that restarted its session has a
    new one); every process ever stopped is SIGCONTed by :meth:`stop`."""

    def __init__(self, executor_pid: int, period_s: float, stopped_s: float) -> None:
        self.executor_pid = executor_pid
        self.period_s = period_s
        self.stopped_s = stopped_s
        self.stopped_total_s = 0.0
        self.touched: set[int] = set()
        self._started = 0.0
        self._ended = 0.0
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="duty-cycle", daemon=True)

    def start(self) -> list[int]:
        pids = jvm_pids(self.executor_pid)
        if not pids:
            raise RuntimeError(f"no Spark JVM under the task executor (pid {self.executor_pid})")
        self._started = time.monotonic()
        self._thread.start()
        return pids

    @staticmethod
    def _send(pids: list[int], sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _run(self) -> None:
        next_cycle = time.monotonic()
        while True:
            with self._lock:
                if self._done.is_set():
                    return
                pids = jvm_pids(self.executor_pid)
                self.touched.update(pids)
                self._send(pids, signal.SIGSTOP)
                stopped_at = time.monotonic()
            try:
                self._done.wait(self.stopped_s)
            finally:
                with self._lock:
                    self._send(pids, signal.SIGCONT)
                    self.stopped_total_s += time.monotonic() - stopped_at
            next_cycle += self.period_s
            self._done.wait(max(0.0, next_cycle - time.monotonic()))

    def stop(self) -> None:
        """Stop cycling and SIGCONT every process it stopped (idempotent)."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._lock:
            self._send(sorted(self.touched), signal.SIGCONT)
        if self._started and not self._ended:
            self._ended = time.monotonic()

    @property
    def stopped_share(self) -> float:
        elapsed = (self._ended or time.monotonic()) - self._started
        return self.stopped_total_s / elapsed if elapsed > 0 else 0.0


def _terminate(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (e.g. from timeout(1)) unwinds like Ctrl-C: the finally blocks SIGCONT the JVM
    # and stop the clusters.
    raise SystemExit(128 + signum)


# -- the job and its reference --------------------------------------------------------------


def wordcount_job(source: str, output: Path, parallelism: int, config: dict[str, str]) -> Pipeline:
    """The word count of bench_wordcount, with a job configuration."""
    pipeline = Pipeline("bench-straggler", parallelism=parallelism, config=config)
    (
        pipeline.read_text(source)
        .select(F.explode(F.split("value", " ")).alias("word"))
        .where(F.col("word") != "")
        .key_by("word")
        .agg(F.count("*").alias("count"))
        .write_parquet(str(output), mode="overwrite")
    )
    return pipeline


def reference_counts(data: Path) -> dict[str, int]:
    """Each word's count in the text files of ``data``, counted in Python (cached as JSON next
    to ``data``). The generator writes lower-case letters, single spaces and newlines only, so
    splitting on whitespace is splitting each line on " " and dropping empty words; any other
    byte fails the count rather than give a reference of other semantics."""
    cache = data.parent / f"{data.name}.wordcounts.json"
    if cache.exists():
        counts: dict[str, int] = json.loads(cache.read_text())
        return counts
    started = time.monotonic()
    counter: collections.Counter[bytes] = collections.Counter()
    allowed = b"abcdefghijklmnopqrstuvwxyz \n"
    for text in sorted(data.glob("*.txt")):
        with open(text, "rb") as file:
            rest = b""
            while chunk := file.read(16 << 20):
                chunk = rest + chunk
                cut = chunk.rfind(b"\n") + 1
                chunk, rest = chunk[:cut], chunk[cut:]
                if chunk.translate(None, allowed):
                    raise ValueError(f"{text} holds bytes other than [a-z], ' ' and newlines")
                counter.update(chunk.split())
            if rest.translate(None, allowed):
                raise ValueError(f"{text} holds bytes other than [a-z], ' ' and newlines")
            counter.update(rest.split())
    counts = {word.decode(): count for word, count in counter.items()}
    partial = cache.with_suffix(".tmp")
    partial.write_text(json.dumps(counts, sort_keys=True))
    partial.replace(cache)
    print(f"reference counted in {time.monotonic() - started:.1f}s: {len(counts)} words")
    return counts


def check_outputs(outcomes: list[Outcome], reference: dict[str, int]) -> list[str]:
    """What is wrong with each case's output (empty: every output exact, each word once)."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("bench-straggler-check")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    problems = []
    try:
        for outcome in outcomes:
            rows = spark.read.parquet(str(outcome.output)).collect()
            words = collections.Counter(str(row["word"]) for row in rows)
            duplicated = sorted(word for word, seen in words.items() if seen > 1)
            counts = {str(row["word"]): int(row["count"]) for row in rows}
            wrong = sorted(w for w in counts.keys() & reference.keys() if counts[w] != reference[w])
            missing = sorted(reference.keys() - counts.keys())
            extra = sorted(counts.keys() - reference.keys())
            label = f"case {outcome.case.key}"
            if duplicated:
                problems.append(
                    f"{label}: {len(duplicated)} words in more than one row, e.g. "
                    f"{duplicated[:5]} ({len(rows)} rows)"
                )
            if wrong:
                problems.append(
                    f"{label}: {len(wrong)} wrong counts, e.g. "
                    + ", ".join(f"{w} {counts[w]} != {reference[w]}" for w in wrong[:5])
                )
            if missing or extra:
                problems.append(
                    f"{label}: {len(missing)} words missing {missing[:5]}, "
                    f"{len(extra)} unexpected {extra[:5]}"
                )
            if not (duplicated or wrong or missing or extra):
                print(f"case {outcome.case.key}: output exact, {len(rows)} rows, each word once")
    finally:
        spark.stop()
    return problems


# -- what the status API shows ---------------------------------------------------------------

STATUS_WORDS = ("speculat", "blocked", "blocklist")


def status_counts(message: Message) -> dict[str, int]:
    """Every field of ``message`` (recursively) whose name speaks of speculation or blocked
    executors, as numbers summed by field name: a count or a flag as it is, a list by its
    length (or the sum of its numbers). Empty when the status API has no such field."""
    found: dict[str, int] = {}

    def add(name: str, number: int) -> None:
        found[name] = found.get(name, 0) + number

    for descriptor in message.DESCRIPTOR.fields:
        value = getattr(message, descriptor.name)
        named = any(word in descriptor.name for word in STATUS_WORDS)
        if descriptor.type == FieldDescriptor.TYPE_MESSAGE:
            entry = descriptor.message_type
            if entry is not None and entry.GetOptions().map_entry:
                if named:
                    add(descriptor.name, len(value))
                continue
            if descriptor.is_repeated:
                items = list(value)
                if named:
                    add(descriptor.name, len(items))
            else:
                items = [value] if message.HasField(descriptor.name) else []
            for item in items:
                for name, number in status_counts(item).items():
                    add(name, number)
        elif named:
            if descriptor.is_repeated:
                numeric = descriptor.type not in (
                    FieldDescriptor.TYPE_STRING,
                    FieldDescriptor.TYPE_BYTES,
                )
                add(descriptor.name, sum(int(v) for v in value) if numeric else len(value))
            elif descriptor.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
                add(descriptor.name, 1 if value else 0)
            else:
                add(descriptor.name, int(value))
    return found


def subtask_durations(vertex: Any, slowed_id: str) -> tuple[list[float], list[float]]:
    """How long the vertex's subtasks (their current attempts) ran on the slowed task executor
    and elsewhere, in seconds."""
    slow: list[float] = []
    fast: list[float] = []
    for index, executor in enumerate(vertex.subtask_task_executors):
        begin, end = vertex.subtask_start_times[index], vertex.subtask_end_times[index]
        if begin > 0 and end > 0:
            (slow if executor == slowed_id else fast).append(end - begin)
    return slow, fast


def placement_lines(details: Any, slowed_id: str) -> list[str]:
    """Per vertex: how many subtasks ended on the slowed task executor and how long they took
    against the others, how many were run more than once, and when (seconds after submission)
    the vertex's last subtask elsewhere ended against its last one."""
    lines = []
    for vertex in details.vertices:
        slow, fast = subtask_durations(vertex, slowed_id)
        ends = [
            (executor, end - details.submitted_at)
            for executor, end in zip(
                vertex.subtask_task_executors, vertex.subtask_end_times, strict=False
            )
            if end > 0
        ]
        done = max((end for _, end in ends), default=0.0)
        done_elsewhere = max((end for ex, end in ends if ex != slowed_id), default=0.0)
        again = sum(1 for attempt in vertex.subtask_attempts if attempt > 0)

        def summary(times: list[float]) -> str:
            if not times:
                return "none"
            return f"{len(times)}, median {statistics.median(times):.1f} s, max {max(times):.1f} s"

        lines.append(
            f"{vertex.name} (parallelism {vertex.parallelism}): on task-executor-0 "
            f"{summary(slow)}; elsewhere {summary(fast)}; {again} run more than once; "
            f"done elsewhere at +{done_elsewhere:.1f} s, all at +{done:.1f} s"
        )
    return lines


# -- one cluster, its cases -----------------------------------------------------------------


def speculation_config(args: argparse.Namespace) -> dict[str, str]:
    """Case c's keys: Flink's defaults but for the detector's lower bound (Flink: 1 min, far
    above this benchmark's subtasks) and the blocking time, then ``--speculation-conf``."""
    config = {
        "execution.batch.speculative.enabled": "true",
        "execution.batch.speculative.max-concurrent-executions": "2",
        "execution.batch.speculative.block-slow-node-duration": args.block_duration,
        "slow-task-detector.check-interval": "1 s",
        "slow-task-detector.execution-time.baseline-lower-bound": args.lower_bound,
        "slow-task-detector.execution-time.baseline-ratio": "0.75",
        "slow-task-detector.execution-time.baseline-multiplier": "1.5",
    }
    for item in args.speculation_conf:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise SystemExit(f"--speculation-conf {item!r}: expected KEY=VALUE")
        config[key.strip()] = value.strip()
    return config


def speculation_problem(config: dict[str, str], scope: str) -> str | None:
    """Why this checkout would refuse ``config`` (None: it accepts it), checked before any
    cluster starts: the cluster's services and the dispatcher run the same check."""
    from sparkmill.common.config.configuration import Configuration
    from sparkmill.common.core.errors import ConfigurationError
    from sparkmill.common.jobgraph.job_config import normalize_job_config

    try:
        if scope == "job":
            normalize_job_config(config)
        else:
            Configuration().with_overrides(config, source="the benchmark's cluster config")
    except ConfigurationError as exc:
        return str(exc)
    return None


def wait_sessions_up(cluster: LocalCluster, timeout_s: float) -> None:
    """Until every task executor logged its Spark session up (and warm)."""
    deadline = time.monotonic() + timeout_s
    pending = cluster.find("task-executor")
    while pending:
        pending = [
            p
            for p in pending
            if not re.search(r"Spark session up (and warm )?in", Path(p.log_file).read_text())
        ]
        if pending and time.monotonic() > deadline:
            names = ", ".join(p.name for p in pending)
            raise TimeoutError(f"Spark sessions of {names} not up after {timeout_s:g}s")
        time.sleep(0.2)


def run_cluster(
    args: argparse.Namespace, cases: list[Case], data: Path, work: Path
) -> list[Outcome]:
    """Start a cluster (speculation on if the cases want it), warm it up, run each case's
    timed job; the cluster is stopped (and the JVM SIGCONTed) whatever happens."""
    from sparkmill.client import ClusterClient
    from sparkmill.common.v1 import common_pb2

    speculation = cases[0].speculation
    extra_config: dict[str, Any] = {
        "spark.session.start": "eager",
        "spark.master": args.spark_master,
        # Its files are in the benchmark's directory: the pipeline worker runs as its user.
        "taskmanager.pipeline-worker.user": "same-user",
    }
    job_config: dict[str, str] = {}
    if speculation:
        if args.speculation_in == "cluster":
            extra_config.update(speculation_config(args))
        else:
            job_config = speculation_config(args)
    name = "speculation" if speculation else "no-speculation"
    cluster = LocalCluster(
        work / f"cluster-{name}",
        task_executors=args.task_executors,
        slots=args.slots,
        extra_config=extra_config,
    )
    outcomes: list[Outcome] = []
    started = time.monotonic()
    try:
        cluster.start(wait_timeout_s=300)
        wait_sessions_up(cluster, 900)
        with ClusterClient.from_config_file(cluster.config_path) as client:

            def job(source: str, output: Path, slower: DutyCycle | None = None) -> Any:
                graph = wordcount_job(source, output, args.parallelism, job_config)
                graph_built = graph.build_job_graph()
                try:
                    if slower is not None:
                        slower.start()
                    result = client.wait(client.submit(graph_built), timeout=args.job_timeout)
                finally:
                    if slower is not None:
                        slower.stop()
                if result.status != common_pb2.FINISHED:
                    print(cluster.logs()[-8000:], file=sys.stderr)
                    raise RuntimeError(f"job {output.name} failed: {result.failure.message}")
                return result

            job(str(work / "warmup.txt"), work / f"{name}-warmup-tiny")
            if not args.no_warmup:
                began = time.monotonic()
                job(str(data / "*.txt"), work / f"{name}-warmup")
                print(f"  [{name}] warm-up job, untimed: {time.monotonic() - began:.1f}s")
            print(f"  [{name}] cluster up and warm in {time.monotonic() - started:.1f}s")
            executors = sorted(cluster.find("task-executor"), key=lambda p: p.index)
            slowed = executors[0]
            resource_ids = {
                te.info.pid: te.resource_id
                for te in client.cluster_status().resource_manager.task_executors
            }
            for case in cases:
                slower = None
                if case.slowed:
                    slower = DutyCycle(slowed.pid, args.period, args.period * args.stopped)
                jvms = {p.name: jvm_pids(p.pid) for p in executors}
                cpu_before = {te: cpu_seconds(pids) for te, pids in jvms.items()}
                output = work / f"case-{case.key}"
                load_start = load1()
                began = time.monotonic()
                result = job(str(data / "*.txt"), output, slower)
                took = time.monotonic() - began
                outcome = Outcome(case, took, load_start, load1(), output)
                cpu = ", ".join(
                    f"{te} {cpu_seconds(pids) - cpu_before[te]:.0f}" for te, pids in jvms.items()
                )
                outcome.notes.append(f"JVM CPU seconds during the job: {cpu}")
                if slower is not None:
                    outcome.notes.append(
                        f"{slowed.name}'s JVM {sorted(slower.touched)} stopped "
                        f"{slower.stopped_share:.0%} of the time"
                    )
                slowed_id = resource_ids.get(slowed.pid, "")
                outcome.notes += placement_lines(result.details, slowed_id)
                if result.details.vertices:
                    slow, fast = subtask_durations(result.details.vertices[0], slowed_id)
                    outcome.source_slowed, outcome.source_all = slow, slow + fast
                counts = status_counts(result.details)
                outcome.notes.append(
                    "status API: "
                    + (
                        ", ".join(f"{key} {value}" for key, value in sorted(counts.items()))
                        if counts
                        else "no speculative attempts or blocked executors reported"
                    )
                )
                outcomes.append(outcome)
                print(
                    f"case {case.key} ({case.title}): {took:.1f}s, load "
                    f"{outcome.load_start:.2f} -> {outcome.load_end:.2f}"
                )
                for note in outcome.notes:
                    print(f"    {note}")
                sys.stdout.flush()
    finally:
        cluster.stop()
    return outcomes


# -- main -----------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the text (default 1024)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "sparkmill-bench")
    parser.add_argument("--cases", default="a,b,c", help="which of a, b, c (default all)")
    parser.add_argument("--parallelism", type=int, default=12, help="of every vertex")
    parser.add_argument("--task-executors", type=int, default=3)
    parser.add_argument("--slots", type=int, default=2, help="per task executor")
    parser.add_argument("--spark-master", default="local[2]", help="each task executor's")
    parser.add_argument("--period", type=float, default=1.0, help="duty cycle, seconds")
    parser.add_argument(
        "--stopped", type=float, default=0.9, help="share of each period the JVM is stopped"
    )
    parser.add_argument(
        "--lower-bound",
        default="3 s",
        help="case c: slow-task-detector.execution-time.baseline-lower-bound",
    )
    parser.add_argument(
        "--block-duration",
        default="1 min",
        help="case c: execution.batch.speculative.block-slow-node-duration",
    )
    parser.add_argument(
        "--speculation-in",
        choices=("cluster", "job"),
        default="cluster",
        help="where case c's keys go: the cluster's configuration or the job's",
    )
    parser.add_argument(
        "--speculation-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="case c: another key or value (repeatable)",
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="no untimed full-size job per cluster"
    )
    parser.add_argument("--job-timeout", type=float, default=1800.0, help="per job, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the clusters' directories")
    args = parser.parse_args()
    known = {case.key: case for case in CASES}
    chosen = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not chosen or any(c not in known for c in chosen):
        parser.error(f"--cases: a comma-separated selection of {', '.join(known)}")
    if not 0 < args.stopped < 1:
        parser.error("--stopped: a share between 0 and 1")
    if args.task_executors < 2:
        parser.error("--task-executors: at least 2 (one is slowed)")
    cases = [known[key] for key in known if key in chosen]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)

    if any(case.speculation for case in cases):
        problem = speculation_problem(speculation_config(args), args.speculation_in)
        if problem:
            print(
                f"case c cannot run: this checkout refuses the speculation keys ({problem}); "
                "run --cases a,b",
                file=sys.stderr,
            )
            return 2

    data = generate(args.dir, args.mb)
    reference = reference_counts(data)
    work = args.dir / "straggler"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "warmup.txt").write_text("warm up the spark sessions\n")
    print(
        f"{args.mb} MB of text, parallelism {args.parallelism}, {args.task_executors} task "
        f"executors x {args.slots} slots ({args.spark_master} each) on {os.cpu_count()} cores; "
        f"slowed: task-executor-0's JVM stopped {args.stopped:.0%} of every {args.period:g} s; "
        f"load {load1():.2f}"
    )
    if any(case.speculation for case in cases):
        for key, value in speculation_config(args).items():
            print(f"  case c, {args.speculation_in} config: {key}: {value}")
    clean = False
    try:
        outcomes: list[Outcome] = []
        for group in ([c for c in cases if not c.speculation], [c for c in cases if c.speculation]):
            if group:
                outcomes += run_cluster(args, group, data, work)
        problems = check_outputs(outcomes, reference)

        print("| case | job | load 1m start -> end |")
        print("| --- | --- | --- |")
        for outcome in outcomes:
            print(
                f"| {outcome.case.key}: {outcome.case.title} | {outcome.seconds:.1f} s | "
                f"{outcome.load_start:.2f} -> {outcome.load_end:.2f} |"
            )
        took = {outcome.case.key: outcome.seconds for outcome in outcomes}
        if "a" in took:
            for key, goal in (("b", GOAL_SLOWED), ("c", GOAL_SPECULATIVE)):
                if key in took:
                    ratio = took[key] / took["a"]
                    met = ratio >= goal if key == "b" else ratio <= goal
                    sign = ">=" if key == "b" else "<="
                    print(
                        f"{key}/a = {ratio:.2f}x (goal {sign} {goal:g}x: "
                        f"{'met' if met else 'NOT met'})"
                    )
        by_case = {outcome.case.key: outcome for outcome in outcomes}
        if "a" in by_case and "b" in by_case and by_case["b"].source_slowed:
            slowed_s = statistics.median(by_case["b"].source_slowed)
            undisturbed_s = statistics.median(by_case["a"].source_all)
            print(
                f"task-executor-0's source subtasks in b ran {slowed_s / undisturbed_s:.1f}x as "
                f"long as a's (median {slowed_s:.1f} s against {undisturbed_s:.1f} s; the duty "
                "cycle aims at about 5x)"
            )
        if problems:
            print("OUTPUT WRONG:", *problems, sep="\n  ", file=sys.stderr)
            return 1
        print(f"all {len(outcomes)} outputs exact ({len(reference)} words, each once)")
        clean = not args.keep
        return 0
    finally:
        if clean:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"clusters' files and outputs kept in {work}")


if __name__ == "__main__":
    sys.exit(main())
