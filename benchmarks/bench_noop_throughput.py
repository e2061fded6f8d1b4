#!/usr/bin/env python3
"""Noop subtasks finished per second on a local cluster of real processes.

Starts a local cluster (default 3 task executors x 4 slots), submits jobs of ``noop`` test
operators and reports, per run, the wall time from submission to FINISHED and the subtasks
finished per second. This measures the control plane alone: slot requests and offers, task
deployment, state updates, scheduling of consumers, slot reuse.

    PYTHONPATH=. python benchmarks/bench_noop_throughput.py --parallelism 500 --vertices 2
    PYTHONPATH=. python benchmarks/bench_noop_throughput.py --ha    # with ZooKeeper HA
    PYTHONPATH=. python benchmarks/bench_noop_throughput.py --parallelism 10000 --runs 1 \
        --timeout-s 300 --memory --config heartbeat.interval=10s --config heartbeat.timeout=50s
        # the 10,000 x 10,000 job, bounded, with peak RSS per role and Flink's heartbeat timing

Each run also prints the longest stall of the JobMaster's event loop during the run (its
``sparkmill_event_loop_lag_max_seconds``, scraped every second: the worst since the previous
scrape), which is what holds up the heartbeats and RPCs of every job of that process, and what
the JobMaster logged about building the job's execution graph (its slices, the longest one).

With ``SPARKMILL_PROFILE_DIR=DIR`` in the environment every service process writes a cProfile
of its event loop's thread to ``DIR/{role}-{pid}.prof`` when the cluster stops.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from sparkmill.client import ClusterClient
from sparkmill.common.core.errors import DeadlineExceededError
from sparkmill.common.v1 import common_pb2
from sparkmill.local_cluster import LocalCluster
from sparkmill.testing import noop_pipeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task-executors", type=int, default=3)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--parallelism", type=int, default=500)
    parser.add_argument("--vertices", type=int, default=2)
    parser.add_argument("--pattern", default="ALL_TO_ALL")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--ha",
        action="store_true",
        help="ZooKeeper HA (a local ZooKeeper server): job graphs, results and the JobMaster's "
        "progress log go to the HA storage directory",
    )
    parser.add_argument(
        "--security",
        choices=("on", "off"),
        default="on",
        help="CurveZMQ with authorization (the default of a local cluster) or none at all",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=None,
        help="give up on a run (and cancel its job) after this many seconds",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra cluster configuration (repeatable), e.g. heartbeat.interval=10s: a local "
        "cluster's 1 s heartbeats lose a JobMaster whose loop is busy for 2 s on a loaded machine",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="after each run, print the peak RSS (VmHWM) of the job-master and task executors",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sm-bench-") as tmp:
        cluster = LocalCluster(
            Path(tmp),
            task_executors=args.task_executors,
            slots=args.slots,
            ha=args.ha,
            extra_config={
                "security.curve.enabled": args.security == "on",
                **dict(item.split("=", 1) for item in args.config),
            },
        )
        started = time.monotonic()
        cluster.start()
        print(
            f"security {args.security}: "
            f"cluster of {args.task_executors} x {args.slots} slots up in "
            f"{time.monotonic() - started:.1f}s"
        )
        try:
            with ClusterClient.from_config_file(cluster.config_path) as client:
                subtasks = args.parallelism * args.vertices
                for run in range(args.runs):
                    pipeline = noop_pipeline(
                        f"bench-{run}",
                        parallelism=args.parallelism,
                        vertices=args.vertices,
                        pattern=args.pattern,
                    )
                    graph = pipeline.build_job_graph()
                    load = os.getloadavg()[0]
                    lag = LoopLagSampler(_job_master_metrics_url(cluster))
                    cpu_before = _cpu_seconds_by_role(cluster)
                    t0 = time.monotonic()
                    job_id = client.submit(graph)
                    try:
                        result = client.wait(job_id, poll_s=0.05, timeout=args.timeout_s)
                    except DeadlineExceededError as exc:
                        print(f"run {run + 1}: gave up: {exc} (load {load:.1f}){lag.stop()}")
                        client.cancel(job_id)
                        _print_memory(cluster, args.memory)
                        continue
                    elapsed = time.monotonic() - t0
                    lag_text = lag.stop() + _graph_build_text(cluster, job_id)
                    if result.status != common_pb2.FINISHED:
                        print(
                            f"run {run + 1}: job ended {result.failure.message} after "
                            f"{elapsed:.1f}s (load {load:.1f}){lag_text}"
                        )
                        _print_memory(cluster, args.memory)
                        continue
                    print(
                        f"run {run + 1}: {subtasks} subtasks ({args.vertices} x "
                        f"{args.parallelism}, {args.pattern}) in {elapsed:.2f}s = "
                        f"{subtasks / elapsed:.0f} subtasks/s "
                        f"(load {load:.1f} -> {os.getloadavg()[0]:.1f}){lag_text}"
                    )
                    _print_cpu(cluster, cpu_before, subtasks)
                    _print_memory(cluster, args.memory)
        finally:
            cluster.stop()


_LAG_SAMPLE = re.compile(r"^sparkmill_event_loop_lag_max_seconds\{[^}]*\} (\S+)$", re.M)


def _job_master_metrics_url(cluster: LocalCluster) -> str:
    """The job-master process's /metrics URL, from the line its log starts with."""
    for proc in cluster.processes:
        if proc.role == "job-master":
            found = re.search(r"metrics at (http://\S+)", Path(proc.log_file).read_text())
            if found:
                return found.group(1)
    return ""


def _graph_build_text(cluster: LocalCluster, job_id: str) -> str:
    """What the JobMaster logged about building the job's execution graph (slices, longest)."""
    pattern = re.compile(rf"job {job_id[:8]}: execution graph of (.*)")
    for proc in cluster.processes:
        if proc.role == "job-master":
            found = pattern.search(Path(proc.log_file).read_text())
            if found:
                return f"\n  graph: {found.group(1)}"
    return ""


class LoopLagSampler:
    """Scrapes the JobMaster's loop lag every ``interval_s`` in a thread and keeps the worst.

    The gauge is the worst lag since the previous scrape, so the first scrape (at start) clears
    what came before the run and the last one (at :meth:`stop`) covers its end.
    """

    def __init__(self, url: str, interval_s: float = 1.0) -> None:
        self.url = url
        self.interval_s = interval_s
        self.worst_s = 0.0
        self.scrapes = 0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if url:
            self._scrape()  # discard the lag from before the run
            self.worst_s, self.scrapes = 0.0, 0
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _scrape(self) -> None:
        try:
            with urllib.request.urlopen(self.url, timeout=10) as response:
                text = response.read().decode()
        except OSError:
            return
        found = _LAG_SAMPLE.search(text)
        if found:
            self.worst_s = max(self.worst_s, float(found.group(1)))
            self.scrapes += 1

    def _run(self) -> None:
        while not self._done.wait(self.interval_s):
            self._scrape()

    def stop(self) -> str:
        """Stop sampling; the text that reports it (empty when the URL is unknown)."""
        if self._thread is None:
            return ""
        self._done.set()
        self._thread.join()
        self._scrape()
        return f"; JobMaster loop lag max {self.worst_s * 1000:.0f} ms ({self.scrapes} scrapes)"


def _cpu_seconds_by_role(cluster: LocalCluster) -> dict[str, float]:
    """CPU seconds (user + system) each role's service processes have used so far.

    Less noisy than wall time on a shared machine: what the control plane costs per subtask
    does not change when another process takes a core away."""
    ticks = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for proc in cluster.processes:
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
        used[proc.role] = used.get(proc.role, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return used


def _print_cpu(cluster: LocalCluster, before: dict[str, float], subtasks: int) -> None:
    after = _cpu_seconds_by_role(cluster)
    parts = [
        f"{role} {(after[role] - before.get(role, 0.0)) * 1000 / subtasks:.2f}"
        for role in ("job-master", "task-executor", "resource-manager", "dispatcher")
        if role in after
    ]
    print("  CPU ms per subtask: " + ", ".join(parts))


def _print_memory(cluster: LocalCluster, enabled: bool) -> None:
    if not enabled:
        return
    peaks = []
    for proc in cluster.processes:
        if proc.role in ("job-master", "task-executor"):
            peaks.append(f"{proc.name} {_peak_rss_mb(proc.pid):.0f}")
    print("  peak RSS (MB): " + ", ".join(peaks))


def _peak_rss_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


if __name__ == "__main__":
    main()
