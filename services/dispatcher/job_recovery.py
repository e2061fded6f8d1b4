"""How a new dispatcher leader takes over the jobs of the one before it.

On leadership the dispatcher rebuilds its job table from the HA stores (Flink's
``SessionDispatcherLeaderProcess`` does the same from its ``JobGraphStore`` and
``JobResultStore``):

* a job with a result in the result store ended: it is kept to be answered about, and never run
  again (:func:`ended_job`);
* a job with a stored graph and no result is recovered (:func:`recovered_job`); it waits a grace
  period for the job-master process that led it to register again and claim it, because
  starting a second JobMaster for a job that still runs would be wasteful;
* a stored graph that cannot be read back fails its job for good (:func:`unreadable_job`), so one
  corrupt entry costs that job, not the cluster.

The grace period ends early for a job no JobMaster contends for in ZooKeeper
(:func:`release_uncontended_jobs`): no process can claim it, waiting would only delay it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

from sparkmill.common.core.ids import JobID, short
from sparkmill.common.core.states import JobStatus
from sparkmill.common.ha.job_stores import UnrecoverableJobGraph
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import common_pb2, jobs_pb2
from sparkmill.services.dispatcher.job_placement import (
    JobPlacement,
    JobRecord,
    is_waiting_for_claim,
)

log = logging.getLogger(__name__)

# Asks ZooKeeper how many JobMasters contend for a job's leadership (None: cannot be known).
ContenderCount = Callable[[JobID], Awaitable[int | None]]


def recovery_grace_s(settings: ClusterSettings) -> float:
    """How long a recovered job waits for its job-master process to register and claim it:
    long enough for a live process to notice the new leader and register again."""
    return 2 * settings.heartbeat_interval_s + settings.registration.max_timeout_s


def ended_job(result: jobs_pb2.JobResult) -> JobRecord:
    """The record of a job that ended under an earlier leader, rebuilt from its result."""
    job_id = JobID(result.job_id)
    return JobRecord(
        job_id,
        result.details.name,
        common_pb2.JobGraph(job_id=job_id),
        result.details.submitted_at or time.time(),
        status=JobStatus(result.status),
        ended_at=result.details.ended_at,
        result=result,
        details=result.details,
        placement=JobPlacement.ENDED,
    )


def recovered_job(graph: common_pb2.JobGraph) -> JobRecord:
    """The record of a stored job without a result: reserved for the process that led it."""
    return JobRecord(
        JobID(graph.job_id), graph.name, graph, time.time(), placement=JobPlacement.RECOVERED
    )


def unreadable_job(lost: UnrecoverableJobGraph) -> tuple[JobRecord, common_pb2.ErrorInfo]:
    """The record of a stored job whose graph cannot be read back, and why it fails."""
    job_id = JobID(lost.job_id)
    job = JobRecord(
        job_id, "(unreadable job graph)", common_pb2.JobGraph(job_id=job_id), time.time()
    )
    failure = common_pb2.ErrorInfo(
        code=common_pb2.FAILED_PRECONDITION,
        message=f"the job graph could not be read back from the HA store: {lost.reason}",
        exception_type="JobGraphLost",
    )
    return job, failure


def end_recovery_grace(jobs: Iterable[JobRecord]) -> None:
    """The grace period is over: every recovered job nobody claimed waits to be started."""
    for job in jobs:
        if is_waiting_for_claim(job.placement):
            job.move_to(JobPlacement.WAITING)


async def release_uncontended_jobs(
    jobs: Mapping[JobID, JobRecord],
    contenders: ContenderCount,
    still_leading: Callable[[], bool],
    on_released: Callable[[], None],
    *,
    grace_s: float,
    poll_s: float,
) -> None:
    """Release a recovered job before the grace period ends once no JobMaster contends for it.

    The grace period is for a job-master process that still hosts the job (leading, or
    standby in its election) to claim it. A job whose election has no contender has no such
    process: its JobMaster was lost with its host or its ZooKeeper session, and waiting
    would only delay the takeover (its finished subtasks are kept either way). A process
    that was given the job a moment before the leader change and has not entered the
    election yet may still claim it; the job's own election then lets one of the two lead.
    ``on_released`` is called after a round that released any job; the loop ends with the
    grace period, when no job waits for a claim any more, or when ``still_leading`` says no.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while still_leading() and loop.time() < deadline:
        waiting = [j for j in jobs.values() if is_waiting_for_claim(j.placement)]
        if not waiting:
            return
        released = 0
        for job in waiting:
            count = await contenders(job.job_id)
            if count == 0 and still_leading() and is_waiting_for_claim(job.placement):
                log.info(
                    "recovered job %s: no JobMaster contends for it, started now instead"
                    " of after the recovery grace period",
                    short(job.job_id),
                )
                job.move_to(JobPlacement.WAITING)
                released += 1
        if released:
            on_released()
        await asyncio.sleep(poll_s)


__all__ = [
    "ContenderCount",
    "end_recovery_grace",
    "ended_job",
    "recovered_job",
    "recovery_grace_s",
    "release_uncontended_jobs",
    "unreadable_job",
]
