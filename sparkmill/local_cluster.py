"""A local cluster of real service processes on loopback (``sparkmill local-cluster up``).

Starts one dispatcher, one resource manager, one job-master process and N task executors, each
``python -m sparkmill <role> --config DIR/cluster.yaml`` in the background with its log in
``DIR/logs/``, and waits until every task executor is registered at the resource manager. The
process ids are kept in ``DIR/processes.json`` so ``local-cluster down`` can stop them (SIGTERM,
then SIGKILL after a grace period).

The cluster is secure by default: ``write_config`` generates CurveZMQ keys (one per role, plus
the server key, one ZooKeeper digest per service role and the REST API's bearer tokens) in
``DIR/keys`` unless they exist, and the configuration names them (see docs/security.md).
``extra_config`` may turn security off for a lab.

With ``elastic`` (``local-cluster up --elastic``) no task executor is started up front: the
resource manager runs the ``local`` worker driver and starts task executors itself when slot
requests wait, up to ``max_task_executors``, and stops them when they have been idle for
``resourcemanager.taskmanager-timeout`` (each under ``DIR/workers/<resource id>/``).

The same class is what ``sparkmill run`` and the integration tests use.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparkmill.common.core.free_ports import free_port, free_ports
from sparkmill.common.rpc.keys import (
    PRIVATE_DIR,
    PUBLIC_DIR,
    REST_TOKENS_FILE,
    SECRET_SUFFIX,
    SERVER,
    ZOOKEEPER_IDENTITIES_FILE,
    generate_cluster_keys,
    zookeeper_digest_file,
)
from sparkmill.common.rpc.security import TransportSecurity, security_from_config
from sparkmill.common.runtime.service_base import ROLES
from sparkmill.common.runtime.service_process import (
    is_alive,
    kill_tree,
    process_tree,
    running_workers,
    spawn_service,
    stop_workers,
)

CONFIG_FILE = "cluster.yaml"
# How long stop() lets the task executors stop alone before it stops the other services.
EXECUTORS_FIRST_STOP_S = 5.0
PROCESSES_FILE = "processes.json"
WORKERS_DIR = "workers"
KEYS_DIR = "keys"

# Short heartbeats and timeouts: a local cluster should notice a dead process in seconds.
LOCAL_DEFAULTS: dict[str, Any] = {
    "heartbeat.interval": "1 s",
    "heartbeat.timeout": "6 s",
    "cluster.registration.error-delay": "1 s",
    "cluster.registration.refused-registration-delay": "1 s",
    "cluster.registration.max-timeout": "2 s",
    "slot.request.timeout": "60 s",
    "slot.idle.timeout": "10 s",
    "spark.session.start": "lazy",
}


@dataclass
class ServiceProcess:
    role: str
    index: int
    pid: int
    log_file: str

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass
class LocalCluster:
    directory: Path
    task_executors: int = 2
    slots: int = 2
    extra_config: dict[str, Any] = field(default_factory=dict)
    ha: bool = False  # high-availability.mode: zookeeper with a local ZooKeeper server
    standbys: int = 0  # extra dispatchers, resource managers and job-master processes
    # The resource manager starts task executors on demand (resourcemanager.driver: local), at
    # most max_task_executors of them; task_executors is then ignored (none starts up front).
    elastic: bool = False
    max_task_executors: int = 4
    processes: list[ServiceProcess] = field(default_factory=list)
    _popen: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    zookeeper: Any = field(default=None, repr=False)

    @property
    def config_path(self) -> Path:
        return self.directory / CONFIG_FILE

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    def write_config(self, zookeeper_address: str = "") -> dict[str, Any]:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        # One call, so the three ports differ (two independent picks once gave the dispatcher and
        # the resource manager the same port).
        dispatcher_port, resource_manager_port, rest_port = free_ports(3)
        config: dict[str, Any] = {
            "dispatcher.rpc-address": f"tcp://127.0.0.1:{dispatcher_port}",
            "resourcemanager.rpc-address": f"tcp://127.0.0.1:{resource_manager_port}",
            "jobmaster.rpc-address": "tcp://127.0.0.1:0",
            "taskmanager.rpc-address": "tcp://127.0.0.1:0",
            "taskmanager.numberOfTaskSlots": self.slots,
            "rest.port": rest_port,
            "exchange.dir": str(self.directory / "exchange"),
            # Attempt logs and ended jobs' archives live with the cluster's other files, so a
            # cluster started again in the same directory still shows its history.
            "taskmanager.log.attempt.dir": str(self.directory / "attempt-logs"),
            "jobmanager.archive.fs.dir": str(self.directory / "completed-jobs"),
            **LOCAL_DEFAULTS,
        }
        if self.elastic:
            config.update(
                {
                    "resourcemanager.driver": "local",
                    "resourcemanager.local.worker-dir": str(self.worker_dir),
                    "slotmanager.number-of-slots.max": self.max_task_executors * self.slots,
                    # A local task executor registers within seconds; one that does not is
                    # broken, and five minutes (Flink's default) is long to wait for that here.
                    "resourcemanager.taskmanager-registration.timeout": "60 s",
                }
            )
        if zookeeper_address:
            config.update(
                {
                    # Leaders are found through ZooKeeper, so every process binds a free port.
                    "dispatcher.rpc-address": "tcp://127.0.0.1:0",
                    "resourcemanager.rpc-address": "tcp://127.0.0.1:0",
                    "rest.port": 0,
                    "high-availability.mode": "zookeeper",
                    "high-availability.zookeeper.quorum": zookeeper_address,
                    "high-availability.storageDir": str(self.directory / "ha-storage"),
                    "high-availability.cluster-id": "local",
                    "high-availability.zookeeper.client.session-timeout": "4 s",
                    "high-availability.zookeeper.client.connection-timeout": "5 s",
                }
            )
        config.update(self.security_config())
        if zookeeper_address:
            # One ZooKeeper identity per role, each znode's ACL by role (docs/security.md).
            digest = self.keys_dir / PRIVATE_DIR / zookeeper_digest_file("{role}")
            config["security.zookeeper.digest-file"] = str(digest)
            identities = self.keys_dir / PUBLIC_DIR / ZOOKEEPER_IDENTITIES_FILE
            config["security.zookeeper.identities-file"] = str(identities)
        config.update(self.extra_config)
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=True))
        return config

    @property
    def worker_dir(self) -> Path:
        """Where the resource manager's ``local`` driver puts its task executors' files."""
        return self.directory / WORKERS_DIR

    @property
    def keys_dir(self) -> Path:
        return self.directory / KEYS_DIR

    def security_config(self) -> dict[str, Any]:
        """Generate the cluster's keys (kept when they exist) and the keys naming them."""
        generate_cluster_keys(self.keys_dir)
        return {
            "security.curve.enabled": True,
            "security.curve.public-keys-dir": str(self.keys_dir / PUBLIC_DIR),
            "security.curve.secret-key-file": str(
                self.keys_dir / PRIVATE_DIR / ("{role}" + SECRET_SUFFIX)
            ),
            "security.curve.server-secret-key-file": str(
                self.keys_dir / PRIVATE_DIR / (SERVER + SECRET_SUFFIX)
            ),
            "rest.auth.token-file": str(self.rest_tokens_file),
        }

    @property
    def rest_tokens_file(self) -> Path:
        """The REST API's bearer tokens (``operator`` and ``viewer`` lines, mode 0600)."""
        return self.keys_dir / PRIVATE_DIR / REST_TOKENS_FILE

    def transport_security(self, role: str = "client") -> TransportSecurity:
        """What a process holding ``role``'s key of this cluster presents (tests, tools)."""
        from sparkmill.common.config.configuration import Configuration

        config = Configuration.load(self.config_path)
        return security_from_config(config, role, serves=False)

    def _spawn(self, role: str, index: int, extra_env: dict[str, str] | None = None) -> None:
        log_file = self.log_dir / f"{role}-{index}.log"
        proc = spawn_service(role, self.config_path, log_file, extra_env=extra_env)
        self._popen[proc.pid] = proc
        self.processes.append(ServiceProcess(role, index, proc.pid, str(log_file)))

    def start(self, *, wait_timeout_s: float = 60.0) -> None:
        zookeeper_address = ""
        if self.ha:
            from sparkmill.common.ha.zookeeper.server import ZooKeeperServer

            self.zookeeper = ZooKeeperServer(self.directory / "zookeeper")
            self.zookeeper.start()
            assert self.zookeeper.process is not None
            zookeeper_address = self.zookeeper.address
            self.processes.append(
                ServiceProcess(
                    "zookeeper", 0, self.zookeeper.process.pid, str(self.zookeeper.log_file)
                )
            )
        self.write_config(zookeeper_address)
        for index in range(1 + self.standbys):
            self._spawn("resource-manager", index)
            self._spawn("dispatcher", index)
            self._spawn("job-master", index)
        for index in range(0 if self.elastic else self.task_executors):
            self._spawn("task-executor", index)
        self._save()
        self.wait_until_ready(wait_timeout_s)

    def add_task_executor(self) -> ServiceProcess:
        return self.add_process("task-executor")

    def add_process(self, role: str) -> ServiceProcess:
        """Start one more process of ``role`` (e.g. to replace one a test killed)."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        index = 1 + max((p.index for p in self.processes if p.role == role), default=-1)
        self._spawn(role, index)
        self._save()
        return self.processes[-1]

    def wait_until_ready(self, timeout_s: float) -> None:
        from sparkmill.client import ClusterClient

        deadline = time.monotonic() + timeout_s
        expected = sum(1 for p in self.processes if p.role == "task-executor")
        last_error = "no answer yet"
        with ClusterClient.from_config_file(self.config_path) as client:
            while time.monotonic() < deadline:
                self._check_alive()
                try:
                    status = client.cluster_status(timeout=2.0)
                    registered = len(status.resource_manager.task_executors)
                    if registered >= expected and status.job_master_processes > self.standbys:
                        return
                    last_error = (
                        f"{registered}/{expected} task executors and "
                        f"{status.job_master_processes} job-master processes registered"
                    )
                except Exception as exc:
                    last_error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.2)
        raise TimeoutError(
            f"local cluster in {self.directory} not ready after {timeout_s:g}s: {last_error}; "
            f"see the logs in {self.log_dir}"
        )

    def rest_url(self, timeout_s: float = 10.0) -> str:
        """The leading dispatcher's REST API and dashboard URL ('' when it serves none)."""
        from sparkmill.client import ClusterClient

        with ClusterClient.from_config_file(self.config_path) as client:
            return client.cluster_status(timeout=timeout_s).dispatcher.rest_url

    def _check_alive(self) -> None:
        for proc in self.processes:
            if proc.role == "zookeeper":
                continue
            popen = self._popen.get(proc.pid)
            if popen is not None and popen.poll() is not None:
                tail = Path(proc.log_file).read_text(errors="replace")[-3000:]
                raise RuntimeError(
                    f"{proc.name} exited with code {popen.returncode} during start-up; "
                    f"the end of {proc.log_file}:\n{tail}"
                )

    def _save(self) -> None:
        data = [p.__dict__ for p in self.processes]
        (self.directory / PROCESSES_FILE).write_text(json.dumps(data, indent=2))

    @classmethod
    def attach(cls, directory: Path) -> LocalCluster:
        """The cluster that ``local-cluster up`` started in ``directory``."""
        path = directory / PROCESSES_FILE
        if not path.exists():
            raise FileNotFoundError(f"no local cluster in {directory} ({path} does not exist)")
        cluster = cls(directory)
        cluster.processes = [ServiceProcess(**p) for p in json.loads(path.read_text())]
        return cluster

    def find(self, role: str, pid: int | None = None) -> list[ServiceProcess]:
        return [p for p in self.processes if p.role == role and (pid is None or p.pid == pid)]

    def kill(self, proc: ServiceProcess, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        popen = self._popen.get(proc.pid)
        if popen is not None and sig in (signal.SIGKILL, signal.SIGTERM):
            popen.wait(timeout=30)

    def kill_machine(self, proc: ServiceProcess) -> int:
        """SIGKILL ``proc`` with every process it started (a task executor's Spark JVM and
        Python workers) at once, as when its machine dies; how many processes there were."""
        count = kill_tree(proc.pid)
        popen = self._popen.get(proc.pid)
        if popen is not None:
            popen.wait(timeout=30)
        return count

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM every service, then SIGKILL what is still alive after ``grace_s``; then
        ZooKeeper (last: the services deregister from it while they stop).

        Task executors first, and the others once they are gone (or after a few seconds): a
        stopping task executor says goodbye to the resource manager before it stops its Spark
        session, and waits up to 2 s for an answer that a resource manager stopping at the
        same moment never sends."""
        services = [p for p in self.processes if p.role != "zookeeper"]
        deadline = time.monotonic() + grace_s
        executors = [p for p in services if p.role == "task-executor"]
        # The resource manager's workers outlive it (a new leader adopts them): found by their
        # pid files, they stop with the other task executors.
        workers = list(running_workers(self.worker_dir).values())
        for pid in [p.pid for p in executors] + workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        # At most half the grace period: the others need their share of it.
        executors_by = time.monotonic() + min(EXECUTORS_FIRST_STOP_S, grace_s / 2)
        while time.monotonic() < executors_by and (
            any(is_alive(p.pid, self._popen.get(p.pid)) for p in executors)
            or any(is_alive(pid) for pid in workers)
        ):
            time.sleep(0.05)
        for proc in reversed(services):
            if proc.role != "task-executor":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for proc in services:
            while is_alive(proc.pid, self._popen.get(proc.pid)) and time.monotonic() < deadline:
                time.sleep(0.05)
            if is_alive(proc.pid, self._popen.get(proc.pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
        for popen in self._popen.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=5)
        while time.monotonic() < deadline and any(is_alive(pid) for pid in workers):
            time.sleep(0.05)
        for pid in workers:
            if is_alive(pid):
                kill_tree(pid)
        # A worker the resource manager started while the others stopped (a replacement for
        # one that had just exited) is not in the list taken above; every service is gone now,
        # so a second look finds whatever is left.
        stop_workers(self.worker_dir, grace_s=max(1.0, deadline - time.monotonic()))
        for proc in services:
            if proc.role == "resource-manager":
                _kill_group_leftovers(proc.pid)
        if self.zookeeper is not None:
            self.zookeeper.stop()
        for proc in self.processes:
            if proc.role == "zookeeper" and is_alive(proc.pid, None):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
                stop_by = time.monotonic() + 10
                while is_alive(proc.pid, None) and time.monotonic() < stop_by:
                    time.sleep(0.05)
                if is_alive(proc.pid, None):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGKILL)
        path = self.directory / PROCESSES_FILE
        if path.exists():
            path.unlink()

    def logs(self) -> str:
        """Every service log, for a failing test to print."""
        parts = []
        for proc in self.processes:
            text = (
                Path(proc.log_file).read_text(errors="replace")
                if Path(proc.log_file).exists()
                else "(no log)"
            )
            parts.append(f"===== {proc.name} (pid {proc.pid}) =====\n{text[-20000:]}")
        return "\n".join(parts)


def _kill_group_leftovers(leader: int) -> None:
    """SIGKILL what is left of the process group ``leader`` led (each service leads its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)


__all__ = ["LocalCluster", "ServiceProcess", "free_port", "kill_tree", "process_tree"]
