#!/usr/bin/env python3
"""Time from SIGKILL of a leader to a standby serving requests (ZooKeeper HA).

Starts a local HA cluster (a real ZooKeeper server, one standby per control role), then for the
dispatcher and the resource manager, several times each: SIGKILL the leader, poll until a
*different* process answers as leader, and report the gap (every kill, the median and the
p99). The target is the ZooKeeper session timeout (``--session-timeout``, 2 s by default) plus
half a second: the dead leader's ephemeral latch node lives until its session expires.

    PYTHONPATH=. python benchmarks/bench_failover.py --rounds 20
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
from sparkmill.local_cluster import LocalCluster


def leader(client: ClusterClient, role: str, timeout: float = 30.0) -> int:
    view = client.cluster_status(timeout=timeout)
    return (
        view.dispatcher.pid
        if role == "dispatcher"
        else (view.resource_manager.resource_manager.pid)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--session-timeout", type=float, default=2.0, help="seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sm-failover-") as tmp:
        cluster = LocalCluster(
            Path(tmp),
            task_executors=1,
            slots=1,
            ha=True,
            standbys=1,
            extra_config={
                "high-availability.zookeeper.client.session-timeout": f"{args.session_timeout} s"
            },
        )
        cluster.start()
        results: dict[str, list[float]] = {"dispatcher": [], "resource-manager": []}
        try:
            with ClusterClient.from_config_file(cluster.config_path) as client:
                for round_ in range(args.rounds):
                    for role in results:
                        old = leader(client, role)
                        killed_at = time.monotonic()
                        os.kill(old, signal.SIGKILL)
                        while True:
                            try:
                                # Short attempts: measure the standby, not a client timeout.
                                if leader(client, role, timeout=0.3) != old:
                                    break
                            except Exception:
                                pass
                            time.sleep(0.05)
                        gap = time.monotonic() - killed_at
                        results[role].append(gap)
                        print(
                            f"round {round_ + 1}: {role} leader killed, standby serving "
                            f"after {gap:.2f}s"
                        )
                        # Replace the victim so the next round has a standby again.
                        victim = cluster.find(role, old)[0]
                        cluster.processes.remove(victim)
                        cluster._spawn(role, 100 + round_)
                        time.sleep(2.0)
        finally:
            cluster.stop()
        for role, gaps in results.items():
            ordered = sorted(gaps)
            p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
            print(
                f"{role}: median {statistics.median(gaps):.2f}s, p99 {p99:.2f}s, "
                f"max {max(gaps):.2f}s over {len(gaps)} kills "
                f"(session timeout {args.session_timeout:g} s)"
            )


if __name__ == "__main__":
    main()
