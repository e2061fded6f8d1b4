"""The sparkmill cluster of the test bed, seen from the controller: a client, the HA pipeline,
where the leaders are, and a watch on the leaders' znodes that times failovers.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from sparkmill.cli import load_pipeline
from sparkmill.client import ClusterClient
from sparkmill.common.v1 import common_pb2, jobs_pb2
from tests.testbed import ha_data
from tests.testbed.bed import CONTROLLER_ADDRESS, TestBed

HA_PIPELINE = Path(__file__).with_name("ha_pipeline.py")
ZK_ROOT = "/sparkmill/default"
TERMINAL = {common_pb2.FINISHED, common_pb2.FAILED, common_pb2.CANCELED}


def status_name(status: int) -> str:
    return common_pb2.JobStatus.Name(status)


@contextmanager
def cluster_client(bed: TestBed) -> Iterator[ClusterClient]:
    os.environ.setdefault("SPARK_LOCAL_IP", CONTROLLER_ADDRESS)
    client = ClusterClient.from_config_file(bed.client_config())
    try:
        yield client
    finally:
        client.close()


@dataclass
class HaJob:
    job_id: str
    output: Path
    hold: Path | None
    submitted_at: float
    holders: int = 1  # subtasks that hold on their first run (HA_HOLD_PARALLELISM)

    def release(self) -> None:
        assert self.hold is not None
        (self.hold / "release").touch()

    def held(self) -> bool:
        """Every holding subtask is holding."""
        hold = self.hold
        return hold is not None and all(
            (hold / ("held" if i == 0 else f"held-{i}")).exists() for i in range(self.holders)
        )

    def hold_runs(self) -> int:
        return 0 if self.hold is None else len(list(self.hold.glob("run-*")))


def input_glob(bed: TestBed) -> str:
    return ha_data.write_input(bed.shared / "work" / "ha-input")


def _input_bytes(bed: TestBed) -> int:
    return sum(
        p.stat().st_size for p in (bed.shared / "work" / "ha-input").rglob("*") if p.is_file()
    )


def answer(bed: TestBed) -> dict[str, list[tuple[Any, ...]]]:
    input_glob(bed)
    return ha_data.expected(bed.shared / "work" / "ha-input")


def submit_ha(
    client: ClusterClient,
    bed: TestBed,
    name: str,
    *,
    hold: bool = False,
    holders: int = 1,
    auto: bool = False,
) -> HaJob:
    """Submits the HA pipeline with a fresh output directory (and hold directory) on the share;
    ``holders``: the subtasks of the vocabulary, each holding on its first run; ``auto``: no
    parallelism in the pipeline, the JobMaster decides it (about three subtasks for the bed's
    input, which the JobMaster sees on the share)."""
    # A fresh directory per submission, also on a bed reused across test runs.
    work = bed.shared / "work" / "ha" / f"{name}-{int(time.time() * 1000)}"
    output = work / "out"
    hold_dir = work / "hold" if hold else None
    env = {
        "HA_INPUT": input_glob(bed),
        "HA_OUTPUT": str(output),
        "HA_VOCABULARY": " ".join(w.lower() for w in ha_data.WORDS),
        "HA_HOLD": str(hold_dir) if hold_dir else "",
        "HA_HOLD_PARALLELISM": str(holders),
        "HA_NAME": f"ha-{name}",
        "HA_PARALLELISM": "auto" if auto else "2",
        "HA_AUTO_VOLUME": str(max(1, _input_bytes(bed) // 3 + 1)),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        graph = load_pipeline(HA_PIPELINE).build_job_graph()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    job_id = client.submit(graph, timeout=120)
    return HaJob(job_id, output, hold_dir, time.time(), holders)


def wait_job(client: ClusterClient, job_id: str, timeout: float = 600) -> jobs_pb2.JobResult:
    return client.wait(job_id, timeout=timeout, poll_s=1.0)


def host_of(bed: TestBed, address: str) -> str:
    """The bed host whose IP is in ``address`` (e.g. tcp://198.18.0.11:6123)."""
    for host, ip in bed.addresses.items():
        if re.search(rf"(^|[^0-9.]){re.escape(ip)}([^0-9]|$)", address):
            return host
    raise AssertionError(f"{address!r} is not on a host of the bed")


def leader_hosts(bed: TestBed) -> dict[str, str]:
    """role -> host of its leader, for the dispatcher and the resource manager."""
    status = bed.cluster_status()
    return {
        s["role"]: host_of(bed, s["address"])
        for s in status["services"]
        if s["leader"] and s["role"] in ("dispatcher", "resource-manager")
    }


def job_master_host(client: ClusterClient, bed: TestBed, job_id: str) -> str:
    details = client.status(job_id, timeout=60)
    assert details.HasField("job_master"), details
    return host_of(bed, details.job_master.address)


def wait_cluster(bed: TestBed, timeout: float = 240) -> dict[str, Any]:
    """Leaders and standbys of both roles, both JobMaster processes and every task executor are
    in the cluster again (after a fault was undone)."""
    executors = len(bed.groups["task_executors"])

    def complete() -> dict[str, Any] | None:
        status = bed.cluster_status()
        roles: dict[str, list[bool]] = {}
        for s in status["services"]:
            roles.setdefault(s["role"], []).append(bool(s["leader"]))
        ok = (
            sorted(roles.get("dispatcher", [])) == [False, True]
            and sorted(roles.get("resource-manager", [])) == [False, True]
            and len(roles.get("job-master", [])) == len(bed.groups["job_masters"])
            and len(status["task_executors"]) == executors
        )
        return status if ok else None

    result: dict[str, Any] = bed.wait_until("the whole cluster back", complete, timeout=timeout)
    return result


# -- a service's configuration, changed for one scenario ------------------------------------------

HOST_PYTHON = "/opt/sparkmill/venv/bin/python"


def amend_config(bed: TestBed, host: str, path: str, extra: dict[str, str]) -> None:
    """Keeps a service's configuration file aside (``PATH.orig``, once) and sets ``extra`` in it.

    For a scenario that needs another value than the bed's own configuration: a file edit and a
    restart of the service take seconds where another converge of the role takes a minute and a
    half. The playbook rendered the file; only the keys given change. ``restore_config`` puts
    the original back.
    """
    script = (
        "import json, sys, yaml; path = sys.argv[1]; data = yaml.safe_load(open(path));"
        " data.update(json.loads(sys.argv[2])); yaml.safe_dump(data, open(path, 'w'))"
    )
    bed.ssh(
        host,
        f"test -e {path}.orig || cp -p {path} {path}.orig;"
        f" {HOST_PYTHON} -c {shlex.quote(script)} {path} {shlex.quote(json.dumps(extra))}",
    )


def restore_config(bed: TestBed, host: str, path: str, restart: str) -> None:
    """Puts back the file ``amend_config`` kept aside and restarts the unit ``restart``."""
    bed.ssh(
        host,
        f"test ! -e {path}.orig || mv {path}.orig {path}; systemctl restart {restart}",
        check=False,
    )


# -- failover timing ---------------------------------------------------------------------------


@dataclass
class LeaderWatch:
    """Polls the leaders' ``connection_info`` znodes (10 Hz) from the controller and records every
    change: (time.time(), address or None). A failover's time is from the fault to the first
    publication of a new leader."""

    bed: TestBed
    roles: list[str] = field(default_factory=lambda: ["dispatcher", "resource-manager"])
    changes: dict[str, list[tuple[float, str | None]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    error: Exception | None = None

    def __enter__(self) -> LeaderWatch:
        hosts = ",".join(f"{self.bed.addresses[h]}:2181" for h in self.bed.groups["zookeeper"])
        # The bed runs secure: most of sparkmill's znodes are readable with a service role's
        # digest only (the dispatcher's reads every leader's address; docs/security.md).
        digest_file = self.bed.secrets / "keys" / "private" / "zookeeper-dispatcher.digest"
        digest = digest_file.read_text().strip()
        self._zk = KazooClient(hosts=hosts, timeout=6.0, auth_data=[("digest", digest)])
        self._zk.start(timeout=30)
        self._thread = threading.Thread(target=self._run, name="leader-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._zk.stop()
        self._zk.close()

    def watch(self, role: str) -> None:
        with self._lock:
            if role not in self.roles:
                self.roles.append(role)

    def _read(self, role: str) -> str | None:
        try:
            data, _ = self._zk.get(f"{ZK_ROOT}/leader/{role}/connection_info")
        except NoNodeError:
            return None  # no leader published (a connection loss raises: nothing recorded)
        info = json.loads(data)
        return f"{info['address']}#{info['session_id']}"

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                roles = list(self.roles)
            for role in roles:
                try:
                    now = self._read(role)
                except (ConnectionLoss, SessionExpiredError, KazooTimeoutError, ConnectionError):
                    continue  # a connection loss (of any kind): try again next round
                except Exception as exc:  # e.g. NoAuth: the watch would see nothing, ever
                    self.error = exc
                    return
                seen = self.changes.setdefault(role, [])
                if not seen or seen[-1][1] != now:
                    seen.append((time.time(), now))
            self._stop.wait(0.1)

    def leader(self, role: str) -> str | None:
        assert self.error is None, f"the leader watch failed: {self.error!r}"
        seen = self.changes.get(role, [])
        return seen[-1][1] if seen else None

    def failover_after(self, role: str, since: float, before: str | None) -> float | None:
        """Seconds from ``since`` to the first publication of a leader other than ``before``."""
        for at, now in self.changes.get(role, []):
            if at >= since and now is not None and now != before:
                return at - since
        return None

    def failed_over(self, role: str, since: float, before: str | None) -> float:
        """:meth:`failover_after`, for ``TestBed.wait_until``: while there is none, an
        AssertionError saying what the watch sees (its last value when the wait gives up)."""
        took = self.failover_after(role, since, before)
        if took is None:
            assert self.error is None, f"the leader watch failed: {self.error!r}"
            since_fault = [(round(at - since, 1), now) for at, now in self.changes.get(role, [])]
            raise AssertionError(
                f"{role}: no other leader published; since the fault: "
                f"{[c for c in since_fault if c[0] >= 0] or 'no change'}"
            )
        return took


# The HA scenarios run with the rest of the test bed's tests (CI included). While working on
# something else, SPARKMILL_TESTBED_SCENARIOS=0 skips them (about 8 minutes).
SCENARIOS_SWITCH = "SPARKMILL_TESTBED_SCENARIOS"
skip_when_scenarios_off = pytest.mark.skipif(
    os.environ.get(SCENARIOS_SWITCH) == "0",
    reason=f"HA scenarios on the test bed are switched off ({SCENARIOS_SWITCH}=0)",
)
