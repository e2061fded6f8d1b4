#!/usr/bin/env python3
"""The control plane side by side with Dask distributed, in one run on the same machine.

Dask is a reference point, never a dependency: it is installed into a virtualenv of its own
(``benchmarks/.dask-venv``, created on the first run; ``--dask-venv`` to move it) and driven
through a small script run with that venv's Python, so nothing of it is imported here.

Measured (tasks that do nothing):

* **throughput** - N trivial tasks in one job: for sparkmill 2 vertices of N/2 subtasks
  connected ALL_TO_ALL (3 task executors x 4 slots); for Dask N/2 tasks, a barrier, N/2 tasks
  (LocalCluster of 3 worker processes x 4 threads), submitted at once;
* **latency** - a one-subtask job from submission to FINISHED (sparkmill, standalone and
  with ZooKeeper HA) against one ``client.submit(f).result()`` round trip (Dask): p50 and p99.

    PYTHONPATH=. python benchmarks/bench_vs_dask.py                 # everything
    PYTHONPATH=. python benchmarks/bench_vs_dask.py --tasks 1000 --rounds 30 --no-ha
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from sparkmill.client import ClusterClient
from sparkmill.common.ha.zookeeper.server import zookeeper_available
from sparkmill.common.v1 import common_pb2
from sparkmill.local_cluster import LocalCluster
from sparkmill.testing import noop_pipeline

HERE = Path(__file__).resolve().parent
DASK_PACKAGES = ["dask[distributed]"]

DASK_SCRIPT = textwrap.dedent(
    """
    import json, statistics, sys, time
    from dask.distributed import Client, LocalCluster

    def noop(*args):
        return None

    def main(tasks, rounds, workers, threads):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=threads,
                               processes=True, dashboard_address=None)
        client = Client(cluster)
        try:
            client.submit(noop).result()  # warm up the workers
            rates = []
            for _ in range(3):
                started = time.perf_counter()
                first = [client.submit(noop, i, pure=False) for i in range(tasks // 2)]
                barrier = client.submit(noop, *first, pure=False)
                second = [client.submit(noop, barrier, i, pure=False) for i in range(tasks // 2)]
                client.gather(second)
                rates.append(tasks / (time.perf_counter() - started))
            latencies = []
            for _ in range(rounds):
                started = time.perf_counter()
                client.submit(noop, pure=False).result()
                latencies.append(time.perf_counter() - started)
            print(json.dumps({"rates": rates, "latencies": latencies}))
        finally:
            client.close()
            cluster.close()

    if __name__ == "__main__":
        main(*map(int, sys.argv[1:5]))
    """
)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _isolated_env() -> dict[str, str]:
    """Dask's venv must not see this checkout (PYTHONPATH=. would show it sparkmill)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def ensure_dask(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} with {' '.join(DASK_PACKAGES)} (first run only)")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=_isolated_env())
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *DASK_PACKAGES],
            check=True,
            timeout=900,
            env=_isolated_env(),
        )
    return python


def run_dask(python: Path, tasks: int, rounds: int) -> dict[str, list[float]]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(DASK_SCRIPT)
    try:
        out = subprocess.run(
            [str(python), script.name, str(tasks), str(rounds), "3", "4"],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
            env=_isolated_env(),
        ).stdout
    finally:
        Path(script.name).unlink(missing_ok=True)
    result: dict[str, list[float]] = json.loads(out.strip().splitlines()[-1])
    return result


def run_sparkmill(tasks: int, rounds: int, *, ha: bool) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="sm-vs-dask-") as tmp:
        cluster = LocalCluster(Path(tmp), task_executors=3, slots=4, ha=ha)
        cluster.start()
        try:
            with ClusterClient.from_config_file(cluster.config_path) as client:

                def run(parallelism: int, vertices: int) -> float:
                    graph = noop_pipeline("bench", parallelism, vertices=vertices).build_job_graph()
                    started = time.perf_counter()
                    job_id = client.submit(graph)
                    result = client.wait(job_id, poll_s=0.002)
                    assert result.status == common_pb2.FINISHED, result.failure.message
                    return time.perf_counter() - started

                run(1, 1)  # warm up: connections, first registration of a JobMaster
                rates = [tasks / run(tasks // 2, 2) for _ in range(3)]
                latencies = [run(1, 1) for _ in range(rounds)]
                return {"rates": rates, "latencies": latencies}
        finally:
            cluster.stop()


def describe(name: str, result: dict[str, list[float]]) -> str:
    rates, latencies = result["rates"], result["latencies"]
    return (
        f"{name:<22} {statistics.median(rates):>9.0f} tasks/s   "
        f"p50 {statistics.median(latencies) * 1000:>7.1f} ms   "
        f"p99 {percentile(latencies, 0.99) * 1000:>7.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30, help="one-task jobs for the latency")
    parser.add_argument("--dask-venv", type=Path, default=HERE / ".dask-venv")
    parser.add_argument("--no-ha", action="store_true", help="skip sparkmill with ZooKeeper HA")
    args = parser.parse_args()

    dask = run_dask(ensure_dask(args.dask_venv), args.tasks, args.rounds)
    standalone = run_sparkmill(args.tasks, args.rounds, ha=False)
    results = {"Dask distributed": dask, "sparkmill": standalone}
    if not args.no_ha and zookeeper_available():
        results["sparkmill (ZooKeeper)"] = run_sparkmill(args.tasks, args.rounds, ha=True)
    print(f"\n{args.tasks} trivial tasks per job (median of 3), {args.rounds} one-task jobs:")
    for name, result in results.items():
        print(describe(name, result))
    ratio = statistics.median(standalone["rates"]) / statistics.median(dask["rates"])
    latency = statistics.median(standalone["latencies"]) / statistics.median(dask["latencies"])
    print(f"sparkmill / Dask: throughput x{ratio:.2f}, one-task latency x{latency:.2f}")


if __name__ == "__main__":
    main()
