"""Starting and stopping a sparkmill service process on this host.

One way to launch a service, shared by the two places that do it: ``sparkmill local-cluster``
(the API package) and the resource manager's ``local`` worker driver, which starts task
executors on demand. Both run ``python -m sparkmill <role> --config FILE`` with the same
interpreter, output to a log file, stdin closed and ``SPARK_LOCAL_IP`` on loopback; a service
must not import the API package, so the contract lives here.

The resource manager's ``local`` workers each have a directory ``<worker-dir>/<resource id>/``
with their configuration file and a pid file (:data:`WORKER_CONFIG_FILE`, :data:`WORKER_PID_FILE`).
They lead sessions of their own and outlive the resource manager that started them: a new
leader finds them there (:func:`running_workers`), and ``local-cluster down`` stops them
(:func:`stop_workers`). A pid is only trusted while that process's command line names the
worker's configuration file: a pid file outlives its process, and its pid may be reused.

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

WORKER_CONFIG_FILE = "task-executor.yaml"
WORKER_PID_FILE = "pid"


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
    started a local cluster does not reach it, and stopping its parent's group does not stop it.
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


def stop_pid(pid: int, grace_s: float) -> None:
    """SIGTERM a process we may not have started, SIGKILL its tree after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not wait_gone([pid], grace_s):
        kill_tree(pid)
        wait_gone([pid], 30)


def wait_exec(pid: int, config_path: Path, timeout_s: float = 10.0) -> bool:
    """Wait until the freshly forked ``pid`` runs the service of ``config_path`` (between fork
    and exec its command line is still its parent's: a pid file written then would not be
    recognised by :func:`service_pid`); ``False`` if it ended or did not exec in time."""
    wanted = os.fsencode(str(config_path))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if wanted in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                return True
        except OSError:
            return False
        time.sleep(0.005)
    return False


def service_pid(pid_file: Path, config_path: Path) -> int | None:
    """The pid in ``pid_file`` if that process runs with ``config_path`` on its command line."""
    try:
        pid = int(pid_file.read_text().strip())
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if os.fsencode(str(config_path)) not in args or not is_alive(pid):
        return None
    return pid


def running_workers(worker_dir: Path) -> dict[str, int]:
    """The ``local`` workers under ``worker_dir`` that run: directory name -> pid."""
    found: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for directory in sorted(worker_dir.iterdir()):
            pid = service_pid(directory / WORKER_PID_FILE, directory / WORKER_CONFIG_FILE)
            if pid is not None:
                found[directory.name] = pid
    return found


def stop_workers(worker_dir: Path, grace_s: float) -> int:
    """Stop every running ``local`` worker under ``worker_dir`` (SIGTERM together, SIGKILL of
    each one's tree after ``grace_s``); how many there were."""
    pids = list(running_workers(worker_dir).values())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    if not wait_gone(pids, grace_s):
        for pid in pids:
            if is_alive(pid):
                kill_tree(pid)
        wait_gone(pids, 30)
    return len(pids)


def wait_gone(pids: list[int], timeout_s: float) -> bool:
    """Wait until none of ``pids`` runs; ``False`` if some still do after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while any(is_alive(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


__all__ = [
    "WORKER_CONFIG_FILE",
    "WORKER_PID_FILE",
    "is_alive",
    "kill_tree",
    "process_tree",
    "running_workers",
    "service_command",
    "service_pid",
    "spawn_service",
    "stop_pid",
    "stop_process",
    "stop_workers",
    "wait_exec",
    "wait_gone",
]
