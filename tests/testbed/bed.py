"""The test bed of scripts/testbed.sh seen from the tests: hosts, SSH, Ansible, Prometheus.

Every address used here is one of the test bed's (a /24 of 198.18.0.0/15) or loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "testbed.sh"
EXIT_CANNOT_RUN = 77
STATE = Path(os.environ.get("SPARKMILL_TESTBED_STATE", "/var/lib/sparkmill-testbed"))
CACHE = Path(os.environ.get("SPARKMILL_TESTBED_CACHE", "/var/cache/sparkmill-testbed"))
VENV_BIN = Path(sys.prefix) / "bin"
# This machine's address on the bed's bridge (scripts/testbed.sh gives it .1 of the bed's /24).
CONTROLLER_ADDRESS = os.environ.get("SPARKMILL_TESTBED_NET", "198.18.0") + ".1"

# Debian's PostgreSQL JDBC driver (libpostgresql-jdbc-java) on this machine: the task executors'
# Spark sessions load it from the same path on the hosts (tests/testbed/soak_jdbc.py).
JDBC_JAR = Path("/usr/share/java/postgresql.jar")

bed_used_next = True
"""Whether a test of the bed runs after the one being torn down (set by the directory's
conftest before each teardown): a module that changed hosts restores them only then, since the
bed is removed otherwise. True unless known otherwise."""

# The units each inventory group puts on a host (one task executor instance per host).
GROUP_UNITS = {
    "zookeeper": ["zookeeper-sparkmill.service"],
    "dispatchers": ["sparkmill-dispatcher.service"],
    "resource_managers": ["sparkmill-resource-manager.service"],
    "job_masters": ["sparkmill-job-master.service"],
    "task_executors": ["sparkmill-task-executor@1.service"],
    "monitoring": ["prometheus.service"],
}


def parse_inventory(path: Path) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(host -> address, group -> hosts) of the ini inventory testbed.sh writes."""
    addresses: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    group = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            group = line.strip("[]")
            groups[group] = []
            continue
        name, *rest = line.split()
        groups[group].append(name)
        for item in rest:
            key, _, value = item.partition("=")
            if key == "ansible_host":
                addresses[name] = value
    return addresses, groups


def recap(output: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP of an ansible-playbook run: host -> {ok, changed, failed, ...}."""
    result: dict[str, dict[str, int]] = {}
    for match in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", output, re.MULTILINE):
        counts = dict(re.findall(r"(\w+)=(\d+)", match.group(2)))
        result[match.group(1)] = {k: int(v) for k, v in counts.items()}
    return result


def changed_tasks(output: str) -> str:
    """The tasks and handlers of an ansible-playbook run that changed something, each with its
    ``changed:`` lines (what an idempotence failure has to show, wherever it is in the log)."""
    shown: list[str] = []
    header = ""
    for line in output.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            header = line.rstrip(" *")
        elif line.startswith("changed:"):
            if header:
                shown.append(header)
                header = ""
            shown.append("  " + line)
    return "\n".join(shown)


@dataclass
class TestBed:
    __test__ = False  # not a test class, despite its name
    inventory: Path
    addresses: dict[str, str]
    groups: dict[str, list[str]]
    timings: dict[str, float] = field(default_factory=dict)
    converges: list[subprocess.CompletedProcess[str]] = field(default_factory=list)
    # The second converge (the idempotence check) runs while the tests that only read the bed
    # or run jobs go on; anything that changes a host waits for it first (``settle``).
    _converging: threading.Thread | None = None

    def converge_in_background(self, name: str) -> None:
        """Runs ``site.yml`` once more in a thread; its result is appended to ``converges``."""

        def run() -> None:
            began = time.monotonic()
            self.converges.append(self.playbook("site.yml"))
            self.timings[name] = time.monotonic() - began

        self._converging = threading.Thread(target=run, name=name, daemon=True)
        self._converging.start()

    def settle(self) -> None:
        """Waits for a converge still running: after it, tests may change the hosts."""
        if self._converging is not None:
            self._converging.join()

    @property
    def shared(self) -> Path:
        """The directory every host mounts at this same path (exchange, HA storage, sinks)."""
        return STATE / "shared"

    def install_jdbc_driver(self) -> list[str]:
        """Copies this machine's PostgreSQL JDBC jar to every task executor host that lacks it
        (the hosts have no network to install the package): the hosts it was copied to, whose
        task executors load it only when they next start. Nothing when it is not installed
        here."""
        if not JDBC_JAR.is_file():
            return []
        copy = self.shared / "jdbc" / JDBC_JAR.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(JDBC_JAR, copy)  # the jar behind Debian's version-less symlink
        installed = []
        for host in self.groups["task_executors"]:
            target = shlex.quote(str(JDBC_JAR))
            result = self.ssh(
                host,
                f"test -f {target} || {{ install -D -m 0644 {shlex.quote(str(copy))} {target}"
                " && echo installed; }",
            )
            if "installed" in result.stdout:
                installed.append(host)
        return installed

    def units_of(self, host: str) -> list[str]:
        return [
            unit
            for group, units in GROUP_UNITS.items()
            if host in self.groups.get(group, [])
            for unit in units
        ]

    def ssh(
        self,
        host: str,
        command: str,
        *,
        timeout: float = 60,
        check: bool = True,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``command`` as root on ``host``; ``stdin``: its input (e.g. a secret, which a
        command line would show to every process of the host)."""
        argv = [
            "ssh",
            "-i",
            str(STATE / "id_ed25519"),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            f"root@{self.addresses[host]}",
            command,
        ]
        result = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{host}: {command!r} exited {result.returncode}:\n{result.stdout}{result.stderr}"
            )
        return result

    def playbook(
        self, playbook: str, *args: str, timeout: float = 1800
    ) -> subprocess.CompletedProcess[str]:
        env = dict(
            os.environ,
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_RETRY_FILES_ENABLED="0",
            ANSIBLE_PIPELINING="1",
            ANSIBLE_ROLES_PATH=str(ROOT / "ansible" / "roles"),
            ANSIBLE_HOST_KEY_CHECKING="0",
            ANSIBLE_FORKS="10",
        )
        return subprocess.run(
            [
                str(VENV_BIN / "ansible-playbook"),
                "-i",
                str(self.inventory),
                *args,
                str(ROOT / "ansible" / playbook),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def sparkmill(
        self, *args: str, timeout: float = 300, config: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The CLI on this machine (the controller) against the test bed's cluster."""
        config = config or self.client_config()
        return subprocess.run(
            [str(VENV_BIN / "sparkmill"), "--config", str(config), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=ROOT,
            env=dict(os.environ, SPARK_LOCAL_IP=CONTROLLER_ADDRESS),
        )

    @property
    def secrets(self) -> Path:
        """The play's secrets on the controller (keys, ZooKeeper digest, REST tokens): the role
        keeps them next to the inventory."""
        return STATE / "secrets"

    def client_config(self) -> Path:
        """The operator's client configuration the play wrote on the controller (client key,
        ZooKeeper digest, the ensemble), plus what this machine needs on the bed's bridge."""
        path = STATE / "client.yaml"
        config = yaml.safe_load((self.secrets / "sparkmill-client.yaml").read_text())
        assert config["security.curve.enabled"] is True, config
        config.update(
            {
                "high-availability.storageDir": f"{self.shared}/ha",
                "high-availability.zookeeper.client.session-timeout": "6 s",
                "rpc.bind-host": CONTROLLER_ADDRESS,
                "metrics.enabled": False,
            }
        )
        path.write_text(yaml.safe_dump(config, sort_keys=True))
        return path

    def cluster_status(self) -> dict[str, Any]:
        result = self.sparkmill("cluster", "status", "--json", timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        status: dict[str, Any] = json.loads(result.stdout)
        return status

    def prometheus(self, path: str, **params: str) -> Any:
        host = self.groups["monitoring"][0]
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"http://{self.addresses[host]}:9090{path}{query}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        assert body.get("status") == "success", body
        return body["data"]

    def journals(self, lines: int = 150) -> str:
        """The journal of every service of every host (for a failing test's report)."""
        out = []
        for host in self.addresses:
            # The pipeline workers of the task executors come and go with their connections.
            executor = host in self.groups["task_executors"]
            workers = ["sparkmill-pipeline-worker@*"] if executor else []
            units = " ".join(f"-u {shlex.quote(u)}" for u in [*self.units_of(host), *workers])
            result = self.ssh(
                host,
                f"systemctl --no-pager --all list-units 'sparkmill*' 'zookeeper*' 'prometheus*';"
                f" journalctl --no-pager -o short-precise -n {lines} {units}",
                timeout=30,
                check=False,
            )
            out.append(f"===== {host} ({self.addresses[host]})\n{result.stdout}{result.stderr}")
        return "\n".join(out)

    def wait_until(self, what: str, probe: Any, timeout: float, interval: float = 2.0) -> Any:
        """Calls probe() until it returns something truthy; else fails naming `what`, last value."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = probe()
            except (AssertionError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
                last = exc
            else:
                if last:
                    return last
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")
            time.sleep(interval)


class CannotRun(Exception):
    """This machine cannot run the test bed (not root, no systemd-nspawn, no Debian mirror...)."""


def script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``scripts/testbed.sh ARGS`` with this virtualenv's tools."""
    env = dict(os.environ, SPARKMILL_VENV=sys.prefix)
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


class _Prepare:
    """``scripts/testbed.sh prepare`` (the cached Debian root and the wheelhouse) started early in
    the background, so that on a fresh machine debootstrap runs while the cheaper tiers do (it
    mostly waits for the mirror and the disk) instead of in front of the test bed."""

    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls) -> None:
        if cls.process is not None:
            return
        CACHE.mkdir(parents=True, exist_ok=True)
        with open(CACHE / "prepare.log", "wb") as log:
            cls.process = subprocess.Popen(
                ["bash", str(SCRIPT), "prepare"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, SPARKMILL_VENV=sys.prefix),
                start_new_session=True,  # its own process group: ``stop`` ends debootstrap too
            )

    @classmethod
    def wait(cls, timeout: float) -> None:
        """Waits for a prepare started earlier. Its outcome does not matter: ``up`` builds what
        is missing and reports what went wrong itself."""
        if cls.process is None:
            return
        try:
            cls.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            cls.stop()

    @classmethod
    def stop(cls) -> None:
        """Ends a prepare still running (a run that stopped before the test bed's tests): what
        it left half-built is rebuilt by the next ``up``."""
        if cls.process is None or cls.process.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):  # the group is gone already
                os.killpg(cls.process.pid, sig)
            try:
                cls.process.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue


def stop_preparing() -> None:
    """Ends a background prepare that no test waited for (see ``_Prepare.stop``)."""
    _Prepare.stop()


def prepare_in_background() -> None:
    """Starts building what ``up`` needs (see ``_Prepare``); ``running_bed`` waits for it."""
    _Prepare.start()


def existing_bed() -> TestBed:
    """The bed that ``scripts/testbed.sh up`` left up (its inventory in the state directory)."""
    addresses, groups = parse_inventory(STATE / "inventory.ini")
    return TestBed(inventory=STATE / "inventory.ini", addresses=addresses, groups=groups)


@contextmanager
def running_bed(*, second_converge: bool) -> Iterator[TestBed]:
    """A bed brought up and converged with ``site.yml``; removed again at the end (also when
    the set-up failed). With ``second_converge`` the play runs a second time in the background
    (``TestBed.settle`` waits for it). Raises CannotRun when this machine cannot have one."""
    started = time.monotonic()
    try:
        _Prepare.wait(timeout=900)
        up = script("up", timeout=900)
        if up.returncode == EXIT_CANNOT_RUN:
            reason = next(
                (line for line in up.stderr.splitlines() if "CANNOT RUN" in line),
                "scripts/testbed.sh cannot run here",
            )
            raise CannotRun(reason.strip())
        assert up.returncode == 0, f"testbed.sh up exited {up.returncode}:\n{up.stderr[-6000:]}"
        testbed = existing_bed()
        testbed.install_jdbc_driver()  # before the play starts the task executors
        testbed.timings["up"] = time.monotonic() - started
        began = time.monotonic()
        testbed.converges.append(testbed.playbook("site.yml"))
        testbed.timings["converge-1"] = time.monotonic() - began
        if second_converge and testbed.converges[0].returncode == 0:
            testbed.converge_in_background("converge-2")
        try:
            yield testbed
        finally:
            testbed.settle()  # `down` must not pull the hosts from under a running play
        # Kept after `down` (which removes the state directory) for a look at the durations.
        (CACHE / "last-run-timings.json").write_text(
            json.dumps({k: round(v, 1) for k, v in testbed.timings.items()}) + "\n"
        )
    finally:
        down = script("down", timeout=300)
        assert down.returncode in (0, EXIT_CANNOT_RUN), f"testbed.sh down failed:\n{down.stderr}"
