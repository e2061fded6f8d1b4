"""Who may speak for a job at the dispatcher: the jobs a registering job-master process says it
hosts are adopted, stopped or left."""

from __future__ import annotations

import asyncio

from sparkmill.common.core.ids import JobID, new_job_id
from sparkmill.common.core.proto_convert import job_status_to_proto
from sparkmill.common.core.states import JobStatus
from sparkmill.common.ha.leader import LeaderInfo
from sparkmill.common.v1 import common_pb2, jobs_pb2
from sparkmill.services.dispatcher.job_placement import JobRecord
from sparkmill.services.dispatcher.job_reports import (
    HostedJobAction,
    JobLeaderLookup,
    decide_hosted_job,
)


class TestingJobLeaders:
    __test__ = False  # a test double, not a test class

    """The HA services' answer to "who leads this job?", as a test sets it."""

    def __init__(self) -> None:
        self.leaders: dict[JobID, LeaderInfo] = {}
        self.asked: list[JobID] = []

    async def __call__(self, job_id: JobID) -> LeaderInfo | None:
        self.asked.append(job_id)
        return self.leaders.get(job_id)


def _job(status: JobStatus = JobStatus.RUNNING, session: str = "") -> JobRecord:
    job = JobRecord(new_job_id(), "job", common_pb2.JobGraph(), submitted_at=0.0)
    job.status = status
    job.session_id = session
    return job


def _hosted(job: JobRecord, status: JobStatus, session: str) -> jobs_pb2.HostedJob:
    return jobs_pb2.HostedJob(
        job_id=job.job_id, status=job_status_to_proto(status), job_master_session_id=session
    )


def _decide(
    job: JobRecord | None, hosted: jobs_pb2.HostedJob, leaders: JobLeaderLookup | None
) -> HostedJobAction:
    action, why = asyncio.run(decide_hosted_job(job, hosted, leaders))
    assert why
    return action


def test_the_leading_jobmaster_of_a_running_job_is_adopted() -> None:
    job = _job()
    leaders = TestingJobLeaders()
    leaders.leaders[job.job_id] = LeaderInfo("tcp://jm:1", "s-new")
    assert _decide(job, _hosted(job, JobStatus.RUNNING, "s-new"), leaders) is HostedJobAction.ADOPT
    assert leaders.asked == [job.job_id]


def test_a_deposed_jobmaster_is_not_adopted_when_zookeeper_names_another_session() -> None:
    # The soak's case: a paused host's JobMaster comes back after another one took the job over.
    job = _job(session="s-new")
    leaders = TestingJobLeaders()
    leaders.leaders[job.job_id] = LeaderInfo("tcp://jm:2", "s-new")
    hosted = _hosted(job, JobStatus.RUNNING, "s-old")
    assert _decide(job, hosted, leaders) is HostedJobAction.LEAVE


def test_without_ha_or_a_published_leader_the_hosting_jobmaster_is_adopted() -> None:
    job = _job()
    hosted = _hosted(job, JobStatus.RUNNING, "s-1")
    assert _decide(job, hosted, None) is HostedJobAction.ADOPT
    assert _decide(job, hosted, TestingJobLeaders()) is HostedJobAction.ADOPT


def test_a_suspended_jobmaster_is_never_adopted() -> None:
    job = _job()
    leaders = TestingJobLeaders()
    leaders.leaders[job.job_id] = LeaderInfo("tcp://jm:1", "s-1")
    hosted = _hosted(job, JobStatus.SUSPENDED, "s-1")
    assert _decide(job, hosted, leaders) is HostedJobAction.LEAVE


def test_a_job_that_ended_here_has_its_jobmaster_stopped() -> None:
    job = _job(JobStatus.FAILED)
    hosted = _hosted(job, JobStatus.RUNNING, "s-1")
    assert _decide(job, hosted, TestingJobLeaders()) is HostedJobAction.STOP


def test_unknown_jobs_and_hosted_jobs_without_a_session_are_left() -> None:
    job = _job()
    assert _decide(None, _hosted(job, JobStatus.RUNNING, "s-1"), None) is HostedJobAction.LEAVE
    assert _decide(job, _hosted(job, JobStatus.RUNNING, ""), None) is HostedJobAction.LEAVE
