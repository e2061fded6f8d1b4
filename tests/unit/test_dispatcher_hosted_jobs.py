"""A job placed on a job-master process that no longer runs it starts again.

A JobMaster hands its job back when it loses leadership, but that report can time out, and a
JobMaster that loses the leadership it was granted before it had a session (ZooKeeper failing
during the grant) has nothing to report with. Its process lives on and keeps answering the
dispatcher's heartbeats, so the loss of the process never tells the dispatcher either. Each
heartbeat's reply lists the jobs the process runs: a job placed there before the heartbeat was
sent, and missing from the reply or listed SUSPENDED, starts again. The hand-back itself is
taken from the JobMaster the dispatcher started, before any report of it arrived.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sparkmill.common.core.errors import AlreadyExistsError
from sparkmill.common.core.ids import JobID
from sparkmill.common.core.states import JobStatus
from sparkmill.common.ha.leader import LeaderInfo
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, job_master_pb2, jobs_pb2
from sparkmill.services.dispatcher.job_placement import JobPlacement
from tests.unit.dispatcher_harness import (
    RecordingStartsDispatcher,
    call_context,
    leading_dispatcher,
    submission,
)


def hosted(job_id: str = "", status: int = common_pb2.RUNNING) -> job_master_pb2.HostedJobs:
    jobs = [jobs_pb2.HostedJob(job_id=job_id, status=status)] if job_id else []  # type: ignore[arg-type]
    return job_master_pb2.HostedJobs(process_id="p1", jobs=jobs)


def registration(process_id: str) -> dispatcher_pb2.RegisterJobMasterProcessRequest:
    return dispatcher_pb2.RegisterJobMasterProcessRequest(
        process_id=process_id,
        address=f"tcp://127.0.0.1:{9 if process_id == 'p1' else 10}",
        info=common_pb2.ServiceInfo(),
    )


async def job_on_p1_with_p2_idle() -> tuple[RecordingStartsDispatcher, JobID]:
    """A job started on process p1, and a second process p2 that runs nothing (a job started
    again goes to the least loaded process: p1 again once it holds nothing, first by id)."""
    dispatcher = leading_dispatcher(dispatcher_class=RecordingStartsDispatcher)
    assert isinstance(dispatcher, RecordingStartsDispatcher)
    dispatcher.starts = []
    job_id = JobID((await dispatcher.submit_job(submission(), call_context())).job_id)
    await dispatcher.register_job_master_process(registration("p1"), call_context())
    await asyncio.sleep(0)  # the spawned StartJob
    await dispatcher.register_job_master_process(registration("p2"), call_context())
    assert [p for _, p in dispatcher.starts] == ["p1"]
    return dispatcher, job_id


def _after_reply(reply: Any, *, sent_before_placement: bool = False) -> list[str]:
    """The processes the job was started on, after p1's heartbeat reply ``reply(job_id)``."""

    async def main() -> list[str]:
        dispatcher, job_id = await job_on_p1_with_p2_idle()
        try:
            placed_at = dispatcher.jobs[job_id].placed_at
            asked_at = placed_at - 0.5 if sent_before_placement else time.monotonic()
            dispatcher._check_hosted("p1", reply(job_id), asked_at)
            await asyncio.sleep(0)
            return [p for _, p in dispatcher.starts]
        finally:
            dispatcher.processes.clear()

    return asyncio.run(main())


def test_a_job_its_process_no_longer_lists_starts_again() -> None:
    assert _after_reply(lambda job_id: hosted()) == ["p1", "p1"]


def test_a_job_its_process_lists_suspended_starts_again() -> None:
    assert _after_reply(lambda job_id: hosted(job_id, common_pb2.SUSPENDED)) == ["p1", "p1"]


def test_a_job_its_process_runs_or_waits_for_stays() -> None:
    assert _after_reply(lambda job_id: hosted(job_id, common_pb2.RUNNING)) == ["p1"]
    # A standby in the job's election (another JobMaster still leads it) is not lost.
    assert _after_reply(lambda job_id: hosted(job_id, common_pb2.INITIALIZING)) == ["p1"]


def test_a_reply_to_a_heartbeat_sent_before_the_job_was_placed_changes_nothing() -> None:
    # The process answered that heartbeat before it was given the job.
    assert _after_reply(lambda job_id: hosted(), sent_before_placement=True) == ["p1"]


class TestingHeartbeatClient:
    """Answers the dispatcher's heartbeats with a fixed list of hosted jobs."""

    __test__ = False

    def __init__(self, reply: job_master_pb2.HostedJobs) -> None:
        self.reply = reply

    async def heartbeat_from_dispatcher(
        self, request: common_pb2.HeartbeatRequest, *, timeout: float | None = None
    ) -> job_master_pb2.HostedJobs:
        return self.reply


def test_the_heartbeat_reply_reaches_the_dispatcher() -> None:
    async def main() -> list[str]:
        dispatcher, _ = await job_on_p1_with_p2_idle()
        try:
            record = dispatcher.processes.get("p1")
            assert record is not None
            record.client = TestingHeartbeatClient(hosted())  # type: ignore[assignment]
            await dispatcher.processes._heartbeat("p1")
            await asyncio.sleep(0)
            return [p for _, p in dispatcher.starts]
        finally:
            dispatcher.processes.clear()

    assert asyncio.run(main()) == ["p1", "p1"]


def test_the_hand_back_of_the_job_master_we_started_is_taken_before_its_first_report() -> None:
    async def main() -> tuple[list[str], list[JobID], JobStatus]:
        asked: list[JobID] = []

        async def job_leader(job_id: JobID) -> LeaderInfo | None:
            asked.append(job_id)
            return None  # ZooKeeper never named the session the JobMaster lost

        dispatcher = leading_dispatcher(
            dispatcher_class=RecordingStartsDispatcher, job_leader=job_leader
        )
        assert isinstance(dispatcher, RecordingStartsDispatcher)
        dispatcher.starts = []
        job_id = JobID((await dispatcher.submit_job(submission(), call_context())).job_id)
        await dispatcher.register_job_master_process(registration("p1"), call_context())
        await asyncio.sleep(0)
        job = dispatcher.jobs[job_id]
        job.session_id = ""  # StartJob answered before the JobMaster led: no session yet
        await dispatcher.register_job_master_process(registration("p2"), call_context())
        try:
            await dispatcher.report_job_status(
                dispatcher_pb2.JobStatusReport(
                    job_id=job_id,
                    status=common_pb2.SUSPENDED,
                    job_master_session_id="a-session-that-never-led",
                    job_master_process_id="p1",
                    job_master_address="tcp://127.0.0.1:9",
                ),
                call_context(),
            )
            await asyncio.sleep(0)
            return [p for _, p in dispatcher.starts], asked, job.status
        finally:
            dispatcher.processes.clear()

    starts, asked, status = asyncio.run(main())
    assert starts == ["p1", "p1"]
    assert asked == []
    assert status is JobStatus.RUNNING  # as the (recording) start left it


class TestingAlreadyRunningProcess:
    """A job-master process that runs the job already: StartJob is refused as ALREADY_EXISTS
    (a start retried after its answer was lost)."""

    __test__ = False

    async def start_job(self, request: Any, **kwargs: Any) -> Any:
        raise AlreadyExistsError("job already runs in this process")


def test_a_start_refused_because_the_job_runs_there_places_it_there() -> None:
    async def main() -> tuple[JobPlacement, str, list[str]]:
        dispatcher = leading_dispatcher()
        dispatcher.processes.add("p1", "tcp://127.0.0.1:9", common_pb2.ServiceInfo())
        record = dispatcher.processes.get("p1")
        assert record is not None
        record.client = TestingAlreadyRunningProcess()  # type: ignore[assignment]
        try:
            job_id = JobID((await dispatcher.submit_job(submission(), call_context())).job_id)
            job = dispatcher.jobs[job_id]
            for _ in range(5):  # the spawned StartJob
                await asyncio.sleep(0)
            # Placed there (not left waiting for a start that nothing would trigger): its
            # reports are taken, and that process's heartbeats tell if it stops running it.
            return job.placement, job.process_id, sorted(record.jobs)
        finally:
            dispatcher.processes.clear()

    placement, process_id, jobs = asyncio.run(main())
    assert placement is JobPlacement.ASSIGNED and process_id == "p1" and len(jobs) == 1
