"""Starting and stopping a sparkmill service process on this host.

One way to launch a service, shared by the two places that do it: ``sparkmill local-cluster``
(the API package) and the resource manager's ``local`` worker driver, which starts task
executors on demand. Both run ``python -m sparkmill <role> --config FILE`` with the same
interpreter, output to a log file, stdin closed and ``SPARK_LOCAL_IP`` on loopback; a service
must not import the API package, so the contract lives here.

Everything here blocks (fork/exec, waiting for an exit): a service calls it through
``ServiceRuntime.run_blocking``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def service_command(role: str, config_path: Path) -> list[str]:
    """The command line of a service process of ``role`` reading ``config_path``."""
    return [sys.executable, "-m", "sparkmill", role, "--config", str(config_path)]


def spawn_service(
    role: str,
    config_path: Path,
    log_file: Path,
    *,
    extra_env: dict[str, str] | None = None,
    new_session: bool = True,
) -> subprocess.Popen[bytes]:
    """Start a service process in the background, its output appended to ``log_file``.

    ``new_session``: the process leads a session of its own, so a Ctrl-C in the terminal that
    started a local cluster does not reach it. The resource manager's own task executors stay
    in its process group instead, so whoever stops the resource manager's group stops them too.
    """
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **(extra_env or {})}
    with open(log_file, "ab") as log:
        return subprocess.Popen(
            service_command(role, config_path),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=new_session,
        )


def stop_process(popen: subprocess.Popen[bytes], grace_s: float) -> int:
    """SIGTERM ``popen``, SIGKILL it with its descendants if it is still alive after
    ``grace_s`` (a task executor's Spark JVM must not outlive it); its exit code."""
    with contextlib.suppress(ProcessLookupError):
        popen.send_signal(signal.SIGTERM)
    try:
        return popen.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        kill_tree(popen.pid)
        return popen.wait(timeout=30)


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants, from the parent links in /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            # The command name (in parentheses) may hold spaces: the fields follow its end.
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def kill_tree(pid: int) -> int:
    """SIGKILL ``pid`` and its descendants at once; how many processes there were."""
    pids = process_tree(pid)
    for victim in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    return len(pids)


def is_alive(pid: int, popen: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether ``pid`` runs (a zombie of a process we did not start counts as gone)."""
    if popen is not None:
        return popen.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie of a process we did not start is reaped by init; treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout_s: float) -> bool:
    """Wait until none of ``pids`` runs; ``False`` if some still do after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while any(is_alive(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


__all__ = [
    "is_alive",
    "kill_tree",
    "process_tree",
    "service_command",
    "spawn_service",
    "stop_process",
    "wait_gone",
]
