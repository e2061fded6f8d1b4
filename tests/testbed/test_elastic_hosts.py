"""Task executors on demand across hosts: the resource managers run the ``systemd`` driver.

The bed's own configuration installs the on-demand machinery everywhere (``sparkmill_elastic``:
the template unit, the resource managers' SSH key behind the systemctl gate, the hosts' host
keys; two slots of on-demand task executors per task-executor host), and its second converge
proves it idempotent; only the resource managers' driver is held at ``none`` there, so that the
other scenarios meet the fixed task executors alone. This module turns the driver on in both
resource managers' files (idle task executors released after 20 s) and restarts them.

A job with more subtasks than the fixed task executors' slots (3 hosts x 2) holds all of them at
once: the leading resource manager starts template units on other hosts until it fits. While
the job holds, the leader's unit is killed: the standby takes over, finds the running units on
the hosts, adopts them (they re-register under their instance names) and starts none. The job
then finishes with the exact output, and the adopted task executors go once idle: only a
resource manager that adopted them releases them. The teardown stops any on-demand unit left
and puts the resource managers' files back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkmill.cli import load_pipeline
from sparkmill.common.v1 import common_pb2
from tests.testbed.bed import TestBed
from tests.testbed.cluster import (
    amend_config,
    cluster_client,
    leader_hosts,
    restore_config,
    skip_when_scenarios_off,
    status_name,
    wait_cluster,
    wait_job,
)

pytestmark = [pytest.mark.timeout(1500), skip_when_scenarios_off]

PIPELINE = Path(__file__).with_name("elastic_pipeline.py")
UNIT = "sparkmill-task-executor-elastic"
FIXED_SLOTS = 2  # sparkmill_slots_per_task_executor of the bed, one fixed executor per host
PARALLELISM = 10  # 3 hosts x 2 fixed slots = 6: two on-demand task executors of 2 more
ROWS = 5000
IDLE_TIMEOUT_S = 20


def _elastic_units(bed: TestBed) -> dict[str, list[str]]:
    """host -> the on-demand units active there."""
    units = {}
    for host in bed.groups["task_executors"]:
        out = bed.ssh(
            host,
            f"systemctl list-units '{UNIT}@*' --state=active --plain --no-legend --no-pager",
            timeout=30,
        ).stdout
        units[host] = [line.split()[0] for line in out.splitlines() if line.strip()]
    return units


def _count(units: dict[str, list[str]]) -> int:
    return sum(len(v) for v in units.values())


def _workers(bed: TestBed) -> dict[str, Any]:
    workers: dict[str, Any] | None = bed.cluster_status()["workers"]
    assert workers is not None, "the resource manager runs no driver"
    return workers


RM_CONFIG = "/etc/sparkmill/resource-manager.yaml"
RM_UNIT = "sparkmill-resource-manager.service"


def _on_resource_managers(bed: TestBed, action: Callable[[str], object]) -> None:
    """``action(host)`` on both resource-manager hosts at once."""
    with ThreadPoolExecutor(max_workers=len(bed.groups["resource_managers"])) as pool:
        for future in [pool.submit(action, host) for host in bed.groups["resource_managers"]]:
            future.result()


@pytest.fixture(scope="module")
def elastic_bed(bed: TestBed) -> Iterator[TestBed]:
    def turn_on(host: str) -> None:
        rendered = yaml.safe_load(bed.ssh(host, f"cat {RM_CONFIG}", timeout=30).stdout)
        # What the role rendered for the driver, held off by the bed's sparkmill_config_extra.
        assert rendered["resourcemanager.driver"] == "none", rendered
        assert rendered["resourcemanager.systemd.unit"] == UNIT, rendered
        hosts = rendered["resourcemanager.systemd.hosts"].split(",")
        expected = [f"{bed.addresses[h]}={FIXED_SLOTS}" for h in bed.groups["task_executors"]]
        assert sorted(hosts) == sorted(expected), rendered
        amend_config(
            bed,
            host,
            RM_CONFIG,
            {
                "resourcemanager.driver": "systemd",
                "resourcemanager.taskmanager-timeout": f"{IDLE_TIMEOUT_S} s",
                "resourcemanager.start-worker.retry-interval": "5 s",
            },
        )
        bed.ssh(host, f"systemctl restart {RM_UNIT}", timeout=120)

    try:
        _on_resource_managers(bed, turn_on)
        wait_cluster(bed)
        yield bed
    finally:
        for host in bed.groups["task_executors"]:
            bed.ssh(host, f"systemctl stop '{UNIT}@*'", timeout=120, check=False)
        # The bed's own configuration again (driver none), for the tests after this one.
        _on_resource_managers(bed, lambda host: restore_config(bed, host, RM_CONFIG, RM_UNIT))
        wait_cluster(bed)


def _submit(client: Any, bed: TestBed) -> tuple[str, Path, Path]:
    work = bed.shared / "work" / "elastic" / f"grow-{int(time.time() * 1000)}"
    output, hold = work / "out", work / "hold"
    env = {
        "ELASTIC_OUTPUT": str(output),
        "ELASTIC_HOLD": str(hold),
        "ELASTIC_PARALLELISM": str(PARALLELISM),
        "ELASTIC_ROWS": str(ROWS),
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        graph = load_pipeline(PIPELINE).build_job_graph()
    return client.submit(graph, timeout=120), output, hold


def _rows(output: Path) -> list[tuple[int, int]]:
    rows = []
    for path in sorted(output.glob("part-*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                rows.append((record["id"], record["twice"]))
    return sorted(rows)


def test_a_job_grows_onto_other_hosts_survives_a_failover_and_shrinks_back(
    elastic_bed: TestBed,
) -> None:
    bed = elastic_bed
    assert _count(_elastic_units(bed)) == 0
    with cluster_client(bed) as client:
        job_id, output, hold = _submit(client, bed)

        def all_running() -> bool:
            return len(list(hold.glob("run-*"))) >= PARALLELISM

        bed.wait_until(f"{PARALLELISM} subtasks holding at once", all_running, timeout=420)
        grown = _elastic_units(bed)
        assert _count(grown) == 2, grown  # 4 more slots, in two task executors of 2
        before = _workers(bed)
        assert (before["registered"], before["started_total"]) == (2, 2), before

        # The resource manager fails over while every slot is in use.
        old = leader_hosts(bed)["resource-manager"]
        bed.ssh(old, "systemctl kill -s KILL sparkmill-resource-manager.service", check=False)

        def new_leader_adopted() -> dict[str, Any] | None:
            leader = leader_hosts(bed).get("resource-manager")
            if leader is None or leader == old:
                return None
            workers = _workers(bed)
            return workers if workers["registered"] == 2 else None

        adopted = bed.wait_until("the new leader adopts both", new_leader_adopted, timeout=180)
        # Adopted, none started: the new leader has requested nothing.
        assert (adopted["started_total"], adopted["failed_total"]) == (0, 0), adopted
        assert _elastic_units(bed) == grown

        (hold / "release").touch()
        result = wait_job(client, job_id, timeout=600)
        assert result.status == common_pb2.FINISHED, (
            status_name(result.status),
            result.failure.message,
        )
    assert (output / "_SUCCESS").exists()
    assert _rows(output) == [(i, 2 * i) for i in range(ROWS)]
    assert _elastic_units(bed) == grown  # still no duplicate

    def shrunk() -> bool:
        return _count(_elastic_units(bed)) == 0

    bed.wait_until("the on-demand task executors released", shrunk, timeout=IDLE_TIMEOUT_S + 150)
    workers = _workers(bed)
    assert workers["released_total"] == 2 and workers["started_total"] == 0, workers
    status = bed.cluster_status()
    assert len(status["task_executors"]) == len(bed.groups["task_executors"])  # the fixed ones
