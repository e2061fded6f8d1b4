"""ansible/site.yml on real systemd hosts: a monitored HA cluster that runs jobs and survives.

The hosts (scripts/testbed.sh): h1, h2 run ZooKeeper, a dispatcher and a resource manager;
h3 ZooKeeper, a job master and a task executor; h4 a job master and a task executor; h5 a task
executor and Prometheus. The tests run in this file's order on one converged test bed: first
those that only read the hosts or run jobs (``bed_converging``: while the second converge runs),
then the converge's own checks and the tests that kill or restart services (``bed``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from sparkmill.common.rpc.keys import generate_key
from tests.testbed.bed import CONTROLLER_ADDRESS, ROOT, TestBed, changed_tasks, recap

# The first test also waits for the session fixture (up and two converges): on a shared,
# loaded machine a converge alone has taken over 15 minutes.
pytestmark = pytest.mark.timeout(3000)

WORDCOUNT = ROOT / "examples" / "wordcount.py"
# Overall exposure (systemd-analyze security) each unit must stay within: "OK" is <= 2.0.
MAX_EXPOSURE = 2.0


def _submit(
    bed: TestBed, output: Path, timeout: float = 600, config: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """sparkmill submit examples/wordcount.py from this machine; input and output on the share."""
    env = dict(
        os.environ,
        SPARKMILL_EXAMPLES_DIR=str(bed.shared / "work" / "wordcount"),
        WORDCOUNT_OUTPUT=str(output),
        SPARK_LOCAL_IP=CONTROLLER_ADDRESS,
    )
    return subprocess.run(
        [
            str(Path(sys.prefix) / "bin" / "sparkmill"),
            "--config",
            str(config or bed.client_config()),
            "submit",
            "--json",
            str(WORDCOUNT),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


class _Reference:
    """tests/testbed/reference.py started ahead (its Spark session comes up beside the jobs it
    will check); ``rows`` hands it the outputs: (plain PySpark's word counts of the shared
    input, the rows of each output)."""

    def __init__(self, bed: TestBed) -> None:
        source = str(bed.shared / "work" / "wordcount" / "wordcount-input" / "*.txt")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.testbed.reference", source, "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"),
        )

    def rows(self, outputs: list[Path]) -> tuple[list[Any], dict[str, list[Any]]]:
        try:
            stdout, stderr = self._process.communicate(
                "".join(f"{output}\n" for output in outputs), timeout=300
            )
        finally:
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
        assert self._process.returncode == 0, stderr[-4000:]
        data = json.loads(stdout)
        return data["reference"], data["outputs"]

    def close(self) -> None:
        """Stops it when the test ends without asking (a failed job)."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.communicate()


def _unit_state(bed: TestBed, host: str, unit: str) -> dict[str, str]:
    out = bed.ssh(
        host, f"systemctl show -p ActiveState -p NRestarts -p MainPID {unit}", check=False
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_prometheus_scrapes_every_sparkmill_process_and_has_the_alert_rules(
    bed_converging: TestBed,
) -> None:
    bed = bed_converging
    monitoring = bed.groups["monitoring"][0]
    check = bed.ssh(monitoring, "promtool check config /etc/prometheus/prometheus.yml")
    assert "SUCCESS" in check.stdout + check.stderr

    # dispatcher 9249, resource manager 9250, job master 9251, task executor 1 9260.
    ports = {
        "dispatchers": 9249,
        "resource_managers": 9250,
        "job_masters": 9251,
        "task_executors": 9260,
    }
    expected = {
        f"{bed.addresses[host]}:{port}"
        for group, port in ports.items()
        for host in bed.groups[group]
    }
    assert len(expected) == 9

    def all_up() -> bool:
        result = bed.prometheus("/api/v1/query", query='up{job="sparkmill"}')["result"]
        up = {r["metric"]["instance"]: r["value"][1] for r in result}
        assert set(up) == expected, sorted(up)
        return all(value == "1" for value in up.values())

    bed.wait_until("every sparkmill target up == 1", all_up, timeout=90)
    groups = bed.prometheus("/api/v1/rules")["groups"]
    rules = {rule["name"] for group in groups for rule in group["rules"]}
    assert "SparkmillServiceDown" in rules, rules
    assert all(group["file"] == "/etc/prometheus/sparkmill-alerts.yml" for group in groups)

    # Grafana is not installed (not in Debian's archive): its provisioning files are rendered.
    datasource = bed.ssh(
        monitoring, "cat /etc/grafana/provisioning/datasources/sparkmill-prometheus.yml"
    ).stdout
    assert f"url: http://{bed.addresses[monitoring]}:9090" in datasource
    dashboard = bed.ssh(
        monitoring, "cat /var/lib/grafana/dashboards/sparkmill/sparkmill-dashboard.json"
    )
    assert json.loads(dashboard.stdout)["uid"] == "sparkmill-overview"


def test_a_job_submitted_from_the_controller_gives_plain_pysparks_rows(
    bed_converging: TestBed,
) -> None:
    bed = bed_converging
    output = bed.shared / "work" / "wordcount-submit"
    started = time.monotonic()
    checker = _Reference(bed)
    try:
        result = _submit(bed, output)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        assert json.loads(result.stdout)["status"] == "FINISHED"
        bed.timings["submit"] = time.monotonic() - started
        reference, outputs = checker.rows([output])
    finally:
        checker.close()
    assert len(reference) > 20
    assert outputs[str(output)] == reference


def test_keys_are_distributed_private_and_per_host(bed_converging: TestBed) -> None:
    bed = bed_converging
    admitted = sorted(p.name for p in (bed.secrets / "keys" / "public").glob("*.key"))
    assert "server.key" in admitted and "client-operator.key" in admitted, admitted
    for host in bed.addresses:
        public = bed.ssh(host, "ls /etc/sparkmill/keys/public").stdout.split()
        assert sorted(public) == sorted([*admitted, "zookeeper.identities"]), host
        private = bed.ssh(
            host, "stat -c '%a %U %n' /etc/sparkmill/keys/private /etc/sparkmill/keys/private/*"
        ).stdout.splitlines()
        modes = {line.split()[2].rsplit("/", 1)[-1]: line.split()[:2] for line in private}
        assert modes.pop("private") == ["700", "sparkmill"], host
        assert set(map(tuple, modes.values())) == {("600", "sparkmill")}, (host, modes)
        roles = {
            unit.removeprefix("sparkmill-").split("@")[0].removesuffix(".service")
            for unit in bed.units_of(host)
            if unit.startswith("sparkmill-")
        }
        expected = {"server.key_secret"}
        expected |= {f"{role}-{host}.key_secret" for role in roles}
        # Only the ZooKeeper identities of the roles this host runs.
        expected |= {f"zookeeper-{role}.digest" for role in roles}
        if "dispatcher" in roles:
            expected.add("rest.tokens")
        assert set(modes) == expected, host  # nobody else's secret key, no client key


def test_a_client_without_an_admitted_key_is_refused(
    bed_converging: TestBed, tmp_path: Path
) -> None:
    """A stranger who knows every public file and even the ZooKeeper digest, but holds no
    admitted key: the dispatcher never answers it, and the CLI says why that may be."""
    bed = bed_converging
    made = generate_key(tmp_path / "stranger", "client", "stranger")
    assert made is not None
    shutil.copy(bed.secrets / "keys" / "public" / "server.key", made[0].parent / "server.key")
    config = yaml.safe_load(bed.client_config().read_text())
    config["security.curve.public-keys-dir"] = str(made[0].parent)
    config["security.curve.secret-key-file"] = str(made[1])
    stranger = tmp_path / "stranger.yaml"
    stranger.write_text(yaml.safe_dump(config))
    output = bed.shared / "work" / "wordcount-stranger"
    # Both calls only wait for an answer that never comes (the CLI's contact timeout): side by
    # side they wait once.
    tried: dict[str, subprocess.CompletedProcess[str]] = {}
    submitting = threading.Thread(
        target=lambda: tried.setdefault(
            "submit", _submit(bed, output, timeout=180, config=stranger)
        ),
        daemon=True,
    )
    submitting.start()
    listing = bed.sparkmill("jobs", "list", "--json", timeout=120, config=stranger)
    submitting.join(timeout=200)
    assert listing.returncode != 0, listing.stdout
    said = listing.stdout + listing.stderr  # with --json the error is a JSON document on stdout
    print(f"\nstranger's jobs list: exit {listing.returncode}: {said.strip()[-400:]}")
    assert "key" in said and "admitted" in said, said
    assert "submit" in tried, "the stranger's submit did not return"
    submitted = tried["submit"]
    assert submitted.returncode != 0, submitted.stdout
    assert "admitted" in submitted.stdout + submitted.stderr, submitted.stderr
    assert not output.exists()
    # The operator's key still gets in, and the stranger's job is nowhere.
    result = bed.sparkmill("jobs", "list", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "wordcount-stranger" not in result.stdout


def test_the_rest_api_needs_a_token_of_the_play(bed_converging: TestBed) -> None:
    bed = bed_converging
    services = bed.cluster_status()["services"]
    rest_url = next(s["rest_url"] for s in services if s["role"] == "dispatcher" and s["leader"])
    tokens = dict(
        line.split()
        for line in (bed.secrets / "keys" / "private" / "rest.tokens").read_text().splitlines()
    )
    assert set(tokens) == {"operator", "viewer"}

    def status(token: str, method: str = "GET", path: str = "/v1/jobs") -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(rest_url + path, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=15) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    assert status("") == 401 and status("x" * 40) == 401
    assert status(tokens["viewer"]) == 200 and status(tokens["operator"]) == 200
    assert status(tokens["viewer"], "PATCH", "/v1/jobs/" + "0" * 32) == 403


def test_an_unauthenticated_zookeeper_client_cannot_read_or_write_sparkmills_znodes(
    bed_converging: TestBed,
) -> None:
    bed = bed_converging
    quorum = ",".join(f"{bed.addresses[h]}:2181" for h in bed.groups["zookeeper"])
    outsider = KazooClient(hosts=quorum, timeout=15)
    outsider.start(timeout=30)
    try:
        assert "sparkmill" in outsider.get_children("/")  # "/" is not ours: listable
        attempts: list[Callable[[], object]] = [
            lambda: outsider.get_children("/sparkmill"),
            lambda: outsider.get("/sparkmill"),
            lambda: outsider.create("/sparkmill/intruder", b"x"),
            lambda: outsider.set("/sparkmill", b"x"),
            lambda: outsider.delete("/sparkmill", recursive=True),
        ]
        for attempt in attempts:
            with pytest.raises(NoAuthError):
                attempt()
    finally:
        outsider.stop()
        outsider.close()
    # With a service role's digest the same client reads them: the nodes are there, only closed.
    digest = bed.secrets / "keys" / "private" / "zookeeper-dispatcher.digest"
    user, _, password = digest.read_text().strip().partition(":")
    member = KazooClient(hosts=quorum, timeout=15, auth_data=[("digest", f"{user}:{password}")])
    member.start(timeout=30)
    try:
        assert member.get_children("/sparkmill"), "sparkmill's znodes are missing"
    finally:
        member.stop()
        member.close()


def test_unit_security_exposure(bed_converging: TestBed) -> None:
    bed = bed_converging
    scores: dict[str, float] = {}
    for host in bed.addresses:
        for unit in bed.units_of(host):
            out = bed.ssh(host, f"systemd-analyze security --no-pager {unit}").stdout
            match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out)
            assert match, out[-2000:]
            scores[unit] = max(scores.get(unit, 0.0), float(match.group(1)))
    print(f"\nsystemd-analyze security: {scores}")
    assert len(scores) == 6
    assert all(score <= MAX_EXPOSURE for score in scores.values()), scores


def test_units_are_bounded_in_memory_and_tasks(bed_converging: TestBed) -> None:
    bed = bed_converging
    expected = {  # the role's defaults: a task executor is sized for its Spark JVM
        "task-executor": {"MemoryMax": str(4 << 30), "TasksMax": "4096"},
        "other": {"MemoryMax": str(1 << 30), "TasksMax": "512"},
    }
    for host in bed.addresses:
        for unit in bed.units_of(host):
            if not unit.startswith("sparkmill-"):
                continue
            out = bed.ssh(host, f"systemctl show -p MemoryMax -p TasksMax {unit}").stdout
            shown = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
            kind = "task-executor" if "task-executor" in unit else "other"
            assert shown == expected[kind], (host, unit, shown)


def test_converge_leaves_every_unit_active_and_a_second_run_changes_nothing(bed: TestBed) -> None:
    if not bed.converges:
        pytest.skip("SPARKMILL_TESTBED_REUSE: the bed was converged by hand")
    first = bed.converges[0]
    assert first.returncode == 0, first.stdout[-8000:] + first.stderr[-2000:]
    assert len(bed.converges) == 2, "the second converge did not run"
    second = bed.converges[1]
    assert second.returncode == 0, second.stdout[-8000:] + second.stderr[-2000:]
    first_recap, second_recap = recap(first.stdout), recap(second.stdout)
    assert set(first_recap) == set(bed.addresses), first.stdout[-3000:]
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in first_recap.values())
    changed = {host: counts["changed"] for host, counts in second_recap.items()}
    assert changed == dict.fromkeys(bed.addresses, 0), changed_tasks(second.stdout)

    expected = {host: bed.units_of(host) for host in bed.addresses}
    # The test bed's layout: 3 ZooKeeper servers, 2 dispatchers + resource managers, 2 job
    # masters, 3 task executors, 1 Prometheus.
    counts = {
        unit: sum(unit in units for units in expected.values())
        for unit in (
            "zookeeper-sparkmill.service",
            "sparkmill-dispatcher.service",
            "sparkmill-resource-manager.service",
            "sparkmill-job-master.service",
            "sparkmill-task-executor@1.service",
            "prometheus.service",
        )
    }
    assert list(counts.values()) == [3, 2, 2, 2, 3, 1], counts
    for host, units in expected.items():
        states = bed.ssh(host, "systemctl is-active " + " ".join(units), check=False).stdout.split()
        assert states == ["active"] * len(units), (
            f"{host}: {dict(zip(units, states, strict=False))}"
        )
        system = bed.ssh(host, "systemctl is-system-running", check=False).stdout.strip()
        if system != "running":
            # Name the unit that failed, with its last lines: "degraded" alone says nothing.
            failed = bed.ssh(
                host, "systemctl list-units --failed --no-legend --plain", check=False
            ).stdout
            journal = bed.ssh(host, "journalctl -n 60 --no-pager -p warning", check=False).stdout
            raise AssertionError(f"{host}: system {system}\nfailed:\n{failed}\n{journal}")


@pytest.mark.parametrize(
    ("group", "unit"),
    [
        ("task_executors", "sparkmill-task-executor@1.service"),
        ("dispatchers", "sparkmill-dispatcher.service"),
    ],
)
def test_a_killed_service_is_restarted_by_systemd_and_rejoins(
    bed: TestBed, group: str, unit: str
) -> None:
    host = bed.groups[group][-1]
    before = _unit_state(bed, host, unit)
    assert before["ActiveState"] == "active", before
    # On a host whose cgroup tree is the hybrid v1 one (systemd-nspawn on a machine without
    # systemd) systemctl reports an I/O error for its cgroup-wide kill although every process of
    # the unit got the signal: the restart below is the proof, not the exit code.
    bed.ssh(host, f"systemctl kill -s KILL {unit}", check=False)

    def restarted() -> dict[str, str] | None:
        now = _unit_state(bed, host, unit)
        ok = (
            now["ActiveState"] == "active"
            and int(now["NRestarts"]) > int(before["NRestarts"])
            and now["MainPID"] not in ("0", before["MainPID"])
        )
        return now if ok else None

    now = bed.wait_until(f"{unit} on {host} restarted by systemd", restarted, timeout=60)
    role = unit.removeprefix("sparkmill-").split("@")[0].removesuffix(".service")

    def rejoined() -> bool:
        services = bed.cluster_status()["services"]
        return any(
            s.get("role") == role
            and str(s.get("pid")) == now["MainPID"]
            and bed.addresses[host] in str(s.get("address"))
            for s in services
        )

    bed.wait_until(f"the restarted {role} of {host} in cluster status", rejoined, timeout=90)


def test_rolling_restart_while_jobs_run_gives_exact_output(bed: TestBed) -> None:
    restart: dict[str, subprocess.CompletedProcess[str]] = {}
    began = time.monotonic()
    thread = threading.Thread(
        target=lambda: restart.setdefault("result", bed.playbook("rolling-restart.yml")),
        daemon=True,
    )
    thread.start()
    # The reference's Spark session starts once the restarts are done, while the last job
    # still runs (not beside the restarts, whose task executors start their own JVMs).
    checkers: list[_Reference] = []

    def start_reference() -> None:
        thread.join()
        checkers.append(_Reference(bed))

    starter = threading.Thread(target=start_reference, daemon=True)
    starter.start()
    try:
        # Jobs one after the other for as long as the restart goes on: each runs across some
        # restarts (task executors, job masters, then the leaders).
        outputs: list[Path] = []
        failures: list[str] = []
        while thread.is_alive() or not outputs:
            output = bed.shared / "work" / f"wordcount-rolling-{len(outputs)}"
            result = _submit(bed, output)
            outputs.append(output)
            print(f"{output.name}: exit {result.returncode} {result.stdout[-300:]!r}")
            if result.returncode != 0:
                failures.append(
                    f"{output.name}: exit {result.returncode}\n{result.stdout[-3000:]}"
                    f"{result.stderr[-3000:]}"
                )
        thread.join(timeout=900)
        bed.timings["rolling-restart"] = time.monotonic() - began
        played = restart["result"]
        assert played.returncode == 0, played.stdout[-8000:] + played.stderr[-2000:]
        assert recap(played.stdout), played.stdout[-2000:]
        assert not failures, "\n".join(failures)
        starter.join(timeout=60)
        assert checkers, "the reference did not start"
        reference, rows = checkers[0].rows(outputs)
        for output in outputs:
            assert rows[str(output)] == reference, output
    finally:
        starter.join(timeout=60)
        for checker in checkers:
            checker.close()
