"""A job that waits for slots says why while it waits: the resource manager's heartbeat to the
JobMaster carries the reason (at slotmanager.number-of-slots.max, start failures paused, no
slot and nothing to start one), the JobMaster shows it in its job's details while a subtask
waits for a slot, and ``jobs status`` prints it."""

from __future__ import annotations

import asyncio

import pytest

from sparkmill.cli.output import Progress, details_json, print_details
from sparkmill.common.core.ids import AllocationID, JobID
from sparkmill.common.core.resources import UNKNOWN_PROFILE
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.common.v1 import common_pb2, job_master_pb2, jobs_pb2
from sparkmill.services.resourcemanager.active_workers import ActiveWorkers, ActiveWorkerSettings
from sparkmill.services.resourcemanager.job_master_registration import JobMasterRegistration
from sparkmill.services.resourcemanager.slot_requests import SlotRequest
from sparkmill.services.resourcemanager.slot_wait import slot_wait_reason
from tests.unit.active_workers_harness import SPEC, TestingWorkerDriver
from tests.unit.resource_manager_harness import leading_resource_manager
from tests.unit.test_job_master import TestingJobMasterHost, _job_master, _run, _settle


class RecordingJobMasterClient:
    """Records the heartbeats the resource manager sends to a JobMaster."""

    def __init__(self) -> None:
        self.heartbeats: list[job_master_pb2.JobMasterHeartbeatRequest] = []

    async def heartbeat_from_resource_manager(
        self, request: job_master_pb2.JobMasterHeartbeatRequest, **_: object
    ) -> common_pb2.Empty:
        self.heartbeats.append(request)
        return common_pb2.Empty()


def _request(job: str, allocation: str) -> SlotRequest:
    return SlotRequest(JobID(job), AllocationID(allocation), UNKNOWN_PROFILE, "")


def test_without_a_driver_the_reason_counts_the_jobs_requests_and_the_slots() -> None:
    async def scenario() -> None:
        rm = leading_resource_manager()
        assert rm.slot_manager is not None
        for job, allocation in (("job-1", "a1"), ("job-1", "a2"), ("job-2", "a3")):
            rm.slot_manager.register_slot_request(_request(job, allocation))
        reason = slot_wait_reason(JobID("job-1"), rm.slot_manager, None)
        assert reason == (
            "waiting for 2 slot(s): no free slot fits: 0 task executor(s) with 0 slot(s), 0 in "
            "use (nothing starts task executors on demand: start more, or wait for other jobs "
            "to free slots)"
        )
        assert slot_wait_reason(JobID("job-3"), rm.slot_manager, None) == ""
        assert slot_wait_reason(JobID("job-1"), None, None) == ""
        await rm.clients.close()

    asyncio.run(scenario())


def test_the_heartbeat_tells_the_job_master_that_the_maximum_is_reached() -> None:
    async def scenario() -> None:
        rm = leading_resource_manager()
        assert rm.slot_manager is not None
        driver = TestingWorkerDriver()
        rm.active_workers = ActiveWorkers(
            driver, ManualTimerService(), rm, ActiveWorkerSettings(spec=SPEC, max_slots=2)
        )
        rm.active_workers.start()
        rm.active_workers.on_previous_workers_recovered([])  # the driver found none running
        for allocation in ("a1", "a2", "a3", "a4"):
            rm.slot_manager.register_slot_request(_request("job-1", allocation))
        assert rm.active_workers.check_resource_needs() == 1  # 2 slots: the maximum
        client = RecordingJobMasterClient()
        rm.job_masters[JobID("job-1")] = JobMasterRegistration(
            JobID("job-1"),
            "tcp://jm:1",
            "jm-session",
            client,  # type: ignore[arg-type]
        )
        await rm._heartbeat_job_master(JobID("job-1"))
        [beat] = client.heartbeats
        assert beat.slot_wait_reason.startswith(
            "waiting for 4 slot(s): the resource manager is at slotmanager.number-of-slots.max "
            "= 2 (its task executors have 2 slot(s)"
        )
        assert "1 task executor(s) are starting" in beat.slot_wait_reason
        for allocation in ("a1", "a2", "a3", "a4"):
            rm.slot_manager.unregister_slot_request(AllocationID(allocation))
        await rm._heartbeat_job_master(JobID("job-1"))
        assert client.heartbeats[-1].slot_wait_reason == ""
        await rm.clients.close()

    asyncio.run(scenario())


def test_the_job_master_shows_the_reason_only_while_a_subtask_waits_for_a_slot() -> None:
    host = TestingJobMasterHost()
    reason = "waiting for 2 slot(s): the resource manager is at slotmanager.number-of-slots.max"

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master(host, runtime)
        await jm.start()  # no resource manager: its subtasks wait for slots
        await _settle()
        scheduled = ExecutionState.SCHEDULED.value
        assert any(v.tasks_by_state.get(scheduled) for v in jm.details().vertices)
        assert jm.details().slot_wait_reason == ""
        jm.heartbeat_from_resource_manager(reason)
        assert jm.details().slot_wait_reason == reason
        await jm.suspend("test over", tell_dispatcher=False)
        assert jm.details().slot_wait_reason == ""  # nothing waits for a slot any more

    _run(scenario)


def test_jobs_status_and_the_progress_line_print_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    details = jobs_pb2.JobDetails(job_id="j", name="big", status="RUNNING")
    vertex = details.vertices.add(vertex_id="v", name="read", parallelism=6)
    vertex.tasks_by_state[ExecutionState.SCHEDULED.value] = 6
    details.slot_wait_reason = "waiting for 2 slot(s): the resource manager is at the maximum"
    print_details(details)
    assert "waiting for 2 slot(s): the resource manager is at the maximum" in (
        capsys.readouterr().out
    )
    assert details_json(details)["slot_wait_reason"] == details.slot_wait_reason
    Progress()(details)
    assert "6 scheduled; waiting for 2 slot(s)" in capsys.readouterr().err
