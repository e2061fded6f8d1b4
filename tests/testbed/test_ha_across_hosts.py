"""HA across hosts (scenarios 1-5): lose a host, cut one off, lose ZooKeeper nodes.

Each test runs the HA pipeline (tests/testbed/ha_pipeline.py: a word count and a join, JSON
outputs) with its join held until the test has injected its fault, then checks the outputs row
by row against the answer plain Python computes (tests/testbed/ha_data.py). Faults come from
tests/testbed/faults.py, whose context managers undo them and wait for the services, so every
test leaves the bed whole for the next. Failover times go to ``CACHE/ha-measurements.json``.

Layout (scripts/testbed.sh): ZooKeeper on h1-h3, dispatcher + resource manager on h1 and h2,
JobMasters on h3 and h4, task executors on h3-h5; ZooKeeper sessions of 6 s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sparkmill.client import ClusterClient
from sparkmill.common.v1 import common_pb2
from tests.testbed import ha_data
from tests.testbed.bed import CACHE, TestBed
from tests.testbed.cluster import (
    HaJob,
    LeaderWatch,
    answer,
    cluster_client,
    host_of,
    job_master_host,
    leader_hosts,
    skip_when_scenarios_off,
    status_name,
    submit_ha,
    wait_cluster,
    wait_job,
)
from tests.testbed.faults import Faults

pytestmark = [pytest.mark.timeout(900), skip_when_scenarios_off]

SESSION_TIMEOUT_S = 6.0
MEASUREMENTS = CACHE / "ha-measurements.json"


@pytest.fixture(scope="module")
def client(bed: TestBed) -> Iterator[ClusterClient]:
    wait_cluster(bed)
    with cluster_client(bed) as c:
        yield c


@pytest.fixture
def faults(bed: TestBed) -> Iterator[Faults]:
    f = Faults(bed)
    try:
        yield f
    finally:
        if f.in_force():  # a test that failed half-way: the next one gets a whole bed
            f.heal_all()
            wait_cluster(bed)


def record(name: str, value: float) -> None:
    """Keeps a measurement (seconds) for docs/performance.md; printed too."""
    print(f"\nMEASURED {name}: {value:.2f} s")
    data: dict[str, Any] = json.loads(MEASUREMENTS.read_text()) if MEASUREMENTS.exists() else {}
    data.setdefault(name, []).append(round(value, 2))
    MEASUREMENTS.parent.mkdir(parents=True, exist_ok=True)
    MEASUREMENTS.write_text(json.dumps(data, indent=1) + "\n")


def wait_held(bed: TestBed, client: ClusterClient, job: HaJob, timeout: float = 300) -> None:
    def held() -> bool:
        status = client.status(job.job_id, timeout=30).status
        assert status not in (common_pb2.FAILED, common_pb2.CANCELED), status_name(status)
        return job.held()

    bed.wait_until(f"job {job.job_id[:8]} held", held, timeout=timeout, interval=1.0)


def wait_finished_subtasks(bed: TestBed, client: ClusterClient, job: HaJob, at_least: int) -> None:
    """Until ``at_least`` subtasks of ``job`` finished (recorded for a JobMaster taking over)."""

    def finished() -> bool:
        details = client.status(job.job_id, timeout=30)
        done = sum(v.tasks_by_state.get(common_pb2.EXECUTION_FINISHED, 0) for v in details.vertices)
        return done >= at_least

    bed.wait_until(f"{at_least} subtasks of {job.job_id[:8]} finished", finished, timeout=300)


def finish_exact(client: ClusterClient, job: HaJob, timeout: float = 300) -> Any:
    """The job FINISHES and both outputs are exactly the answer, no row missing or doubled."""
    result = wait_job(client, job.job_id, timeout=timeout)
    assert result.status == common_pb2.FINISHED, (status_name(result.status), result.failure)
    check = ha_data.check(job.output, ANSWER)
    assert check.exact, check
    return result


ANSWER: dict[str, list[tuple[Any, ...]]] = {}


@pytest.fixture(autouse=True)
def _answer(bed: TestBed) -> None:
    if not ANSWER:
        ANSWER.update(answer(bed))
        assert len(ANSWER["counts"]) == len(ha_data.WORDS)


def journal(bed: TestBed, host: str, unit: str, since: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
    return bed.ssh(
        host, f"journalctl --no-pager -o cat -u {unit} --since '{stamp}'", check=False
    ).stdout


def output_listing(job: HaJob) -> list[str]:
    return sorted(str(p.relative_to(job.output)) for p in job.output.rglob("*"))


# -- 1 ---------------------------------------------------------------------------------------------


def test_power_off_the_leaders_host_mid_pipeline_standbys_take_over_and_the_job_finishes(
    bed: TestBed, client: ClusterClient, faults: Faults
) -> None:
    leaders = leader_hosts(bed)
    if leaders["dispatcher"] != leaders["resource-manager"]:
        # Both leaders on one host: the resource manager's moves by a restart of its leader.
        bed.ssh(leaders["resource-manager"], "systemctl restart sparkmill-resource-manager")
        bed.wait_until(
            "both leaders on one host",
            lambda: len(set(leader_hosts(bed).values())) == 1,
            timeout=120,
        )
        leaders = leader_hosts(bed)
    victim = leaders["dispatcher"]
    job = submit_ha(client, bed, "s1-power-off", hold=True)
    wait_held(bed, client, job)
    with LeaderWatch(bed) as watch:
        time.sleep(0.5)
        before = {role: watch.leader(role) for role in watch.roles}
        with faults.power_off(victim) as fault:
            bed.wait_until(
                "new leaders published",
                lambda: all(
                    watch.failover_after(role, fault.at, before[role]) is not None
                    for role in watch.roles
                ),
                timeout=120,
                interval=0.5,
            )
            for role in watch.roles:
                took = watch.failover_after(role, fault.at, before[role])
                assert took is not None
                record(f"power-off {role} failover", took)
                assert victim not in (watch.leader(role) or "")
            now = leader_hosts(bed)
            assert victim not in now.values(), now
            job.release()
            finish_exact(client, job)
    wait_cluster(bed)


# -- 2 ---------------------------------------------------------------------------------------------


def test_partition_the_job_masters_host_another_takes_over_and_the_old_leader_stops_acting(
    bed: TestBed, client: ClusterClient, faults: Faults
) -> None:
    job = submit_ha(client, bed, "s2-partition-jm", hold=True)
    wait_held(bed, client, job)
    # The word count's two sources are done before the cut: the new JobMaster must keep them.
    wait_finished_subtasks(bed, client, job, at_least=2)
    old = job_master_host(client, bed, job.job_id)
    role = f"job-{job.job_id}"
    with LeaderWatch(bed, roles=[role]) as watch:
        time.sleep(0.5)
        before = watch.leader(role)
        assert before is not None and bed.addresses[old] in before
        with faults.partition(old) as fault:
            bed.wait_until(
                "a JobMaster on another host leads the job",
                lambda: watch.failed_over(role, fault.at, before) is not None,
                timeout=120,
                interval=0.5,
            )
            took = watch.failover_after(role, fault.at, before)
            assert took is not None
            record("partition JobMaster failover", took)
            new = host_of(bed, watch.leader(role) or "")
            assert new != old
            job.release()
            result = finish_exact(client, job)
            # The finished word count was kept: the new JobMaster recovered those subtasks.
            assert result.details.recovered_subtasks > 0, result.details
            listing = output_listing(job)
        # Healed: the old leader hears it lost the job; it must not commit, deploy or report.
        time.sleep(SESSION_TIMEOUT_S + 4)
        assert output_listing(job) == listing
        assert ha_data.check(job.output, ANSWER).exact
        # Nor publish itself again: after the failover only the new leader was ever published
        # (then, the outcome recorded, the job's election was removed).
        published = {
            host_of(bed, address)
            for at, address in watch.changes[role]
            if at >= fault.at and address is not None
        }
        assert published == {new}, watch.changes[role]
    log = journal(bed, old, "sparkmill-job-master", fault.at)
    print(f"\n{old} JobMaster after the partition:\n{log[-3000:]}")
    assert "revoked" in log, log[-3000:]
    # It stopped before its successor was published (the hosts share this machine's clock):
    # the grace it gave its suspended connection ended before the session could expire.
    revoked_at = revocation_time(bed, old, "sparkmill-job-master", role, fault.at)
    assert revoked_at is not None and revoked_at < fault.at + took, (revoked_at, fault.at, took)
    record("partition JobMaster revoked after", revoked_at - fault.at)
    wait_cluster(bed)


def revocation_time(bed: TestBed, host: str, unit: str, role: str, since: float) -> float | None:
    """When ``unit`` on ``host`` first logged that it lost leadership of ``role`` after
    ``since``."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
    lines = bed.ssh(
        host, f"journalctl --no-pager -o short-unix -u {unit} --since '{stamp}'", check=False
    ).stdout.splitlines()
    for line in lines:
        if f"{role}: leadership revoked" in line:
            return float(line.split(" ", 1)[0])
    return None


# -- 3 ---------------------------------------------------------------------------------------------


def test_partition_a_task_executor_host_its_subtasks_fail_over_and_late_reports_are_refused(
    bed: TestBed, client: ClusterClient, faults: Faults
) -> None:
    # Three holding subtasks, each in a slot of its own, on hosts of two slots: whichever host
    # the JobMaster runs on, another runs one of them, a subtask that cannot finish before the
    # release (a word-count subtask might, just as the cut is made).
    hosts = bed.groups["task_executors"]
    job = submit_ha(client, bed, "s3-partition-te", hold=True, holders=3)
    wait_held(bed, client, job)
    jm = job_master_host(client, bed, job.job_id)
    holding = {
        (v.vertex_id, i): te
        for v in client.status(job.job_id, timeout=30).vertices
        if v.name.endswith("hold")
        for i, te in enumerate(v.subtask_task_executors)
    }
    candidates = [h for h in hosts if h != jm and any(te.startswith(h) for te in holding.values())]
    assert candidates, (jm, holding)
    victim = candidates[-1]
    lost = {key for key, te in holding.items() if te.startswith(victim)}
    with faults.partition(victim) as fault:

        def failed_over() -> bool:
            # Every holding subtask the victim ran has an attempt on another task executor.
            # Asked of the placement, not of the restart count or the exception history: those
            # start again under a new JobMaster, and the victim may be the ZooKeeper ensemble's
            # leader, whose loss can cost the JobMaster its leadership while the quorum elects
            # another.
            placed = {
                (v.vertex_id, i): te
                for v in client.status(job.job_id, timeout=30).vertices
                for i, te in enumerate(v.subtask_task_executors)
            }
            return all(placed.get(key) and not placed[key].startswith(victim) for key in lost)

        bed.wait_until("the lost task executor's subtasks failed over", failed_over, 120, 0.5)
        record("partition task executor failover", time.time() - fault.at)
        job.release()
        finish_exact(client, job)
        listing = output_listing(job)
    # Healed: its late reports reach the JobMaster and are refused; nothing is used twice.
    time.sleep(SESSION_TIMEOUT_S + 4)
    assert output_listing(job) == listing
    assert ha_data.check(job.output, ANSWER).exact
    wait_cluster(bed)
    print(f"\n{victim} task executor after the partition:\n")
    print(journal(bed, victim, "sparkmill-task-executor@1", fault.at)[-3000:])


# -- 4 ---------------------------------------------------------------------------------------------


def test_quorum_one_zookeeper_node_down_interrupts_nothing(
    bed: TestBed, client: ClusterClient, faults: Faults
) -> None:
    job = submit_ha(client, bed, "s4-quorum-one", hold=True)
    wait_held(bed, client, job)
    jm = job_master_host(client, bed, job.job_id)
    restarts = client.status(job.job_id, timeout=30).restarts
    # The server the JobMaster's client is connected to: the one whose loss the JobMaster sees
    # as SUSPENDED while its client moves to another server.
    server = zookeeper_server_of(bed, jm, "sparkmill-job-master")
    with LeaderWatch(bed) as watch:
        watch.watch(f"job-{job.job_id}")
        time.sleep(0.5)
        before = {role: watch.leader(role) for role in watch.roles}
        with faults.zookeeper_stopped(server) as stopped:
            time.sleep(2 * SESSION_TIMEOUT_S)
            job.release()
            finish_exact(client, job)
        # Not one leader changed, the job was never restarted and kept its JobMaster. (Once the
        # job's outcome is recorded its election is removed: its leader is then nobody.)
        job_role = f"job-{job.job_id}"
        job_leaders = [address for _, address in watch.changes[job_role]]
        assert job_leaders in ([before[job_role]], [before[job_role], None]), job_leaders
        roles = [role for role in watch.roles if role != job_role]
        assert {role: watch.leader(role) for role in roles} == {r: before[r] for r in roles}
        assert all(len(watch.changes[role]) == 1 for role in roles), watch.changes
    assert client.status(job.job_id, timeout=30).restarts == restarts
    assert job_master_host(client, bed, job.job_id) == jm
    log = journal(bed, jm, "sparkmill-job-master", stopped[0].at)
    print(f"\n{jm} JobMaster while {server}'s ZooKeeper was stopped:\n{log[-2000:]}")
    assert "SUSPENDED" in log, "the JobMaster's client never lost its server"
    # Only the revocation of the finished job's election ("stopped"), none for the suspension.
    revoked = [line for line in log.splitlines() if f"job-{job.job_id}: leadership revoked" in line]
    assert all(line.endswith("leadership revoked: stopped") for line in revoked), revoked


def zookeeper_server_of(bed: TestBed, host: str, unit: str) -> str:
    """The bed host whose ZooKeeper server ``unit`` on ``host`` is connected to."""
    established = bed.ssh(
        host,
        f"pid=$(systemctl show -p MainPID --value {unit}); "
        "ss -Htnp state established '( dport = :2181 )' | grep \"pid=$pid,\"",
    ).stdout.split()
    # Local address and port, then the server's: 198.18.x.y:2181.
    peer = next(field for field in established if field.endswith(":2181"))
    address = peer.rsplit(":", 1)[0]
    return next(h for h in bed.groups["zookeeper"] if bed.addresses[h] == address)


def test_quorum_two_zookeeper_nodes_down_leaders_suspend_then_resume_and_the_job_finishes(
    bed: TestBed, client: ClusterClient, faults: Faults
) -> None:
    job = submit_ha(client, bed, "s4-quorum-two", hold=True)
    wait_held(bed, client, job)
    with LeaderWatch(bed) as watch:
        zk = bed.groups["zookeeper"]
        with faults.zookeeper_stopped(zk[0], zk[1]) as stopped:
            # No quorum: every session expires; no service may go on as a leader.
            time.sleep(2 * SESSION_TIMEOUT_S + 3)
            status = bed.sparkmill("cluster", "status", "--json", timeout=120)
            suspended_at = stopped[-1].at
        resumed = time.time()
        print(f"\ncluster status without a quorum: exit {status.returncode} {status.stdout[-500:]}")
        bed.wait_until(
            "leaders of both roles again",
            lambda: (
                all(watch.failover_after(r, resumed, None) for r in watch.roles)
                or len(leader_hosts(bed)) == 2
            ),
            timeout=180,
            interval=1.0,
        )
        record("quorum regained to leaders", time.time() - resumed)
    revoked = [
        host
        for host in bed.groups["dispatchers"]
        if "revoked" in journal(bed, host, "sparkmill-dispatcher", suspended_at)
    ]
    assert revoked, "no dispatcher gave up leadership without a quorum"
    job.release()
    finish_exact(client, job)
