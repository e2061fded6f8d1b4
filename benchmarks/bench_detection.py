#!/usr/bin/env python3
"""Detection time of a killed (SIGKILL) and a hung (SIGSTOP) task executor.

Runs a job of long ``noop`` subtasks with a fixed-delay restart strategy on a local cluster,
kills or freezes a task executor running one of them, and measures the time until the
JobMaster has failed the lost attempts over (the job's restart count goes up). A killed
process's connections close at once: the heartbeat sender sees that (a ZeroMQ socket monitor)
and probes at once; no answer within 0.5 s while the connection stays down and the executor is
lost. A frozen process keeps its connections, so it is found by failed heartbeat RPCs:
``heartbeat.rpc-failure-threshold`` consecutive failures, each RPC timing out after one
``heartbeat.interval``, sent at a fixed rate. Local clusters use a 1 s interval, a threshold of
2 and a 6 s timeout. Prints every round, the median and the p99.

    PYTHONPATH=. python benchmarks/bench_detection.py --rounds 20
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

from sparkmill.client import ClusterClient
from sparkmill.common.v1 import common_pb2
from sparkmill.local_cluster import LocalCluster
from sparkmill.testing import noop_pipeline


def one_round(cluster: LocalCluster, client: ClusterClient, sig: int) -> float:
    pipeline = noop_pipeline(
        "detect",
        2,
        sleep_s=60,
        config={
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "10",
        },
    )
    job_id = client.submit(pipeline.build_job_graph())
    while client.status(job_id).vertices[0].tasks_by_state.get(common_pb2.EXECUTION_RUNNING, 0) < 2:
        time.sleep(0.05)
    view = client.cluster_status()
    victim = next(
        te.info.pid
        for te in view.resource_manager.task_executors
        if any(s.job_id == job_id for s in te.slots)
    )
    started = time.monotonic()
    os.kill(victim, sig)
    while client.status(job_id, timeout=30).restarts == 0:
        time.sleep(0.05)
    detected = time.monotonic() - started
    client.cancel(job_id)
    client.wait(job_id, timeout=60)
    if sig == signal.SIGSTOP:
        os.kill(victim, signal.SIGCONT)
    else:
        proc = next(p for p in cluster.processes if p.pid == victim)
        cluster.processes.remove(proc)
        cluster.add_task_executor()
    # Wait until the cluster is whole again.
    while client.cluster_status().resource_manager.slots_total < 6:
        time.sleep(0.2)
    return detected


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sm-detect-") as tmp:
        cluster = LocalCluster(Path(tmp), task_executors=3, slots=2)
        cluster.start()
        try:
            with ClusterClient.from_config_file(cluster.config_path) as client:
                for name, sig in (
                    ("killed (SIGKILL)", signal.SIGKILL),
                    ("hung (SIGSTOP)", signal.SIGSTOP),
                ):
                    times = [one_round(cluster, client, sig) for _ in range(args.rounds)]
                    print(
                        f"{name}: "
                        + ", ".join(f"{t:.2f}s" for t in times)
                        + f"; median {statistics.median(times):.2f}s,"
                        f" p99 {percentile(times, 0.99):.2f}s over {len(times)} rounds"
                    )
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
