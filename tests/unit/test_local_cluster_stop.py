"""``LocalCluster.stop`` stops the task executors before the services they say goodbye to."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkmill.local_cluster import LocalCluster, ServiceProcess, process_tree

# A stand-in service: notes when SIGTERM came, takes ``argv[2]`` seconds to stop, exits.
FAKE_SERVICE = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def stop(*_):
    out.write_text(repr(time.time()))
    time.sleep(float(sys.argv[2]))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
pathlib.Path(sys.argv[1] + ".ready").write_text("")
while True:
    time.sleep(0.02)
"""


def _fake(cluster: LocalCluster, role: str, stop_s: float) -> Path:
    marker = cluster.directory / f"{role}.sigterm"
    proc = subprocess.Popen([sys.executable, "-c", FAKE_SERVICE, str(marker), str(stop_s)])
    cluster._popen[proc.pid] = proc
    cluster.processes.append(ServiceProcess(role, 0, proc.pid, str(marker) + ".log"))
    deadline = time.monotonic() + 30
    while not Path(str(marker) + ".ready").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return marker


def test_task_executors_stop_before_the_resource_manager_is_told_to(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    manager = _fake(cluster, "resource-manager", 0.0)
    executor = _fake(cluster, "task-executor", 0.5)  # saying goodbye, stopping Spark
    cluster.stop(grace_s=10)
    executor_told, manager_told = float(executor.read_text()), float(manager.read_text())
    assert manager_told >= executor_told + 0.4  # only once the executor was gone
    assert all(p.poll() is not None for p in cluster._popen.values())


def test_a_task_executor_that_does_not_stop_holds_the_others_back_only_briefly(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(tmp_path)
    manager = _fake(cluster, "resource-manager", 0.0)
    _fake(cluster, "task-executor", 60.0)  # hangs: SIGKILLed after the grace period
    started = time.monotonic()
    cluster.stop(grace_s=3)
    assert manager.exists()  # told to stop although the executor was still there
    assert time.monotonic() - started < 12
    assert all(p.poll() is not None for p in cluster._popen.values())


def test_kill_machine_kills_the_service_with_every_process_it_started(tmp_path: Path) -> None:
    # A stand-in task executor with a child (its "JVM") that has a child (a "Python worker").
    script = "sleep 60 & (sleep 60 & wait) & wait"
    proc = subprocess.Popen(["sh", "-c", script])
    cluster = LocalCluster(tmp_path)
    cluster._popen[proc.pid] = proc
    service = ServiceProcess(role="task-executor", index=0, pid=proc.pid, log_file="x")
    deadline = time.monotonic() + 10
    while len(tree := process_tree(proc.pid)) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(tree) == 4, tree
    assert cluster.kill_machine(service) == 4
    assert proc.returncode is not None
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in tree[1:]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(_running(pid) for pid in tree[1:])


def _running(pid: int) -> bool:
    # Orphans are reaped by init; until then a killed one is a zombie.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_free_ports_come_from_below_the_kernels_ephemeral_range() -> None:
    # A port in the ephemeral range may go to another process's outgoing connection before the
    # service binds it ("Address already in use" at a dispatcher's start).
    from sparkmill.common.core.free_ports import ephemeral_start
    from sparkmill.local_cluster import free_port

    top = ephemeral_start()
    ports = {free_port() for _ in range(50)}
    assert all(20000 <= port < top for port in ports), sorted(ports)
    assert len(ports) > 40  # spread out, so parallel clusters rarely pick the same


def test_ports_handed_out_by_one_process_are_never_handed_out_again_soon() -> None:
    # A local cluster's dispatcher and resource manager once got the same port from two separate
    # picks, and one of them could not bind it.
    from sparkmill.common.core.free_ports import free_port, free_ports

    together = free_ports(3)
    assert len(set(together)) == 3, together
    one_by_one = [free_port() for _ in range(300)]
    assert len(set(one_by_one)) == 300
    assert not set(together) & set(one_by_one)


def test_free_ports_refuses_a_negative_count() -> None:
    from sparkmill.common.core.free_ports import free_ports

    with pytest.raises(ValueError, match="negative"):
        free_ports(-1)
    assert free_ports(0) == []
