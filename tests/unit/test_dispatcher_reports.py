"""A job's status reports are applied one at a time, in the order they arrived.

The check of a report from a JobMaster that took a job over asks ZooKeeper who leads the job,
which takes a while; a CREATED report still waiting for that answer must not be applied after
the RUNNING report that followed it, or the job would show CREATED until it ends.

Who may report: the JobMaster the dispatcher started, and any session ZooKeeper names as the
job's leader - also with a final report, the first this dispatcher hears of it after a leader
change (refusing it would leave the job unfinished for ever).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import FailedPreconditionError, UnavailableError
from sparkmill.common.core.ids import JobID, new_job_id
from sparkmill.common.core.states import JobStatus
from sparkmill.common.ha.leader import LeaderInfo
from sparkmill.common.ha.zookeeper.ha_services import ZooKeeperHaServices
from sparkmill.common.runtime.settings import settings_from_config
from sparkmill.common.v1 import common_pb2, dispatcher_pb2
from sparkmill.services.dispatcher.dispatcher import Dispatcher
from sparkmill.services.dispatcher.job_placement import JobPlacement, JobRecord
from tests.unit.dispatcher_harness import call_context, leading_dispatcher

PEER = "job-master:jm-host-2"
TAKEOVER_SESSION = "jm-session-2"


def report(job_id: str, status: common_pb2.JobStatus) -> dispatcher_pb2.JobStatusReport:
    return dispatcher_pb2.JobStatusReport(
        job_id=job_id,
        status=status,
        job_master_session_id=TAKEOVER_SESSION,
        job_master_process_id="process-2",
        job_master_address="tcp://127.0.0.1:2",
    )


def recovered_job_reported_by_process_2(dispatcher: Dispatcher, name: str) -> JobRecord:
    """A job the dispatcher recovered (no session, no process known for it), and the
    registered job-master process ``process-2`` of key PEER its reports will come from."""
    job_id = JobID(new_job_id())
    job = JobRecord(
        job_id, name, common_pb2.JobGraph(job_id=job_id), 0.0, placement=JobPlacement.RECOVERED
    )
    dispatcher.jobs[job_id] = job
    dispatcher.processes.add("process-2", "tcp://127.0.0.1:2", common_pb2.ServiceInfo(), peer=PEER)
    return job


def test_a_report_waiting_for_zookeeper_is_not_overtaken_by_the_next_one() -> None:
    async def scenario() -> None:
        first_lookup_may_answer = asyncio.Event()
        lookups = 0

        async def job_leader(job_id: JobID) -> LeaderInfo | None:
            nonlocal lookups
            lookups += 1
            if lookups == 1:  # the CREATED report's check: ZooKeeper is slow to answer
                await first_lookup_may_answer.wait()
            return LeaderInfo("tcp://127.0.0.1:2", TAKEOVER_SESSION)

        dispatcher = leading_dispatcher(job_leader=job_leader)
        job_id = recovered_job_reported_by_process_2(dispatcher, "taken-over").job_id
        try:
            created = asyncio.create_task(
                dispatcher.report_job_status(report(job_id, common_pb2.CREATED), call_context(PEER))
            )
            await asyncio.sleep(0.01)  # the CREATED report now waits for its lookup
            running = asyncio.create_task(
                dispatcher.report_job_status(report(job_id, common_pb2.RUNNING), call_context(PEER))
            )
            await asyncio.sleep(0.01)
            assert not running.done()  # queued behind the CREATED report, not applied first
            first_lookup_may_answer.set()
            await asyncio.gather(created, running)
            job = dispatcher.jobs[job_id]
            assert job.status is JobStatus.RUNNING
            assert job.session_id == TAKEOVER_SESSION
            assert job.placement is JobPlacement.ASSIGNED
        finally:
            dispatcher.processes.clear()

    asyncio.run(scenario())


def test_the_first_report_of_the_job_master_we_started_needs_no_zookeeper_read() -> None:
    async def scenario() -> None:
        asked: list[JobID] = []

        async def job_leader(job_id: JobID) -> LeaderInfo | None:
            asked.append(job_id)
            return None

        dispatcher = leading_dispatcher(job_leader=job_leader)
        job_id = JobID(new_job_id())
        job = JobRecord(
            job_id, "new", common_pb2.JobGraph(job_id=job_id), 0.0, placement=JobPlacement.STARTING
        )
        job.process_id = "process-2"  # StartJob is on its way there; no session known yet
        dispatcher.jobs[job_id] = job
        dispatcher.processes.add(
            "process-2", "tcp://127.0.0.1:2", common_pb2.ServiceInfo(), peer=PEER
        )
        try:
            await dispatcher.report_job_status(
                report(job_id, common_pb2.CREATED), call_context(PEER)
            )
            assert job.session_id == TAKEOVER_SESSION and job.status is JobStatus.CREATED
            assert asked == []
        finally:
            dispatcher.processes.clear()

    asyncio.run(scenario())


def test_the_final_report_of_the_leader_zookeeper_names_ends_a_job_this_dispatcher_recovered() -> (
    None
):
    """A dispatcher leader change: the job's JobMaster reported CREATED and RUNNING to the
    leader before, and its process was not adopted here. Its FINISHED report is the first this
    dispatcher hears of it: taken when ZooKeeper names its session, refused otherwise."""

    async def scenario() -> None:
        leader = LeaderInfo("tcp://127.0.0.1:2", TAKEOVER_SESSION)

        async def job_leader(job_id: JobID) -> LeaderInfo | None:
            return leader

        dispatcher = leading_dispatcher(job_leader=job_leader)
        job = recovered_job_reported_by_process_2(dispatcher, "recovered")
        job_id = job.job_id
        try:
            leader = LeaderInfo("tcp://127.0.0.1:3", "another-session")
            with pytest.raises(FailedPreconditionError, match="does not lead the job"):
                await dispatcher.report_job_status(
                    report(job_id, common_pb2.FINISHED), call_context(PEER)
                )
            assert (job.result, job.placement) == (None, JobPlacement.RECOVERED)

            leader = LeaderInfo("tcp://127.0.0.1:2", TAKEOVER_SESSION)
            await dispatcher.report_job_status(
                report(job_id, common_pb2.FINISHED), call_context(PEER)
            )
            assert job.status is JobStatus.FINISHED and job.result is not None
            assert job.placement is JobPlacement.ENDED
        finally:
            dispatcher.processes.clear()

    asyncio.run(scenario())


def test_a_report_checked_while_zookeeper_cannot_be_read_is_retried_not_refused() -> None:
    """ZooKeeper unreachable from the dispatcher (its server stopped, a partition) must not
    turn a leader's report into a refusal: the JobMaster gives up on refused reports."""

    async def scenario() -> None:
        reachable = False

        async def job_leader(job_id: JobID) -> LeaderInfo | None:
            if not reachable:
                raise UnavailableError("ZooKeeper is not connected")
            return LeaderInfo("tcp://127.0.0.1:2", TAKEOVER_SESSION)

        dispatcher = leading_dispatcher(job_leader=job_leader)
        job = recovered_job_reported_by_process_2(dispatcher, "taken-over")
        job_id = job.job_id
        try:
            with pytest.raises(UnavailableError):
                await dispatcher.report_job_status(
                    report(job_id, common_pb2.RUNNING), call_context(PEER)
                )
            assert (job.status, job.session_id) == (JobStatus.INITIALIZING, "")
            reachable = True  # the JobMaster's retry, once ZooKeeper answers again
            await dispatcher.report_job_status(
                report(job_id, common_pb2.RUNNING), call_context(PEER)
            )
            assert job.status is JobStatus.RUNNING and job.session_id == TAKEOVER_SESSION
        finally:
            dispatcher.processes.clear()

    asyncio.run(scenario())


def test_zookeeper_that_cannot_be_read_says_so_instead_of_naming_no_leader(tmp_path: Path) -> None:
    """The dispatcher's lookup behind the checks above: without a connection it raises
    UnavailableError; "nobody leads" (None) would be a refusal."""
    config = Configuration.from_mapping(
        {
            "high-availability.mode": "zookeeper",
            "high-availability.zookeeper.quorum": "127.0.0.1:9",
            "high-availability.storageDir": str(tmp_path),
        }
    )
    ha = ZooKeeperHaServices(settings_from_config(config), config, "dispatcher")

    async def scenario() -> None:
        with pytest.raises(UnavailableError, match="not connected"):
            await ha.job_leader(JobID(new_job_id()))

    asyncio.run(scenario())
