"""High availability with a real ZooKeeper server and real service processes (issue 4).

Every control process has a standby; leaders are SIGKILLed (or SIGSTOPped past their ZooKeeper
session) in the middle of a multi-stage job, which must still finish exactly once.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

import pytest

from sparkmill.common.core.errors import FencingMismatchError, NotLeaderError
from sparkmill.common.ha.progress_log import FileJobProgressStore, replay
from sparkmill.common.ha.zookeeper.server import zookeeper_available
from sparkmill.common.rpc.client import RpcClient
from sparkmill.common.v1 import (
    common_pb2,
    dispatcher_pb2,
    jobs_pb2,
    resource_manager_pb2,
    task_executor_pb2,
)
from sparkmill.common.v1.gateways import (
    DispatcherClient,
    ResourceManagerClient,
    TaskExecutorClient,
)
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import ClusterFactory, RunningCluster, eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not zookeeper_available(),
        reason="Debian's zookeeper package is not installed (scripts/bootstrap.sh installs it)",
    ),
]

FINISHED = common_pb2.EXECUTION_FINISHED


@pytest.fixture
def ha_cluster(cluster_factory: ClusterFactory) -> RunningCluster:
    return cluster_factory(task_executors=2, slots=2, ha=True, standbys=1)


def long_job(name: str = "ha-job", sleep_s: float = 1.0):
    # 3 stages x 4 subtasks x 1 s on 4 slots: ~3-4 s of work in waves.
    return noop_pipeline(name, parallelism=4, vertices=3, pattern="ALL_TO_ALL", sleep_s=sleep_s)


def finished_tasks(cluster: RunningCluster, job_id: str) -> int:
    details = cluster.client.status(job_id, timeout=30)
    return sum(v.tasks_by_state.get(FINISHED, 0) for v in details.vertices)


def leader_session(cluster: RunningCluster, address: str, role: str) -> str:
    """The session id of the leader at ``address``, asked with the client's key."""

    async def ask() -> str:
        rpc = RpcClient(address, security=cluster.cluster.transport_security("client"))
        try:
            request = common_pb2.GetLeaderSessionRequest()
            if role == "dispatcher":
                return (await DispatcherClient(rpc).get_leader_session(request)).session_id
            return (await ResourceManagerClient(rpc).get_leader_session(request)).session_id
        finally:
            await rpc.close()

    return asyncio.run(ask())


def leader_pid(cluster: RunningCluster, role: str) -> int:
    view = cluster.client.cluster_status(timeout=30)
    if role == "dispatcher":
        return view.dispatcher.pid
    return view.resource_manager.resource_manager.pid


def kill(cluster: RunningCluster, pid: int, sig: int = signal.SIGKILL) -> None:
    os.kill(pid, sig)
    if sig == signal.SIGKILL:
        popen = cluster.cluster._popen.get(pid)
        if popen is not None:
            popen.wait(timeout=30)


def test_dispatcher_leader_killed_mid_job(ha_cluster: RunningCluster) -> None:
    client = ha_cluster.client
    job_id = client.submit(long_job().build_job_graph())
    eventually(lambda: finished_tasks(ha_cluster, job_id) >= 2, timeout=60)
    old = leader_pid(ha_cluster, "dispatcher")
    kill(ha_cluster, old)
    result = client.wait(job_id, timeout=120)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert leader_pid(ha_cluster, "dispatcher") != old
    # Exactly once: every subtask finished in its first attempt, nothing ran twice.
    assert result.details.restarts == 0
    assert sum(v.tasks_by_state.get(FINISHED, 0) for v in result.details.vertices) == 12


def test_job_acknowledged_just_before_the_dispatcher_dies_is_not_lost(
    ha_cluster: RunningCluster,
) -> None:
    client = ha_cluster.client
    old = leader_pid(ha_cluster, "dispatcher")
    job_id = client.submit(long_job("acked", sleep_s=0.2).build_job_graph())
    kill(ha_cluster, old)  # right after the acknowledgement
    result = client.wait(job_id, timeout=120)
    assert result.status == common_pb2.FINISHED, result.failure.message


def test_resource_manager_leader_killed_mid_job(ha_cluster: RunningCluster) -> None:
    client = ha_cluster.client
    job_id = client.submit(long_job("rm-failover").build_job_graph())
    eventually(lambda: finished_tasks(ha_cluster, job_id) >= 2, timeout=60)
    old = leader_pid(ha_cluster, "resource-manager")
    kill(ha_cluster, old)
    result = client.wait(job_id, timeout=120)
    assert result.status == common_pb2.FINISHED, result.failure.message
    # The new leader rebuilt its view from the task executors' slot reports.
    view = eventually(
        lambda: (v := client.cluster_status(timeout=30)).resource_manager.slots_total == 4 and v,
        timeout=60,
    )
    assert view.resource_manager.resource_manager.pid != old


def test_job_master_process_killed_mid_job(ha_cluster: RunningCluster) -> None:
    client = ha_cluster.client
    job_id = client.submit(long_job("jm-failover").build_job_graph())
    eventually(lambda: finished_tasks(ha_cluster, job_id) >= 2, timeout=60)
    address = client.status(job_id).job_master_address
    view = client.cluster_status()
    victim = next(p.pid for p in view.job_master_process_infos if p.address == address)
    kill(ha_cluster, victim)
    result = client.wait(job_id, timeout=180)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert client.status(job_id).job_master_address != address


def job_master_pid(cluster: RunningCluster, job_id: str) -> tuple[str, int]:
    address = cluster.client.status(job_id).job_master_address
    view = cluster.client.cluster_status()
    return address, next(p.pid for p in view.job_master_process_infos if p.address == address)


def test_a_job_master_killed_as_soon_as_it_leads_a_new_job_is_taken_over(
    ha_cluster: RunningCluster,
) -> None:
    # A job's first JobMaster is published with its election and deploys while its progress
    # log's first records are still being written: dying right then must cost nothing but time.
    client = ha_cluster.client
    job_id = client.submit(long_job("jm-early", sleep_s=0.5).build_job_graph())
    eventually(lambda: client.status(job_id).job_master_address, timeout=60)
    address, victim = job_master_pid(ha_cluster, job_id)
    kill(ha_cluster, victim)
    result = client.wait(job_id, timeout=180)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert sum(v.tasks_by_state.get(FINISHED, 0) for v in result.details.vertices) == 12
    assert client.status(job_id).job_master_address != address


def test_a_first_job_masters_records_are_read_by_its_successor(
    ha_cluster: RunningCluster,
) -> None:
    # What the first JobMaster recorded is trusted by its successor although it did not wait
    # for its own leader and adopted records before deploying: they precede its other records.
    # (Whether a recorded subtask is then restored depends on its results being readable:
    # test_pyspark_failover checks that with real partitions; these test vertices write none.)
    client = ha_cluster.client
    job_id = client.submit(long_job("jm-progress").build_job_graph())
    store = FileJobProgressStore(ha_cluster.cluster.directory / "ha-storage" / "job-progress")
    eventually(lambda: len(replay(store.load(job_id)).finished) >= 4, timeout=60)
    address, victim = job_master_pid(ha_cluster, job_id)
    kill(ha_cluster, victim)
    result = client.wait(job_id, timeout=180)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert client.status(job_id).job_master_address != address
    logs = "".join(
        path.read_text(errors="replace")
        for path in ha_cluster.cluster.log_dir.glob("job-master-*.log")
    )
    recorded = re.search(rf"job {job_id[:8]}: \d+ of (\d+) recorded finished subtasks", logs)
    assert recorded is not None and int(recorded.group(1)) >= 4


def test_a_recovered_job_whose_job_master_is_gone_is_started_without_waiting_out_the_grace(
    cluster_factory: ClusterFactory,
) -> None:
    # The recovery grace is as long as in production (2 heartbeats + a 30 s registration
    # back-off): it is for a live job-master process to claim its job. The job's process dies
    # with the dispatcher leader, so its latch node goes with its ZooKeeper session and the new
    # leader starts the job as soon as it sees no contender.
    cluster = cluster_factory(
        task_executors=2,
        slots=2,
        ha=True,
        standbys=1,
        extra_config={"cluster.registration.max-timeout": "30 s"},
    )
    client = cluster.client
    job_id = client.submit(long_job("jm-and-dispatcher").build_job_graph())
    eventually(lambda: finished_tasks(cluster, job_id) >= 2, timeout=60)
    address = client.status(job_id).job_master_address
    view = client.cluster_status()
    job_master = next(p.pid for p in view.job_master_process_infos if p.address == address)
    kill(cluster, leader_pid(cluster, "dispatcher"))
    kill(cluster, job_master)
    result = client.wait(job_id, timeout=180)
    assert result.status == common_pb2.FINISHED, result.failure.message
    logs = "".join(
        path.read_text(errors="replace")
        for path in cluster.cluster.log_dir.glob("dispatcher-*.log")
    )
    assert f"recovered job {job_id[:8]}: no JobMaster contends for it" in logs


def test_finished_job_is_not_rerun_after_every_control_process_restarts(
    ha_cluster: RunningCluster,
) -> None:
    client = ha_cluster.client
    job_id = client.submit(long_job("once", sleep_s=0.0).build_job_graph())
    assert client.wait(job_id, timeout=60).status == common_pb2.FINISHED
    cluster = ha_cluster.cluster
    for proc in [
        p for p in cluster.processes if p.role in ("dispatcher", "resource-manager", "job-master")
    ]:
        kill(ha_cluster, proc.pid)
        cluster.processes.remove(proc)
    for index in range(2):
        cluster._spawn("resource-manager", 10 + index)
        cluster._spawn("dispatcher", 10 + index)
        cluster._spawn("job-master", 10 + index)
    cluster.wait_until_ready(90)
    # The new leader knows the job as FINISHED (from the job result store) and runs nothing.
    jobs = eventually(lambda: [j for j in client.list_jobs(timeout=30) if j.job_id == job_id])
    assert jobs[0].status == common_pb2.FINISHED
    time.sleep(3)
    view = client.cluster_status()
    assert view.resource_manager.slots_allocated == 0
    assert list(view.resource_manager.registered_jobs) == []


def test_zookeeper_session_expiry_deposes_the_leader_and_fences_it(
    ha_cluster: RunningCluster,
) -> None:
    client = ha_cluster.client
    view = client.cluster_status()
    old_rm = view.resource_manager.resource_manager
    old_dispatcher = view.dispatcher
    # Session ids are never in ServiceInfo: an authenticated member asks the leaders for them.
    old_sessions = {
        "dispatcher": leader_session(ha_cluster, old_dispatcher.address, "dispatcher"),
        "resource-manager": leader_session(ha_cluster, old_rm.address, "resource-manager"),
    }
    # SIGSTOP both leaders past the 4 s ZooKeeper session timeout: their sessions expire and
    # the standbys take over; then let the old leaders run again.
    os.kill(old_rm.pid, signal.SIGSTOP)
    os.kill(old_dispatcher.pid, signal.SIGSTOP)
    try:
        eventually(lambda: leader_pid(ha_cluster, "resource-manager") != old_rm.pid, timeout=60)
        eventually(lambda: leader_pid(ha_cluster, "dispatcher") != old_dispatcher.pid, timeout=60)
    finally:
        os.kill(old_rm.pid, signal.SIGCONT)
        os.kill(old_dispatcher.pid, signal.SIGCONT)

    async def probe() -> tuple[BaseException | None, BaseException | None]:
        outcomes: list[BaseException | None] = []
        # A message fenced with the deposed leaders' session ids is refused...
        for address, call in (
            (
                old_dispatcher.address,
                lambda c: DispatcherClient(c, fencing_token=old_sessions["dispatcher"]).list_jobs(
                    dispatcher_pb2.ListJobsRequest(), timeout=5
                ),
            ),
            (
                old_rm.address,
                lambda c: ResourceManagerClient(
                    c, fencing_token=old_sessions["resource-manager"]
                ).get_cluster_status(resource_manager_pb2.GetClusterStatusRequest(), timeout=5),
            ),
        ):
            rpc = RpcClient(address, security=ha_cluster.cluster.transport_security("client"))
            try:
                await call(rpc)
                outcomes.append(None)
            except (NotLeaderError, FencingMismatchError) as exc:
                outcomes.append(exc)
            finally:
                await rpc.close()
        return outcomes[0], outcomes[1]

    # ...once the resumed processes noticed their expired sessions.
    def refused() -> bool:
        first, second = asyncio.run(probe())
        return first is not None and second is not None

    eventually(refused, timeout=60)
    # The cluster still runs jobs under the new leaders.
    job_id = client.submit(long_job("after-expiry", sleep_s=0.0).build_job_graph())
    assert client.wait(job_id, timeout=90).status == common_pb2.FINISHED


def test_zookeeper_restart_does_not_lose_jobs(ha_cluster: RunningCluster) -> None:
    client = ha_cluster.client
    job_id = client.submit(long_job("zk-restart", sleep_s=0.5).build_job_graph())
    zookeeper = ha_cluster.cluster.zookeeper
    zookeeper.stop()
    time.sleep(2)
    zookeeper.start()
    result = client.wait(job_id, timeout=180)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert isinstance(result, jobs_pb2.JobResult)


def test_a_job_master_deposed_by_zookeeper_alone_hands_the_job_on(
    cluster_factory: ClusterFactory,
) -> None:
    # Heartbeats so lenient that nobody notices the frozen job-master process: only its
    # ZooKeeper session expires. Once it runs again it must step down *and* tell the
    # dispatcher, which starts the job again; otherwise the job would wait forever.
    running = cluster_factory(
        task_executors=2,
        slots=2,
        ha=True,
        extra_config={"heartbeat.timeout": "60 s", "heartbeat.rpc-failure-threshold": "-1"},
    )
    client = running.client
    job_id = client.submit(long_job("jm-deposed").build_job_graph())
    eventually(lambda: finished_tasks(running, job_id) >= 2, timeout=60)
    address = client.status(job_id).job_master_address
    victim = next(
        p.pid for p in client.cluster_status().job_master_process_infos if p.address == address
    )
    os.kill(victim, signal.SIGSTOP)
    try:
        time.sleep(8)  # twice the session timeout
    finally:
        os.kill(victim, signal.SIGCONT)
    result = client.wait(job_id, timeout=90)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert sum(v.tasks_by_state.get(FINISHED, 0) for v in result.details.vertices) == 12


def test_a_corrupt_stored_job_graph_fails_that_job_and_the_rest_recover(
    cluster_factory: ClusterFactory,
) -> None:
    # Slots for both jobs at once: on 4 slots the 30 s job could take them all first, and the
    # kept job would finish nothing before the dispatcher is killed.
    ha_cluster = cluster_factory(task_executors=2, slots=4, ha=True, standbys=1)
    client = ha_cluster.client
    kept = client.submit(long_job("kept").build_job_graph())
    lost = client.submit(long_job("lost", sleep_s=30).build_job_graph())
    eventually(lambda: finished_tasks(ha_cluster, kept) >= 1, timeout=60)
    handle = ha_cluster.cluster.directory / "ha-storage" / "job-graphs" / f"{lost}.pb"
    handle.write_bytes(b"\xff\xff\xff\xff not a job graph")
    old = leader_pid(ha_cluster, "dispatcher")
    kill(ha_cluster, old)
    # A new leader is published (the client finds it) and reports the unreadable job FAILED.
    summary = eventually(
        lambda: next(
            (j for j in client.list_jobs(timeout=5) if j.job_id == lost and j.status), None
        ),
        timeout=90,
    )
    assert summary.status == common_pb2.FAILED
    result = client.wait(lost, timeout=60)
    assert "could not be read back from the HA store" in result.failure.message
    assert leader_pid(ha_cluster, "dispatcher") != old
    assert client.wait(kept, timeout=120).status == common_pb2.FINISHED
    assert (handle.parent / "quarantine" / handle.name).exists()
    # The JobMaster that still ran the lost job was told to stop: every slot is free again
    # long before its 30 s subtasks could have ended.
    eventually(lambda: client.cluster_status(timeout=10).resource_manager.slots_free == 8, 60)


def test_a_job_master_that_does_not_lead_the_job_is_refused_everywhere(
    ha_cluster: RunningCluster,
) -> None:
    """Two JobMasters for one job: only the one ZooKeeper names as leader is obeyed (Flink's
    JobLeaderIdService at the resource manager, JobLeaderService at the task executors)."""
    client = ha_cluster.client
    # Long enough to outlast the refusals (each waits a moment for a leader to be published).
    job_id = client.submit(long_job("two-jms", sleep_s=6).build_job_graph())
    eventually(lambda: finished_tasks(ha_cluster, job_id) >= 1, timeout=60)
    view = client.cluster_status()
    rm = view.resource_manager.resource_manager
    task_executor = view.resource_manager.task_executors[0]
    stale_session = "5" * 32

    async def impostor() -> list[BaseException | None]:
        outcomes: list[BaseException | None] = []
        # The impostor holds cluster keys (a job-master's towards the RM, the RM's towards the
        # task executor): what must stop it here is fencing, not authentication.
        cluster = ha_cluster.cluster
        rpc = RpcClient(rm.address, security=cluster.transport_security("job-master"))
        te_rpc = RpcClient(
            task_executor.address, security=cluster.transport_security("resource-manager")
        )
        ask = common_pb2.GetLeaderSessionRequest()
        rm_session = (await ResourceManagerClient(rpc).get_leader_session(ask)).session_id
        rm_client = ResourceManagerClient(rpc, fencing_token=rm_session)
        te_client = TaskExecutorClient(te_rpc, fencing_token=rm_session)
        calls = [
            rm_client.register_job_master(
                resource_manager_pb2.RegisterJobMasterRequest(
                    job_id=job_id,
                    job_master_address="tcp://127.0.0.1:9",
                    job_master_session_id=stale_session,
                ),
                timeout=15,
            ),
            rm_client.request_slot(
                resource_manager_pb2.RequestSlotRequest(
                    job_id=job_id,
                    allocation_id="6" * 32,
                    job_master_address="tcp://127.0.0.1:9",
                    job_master_session_id=stale_session,
                ),
                timeout=15,
            ),
            te_client.request_slot(
                task_executor_pb2.TaskExecutorRequestSlotRequest(
                    job_id=job_id,
                    allocation_id="7" * 32,
                    slot_index=-1,
                    job_master_address="tcp://127.0.0.1:9",
                    job_master_session_id=stale_session,
                ),
                timeout=15,
            ),
        ]
        try:
            for call in calls:
                try:
                    await call
                    outcomes.append(None)
                except FencingMismatchError as exc:
                    outcomes.append(exc)
        finally:
            await rpc.close()
            await te_rpc.close()
        return outcomes

    outcomes = asyncio.run(impostor())
    assert all(isinstance(o, FencingMismatchError) for o in outcomes), outcomes
    assert "does not lead job" in str(outcomes[0])
    # The real JobMaster kept its registration and its slots: the job ends normally.
    result = client.wait(job_id, timeout=120)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert result.details.restarts == 0
