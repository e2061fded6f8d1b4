"""The ``local`` worker driver: task executors as child processes on the resource manager's host
(``resourcemanager.driver: local``; what ``sparkmill local-cluster up --elastic`` uses).

Each worker is started exactly as ``local-cluster up`` starts a task executor
(:func:`~sparkmill.common.runtime.service_process.spawn_service`), with a directory of its own
under ``resourcemanager.local.worker-dir``::

    <worker-dir>/<resource id>/task-executor.yaml   the cluster's configuration, plus its
                                                    resource id and worker spec
    <worker-dir>/<resource id>/task-executor.log    its output
    <worker-dir>/<resource id>/spark-local/         Spark's scratch space (spark.local.dir)
    <worker-dir>/<resource id>/pid                  its process id (for operators and tests)

Each worker leads a session of its own, so it outlives the resource manager that started it:
when a resource manager gains leadership (the same process again, or a standby on this host
sharing the worker directory), the driver looks through the directory for workers that run
(the pid file's process alive with that worker's configuration file on its command line) and
reports them as recovered; the accounting adopts them. Only ``local-cluster down`` stops them
all (:func:`~sparkmill.common.runtime.service_process.stop_workers`).

Releasing a worker sends SIGTERM, then SIGKILL to its process tree (its Spark JVM included)
after a bound. An exit is noticed by polling: ``waitpid`` for this process's own children (it
also reaps them, even after leadership is lost), ``/proc`` for adopted ones. Forking, scanning
and stopping block, so they run through ``ServiceRuntime.run_blocking``; answers go to the
:class:`~.worker_driver.WorkerEvents` on the loop, never from inside a driver call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
from pathlib import Path

import yaml

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.core.ids import ResourceID, short
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.service_process import (
    WORKER_CONFIG_FILE,
    WORKER_PID_FILE,
    is_alive,
    running_workers,
    spawn_service,
    stop_pid,
    stop_process,
    wait_exec,
)
from sparkmill.services.resourcemanager.worker_driver import WorkerEvents, WorkerSpec

log = logging.getLogger(__name__)

CONFIG_FILE = WORKER_CONFIG_FILE
LOG_FILE = "task-executor.log"
PID_FILE = WORKER_PID_FILE
# A task executor that is told to stop says goodbye to the resource manager and stops its Spark
# session: several seconds, and more than ten on a busy machine when a few stop together (as
# idle ones do). Past this bound its whole process tree is killed.
STOP_GRACE_S = 30.0
POLL_INTERVAL_S = 0.2


def worker_dir_of(setting: str, config: Configuration) -> Path:
    """``resourcemanager.local.worker-dir``, or ``workers`` next to the configuration file."""
    if setting:
        return Path(setting)
    if not config.source:
        raise ConfigurationError(
            opt.RESOURCE_MANAGER_LOCAL_WORKER_DIR.key,
            "must be set when the configuration was not read from a file",
        )
    return Path(config.source).resolve().parent / "workers"


class LocalWorkerDriver:
    def __init__(
        self,
        runtime: ServiceRuntime,
        config: Configuration,
        worker_dir: Path,
        *,
        stop_grace_s: float = STOP_GRACE_S,
        poll_interval_s: float = POLL_INTERVAL_S,
    ) -> None:
        self._runtime = runtime
        self._config = config
        # Absolute: a worker is recognised by its configuration file's path on its command line.
        self._worker_dir = worker_dir.absolute()
        self._stop_grace_s = stop_grace_s
        self._poll_interval_s = poll_interval_s
        self._events: WorkerEvents | None = None
        # Children of this process (started here), and a previous leader's workers (adopted).
        self._processes: dict[ResourceID, subprocess.Popen[bytes]] = {}
        self._adopted: dict[ResourceID, int] = {}
        self._starting: set[ResourceID] = set()
        self._release_when_started: set[ResourceID] = set()
        self._watchers: dict[ResourceID, asyncio.Task[None]] = {}
        self._closed = True

    @property
    def name(self) -> str:
        return "local"

    def start(self, events: WorkerEvents) -> None:
        self._events = events
        self._closed = False
        self._runtime.spawn(self._recover(events), "recover-workers")

    def request_worker(self, resource_id: ResourceID, spec: WorkerSpec) -> None:
        self._starting.add(resource_id)
        self._runtime.spawn(self._start_worker(resource_id, spec), "start-worker")

    def release_worker(self, resource_id: ResourceID) -> None:
        popen = self._processes.get(resource_id)
        if popen is not None:
            self._runtime.spawn(self._stop(popen), "stop-worker")
        elif resource_id in self._starting:
            self._release_when_started.add(resource_id)  # stopped as soon as it runs
        elif (pid := self._adopted.get(resource_id)) is not None:
            self._runtime.spawn(
                self._runtime.run_blocking(stop_pid, pid, self._stop_grace_s), "stop-worker"
            )

    async def close(self) -> None:
        """Stop reporting; the workers keep running. The watchers of this process's own
        children go on (they reap them); those of adopted workers stop."""
        self._closed = True
        self._events = None
        for resource_id in list(self._adopted):
            watcher = self._watchers.pop(resource_id, None)
            if watcher is not None:
                watcher.cancel()
        self._adopted.clear()

    async def stop_all(self) -> None:
        """Stop every worker this process started (tests; ``local-cluster down`` stops them
        through their pid files)."""
        await self.close()
        processes = list(self._processes.values())
        await asyncio.gather(*(self._stop(p) for p in processes))

    # ---------------------------------------------------------------- internals

    async def _recover(self, events: WorkerEvents) -> None:
        try:
            found = await self._runtime.run_blocking(running_workers, self._worker_dir)
        except OSError as exc:  # an unreadable directory: nothing to adopt, say why
            log.warning("could not look for running workers in %s: %s", self._worker_dir, exc)
            found = {}
        if self._events is not events:  # closed (or restarted) meanwhile
            return
        recovered: list[ResourceID] = []
        for name, pid in found.items():
            resource_id = ResourceID(name)
            popen = self._processes.get(resource_id)
            if popen is not None and popen.pid == pid:
                recovered.append(resource_id)  # this process's own child: still watched
                continue
            self._adopted[resource_id] = pid
            self._watchers[resource_id] = self._runtime.spawn(
                self._watch_pid(resource_id, pid), "watch-worker"
            )
            recovered.append(resource_id)
        log.info("found %d running worker(s) in %s", len(recovered), self._worker_dir)
        events.on_previous_workers_recovered(recovered)

    async def _watch_pid(self, resource_id: ResourceID, pid: int) -> None:
        while is_alive(pid):  # noqa: ASYNC110 (not our child: no wait to await)
            await asyncio.sleep(self._poll_interval_s)
        self._watchers.pop(resource_id, None)
        self._adopted.pop(resource_id, None)
        log.info("adopted worker %s (pid %d) ended", short(resource_id), pid)
        if self._events is not None:
            log_file = self._worker_dir / resource_id / LOG_FILE
            self._events.on_worker_terminated(resource_id, f"it ended (log: {log_file})")

    async def _start_worker(self, resource_id: ResourceID, spec: WorkerSpec) -> None:
        try:
            popen = await self._runtime.run_blocking(self._launch, resource_id, spec)
        except (OSError, ConfigurationError, ValueError) as exc:
            self._starting.discard(resource_id)
            self._release_when_started.discard(resource_id)
            if self._events is not None and not self._closed:
                self._events.on_worker_start_failed(resource_id, f"{type(exc).__name__}: {exc}")
            return
        self._starting.discard(resource_id)
        if self._closed:  # the resource manager stopped while the process was being started
            await self._stop(popen)
            return
        # Not a previous leader's any more (a reused resource id would be a bug upstream).
        self._adopted.pop(resource_id, None)
        log.info("worker %s started (pid %d)", short(resource_id), popen.pid)
        self._processes[resource_id] = popen
        self._watchers[resource_id] = self._runtime.spawn(
            self._watch(resource_id, popen), "watch-worker"
        )
        if self._events is not None:
            self._events.on_worker_started(resource_id)
        if resource_id in self._release_when_started:  # released while it was being started
            self._release_when_started.discard(resource_id)
            self.release_worker(resource_id)

    def _launch(self, resource_id: ResourceID, spec: WorkerSpec) -> subprocess.Popen[bytes]:
        """Write the worker's directory and start its process (blocking)."""
        directory = self._worker_dir / resource_id
        (directory / "spark-local").mkdir(parents=True, exist_ok=True)
        config = self._config.with_overrides(
            {
                opt.TASK_MANAGER_RESOURCE_ID.key: resource_id,
                opt.TASK_MANAGER_NUM_TASK_SLOTS.key: spec.slots,
                opt.TASK_MANAGER_CPU_CORES.key: spec.cpu_cores,
                opt.TASK_MANAGER_MEMORY_PROCESS_SIZE.key: f"{spec.memory_mb} mb",
                opt.RESOURCE_MANAGER_DRIVER.key: "none",
                f"{opt.SPARK_CONF.prefix}spark.local.dir": str(directory / "spark-local"),
            }
        )
        config_path = directory / CONFIG_FILE
        config_path.write_text(yaml.safe_dump(config.to_strings(), sort_keys=True))
        popen = spawn_service("task-executor", config_path, directory / LOG_FILE, new_session=True)
        # Written once the child runs the worker, so that whoever reads it recognises it.
        wait_exec(popen.pid, config_path)
        (directory / PID_FILE).write_text(f"{popen.pid}\n")
        return popen

    async def _watch(self, resource_id: ResourceID, popen: subprocess.Popen[bytes]) -> None:
        # A child's exit has no awaitable here (asyncio's child watchers own SIGCHLD only for
        # processes they started): a non-blocking waitpid a few times a second is the cheapest.
        while popen.poll() is None:  # noqa: ASYNC110
            await asyncio.sleep(self._poll_interval_s)
        self._watchers.pop(resource_id, None)
        if self._processes.get(resource_id) is popen:
            del self._processes[resource_id]
        log.info(
            "worker %s (pid %d) exited with %d", short(resource_id), popen.pid, popen.returncode
        )
        if self._events is not None and not self._closed:
            log_file = self._worker_dir / resource_id / LOG_FILE
            self._events.on_worker_terminated(
                resource_id, f"exit code {popen.returncode} (log: {log_file})"
            )

    async def _stop(self, popen: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            await self._runtime.run_blocking(stop_process, popen, self._stop_grace_s)


__all__ = ["LocalWorkerDriver", "worker_dir_of"]
