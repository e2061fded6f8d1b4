"""Who may speak for a job: the checks on ``ReportJobStatus`` and ``RegisterJobMasterProcess``.

A job-master key alone is not enough to report a job's status: without these checks one could
report a running job ``RUNNING`` under an invented session and then ``FINISHED`` with forged
rows. A report must come from the key that registered the job-master process it names, and
from the JobMaster session that leads the job: the one the dispatcher's ``StartJob`` created
or a registration adopted, or (a takeover with ZooKeeper, or a leader this dispatcher has not
heard from before) the one ZooKeeper names as the job's leader, read afresh.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Mapping

from sparkmill.common.core.errors import (
    FailedPreconditionError,
    PermissionDeniedError,
    RpcError,
    UnavailableError,
)
from sparkmill.common.core.ids import JobID, short
from sparkmill.common.core.states import JobStatus
from sparkmill.common.ha.leader import LeaderInfo
from sparkmill.common.rpc.server import CallContext
from sparkmill.common.v1 import dispatcher_pb2, job_master_pb2, jobs_pb2
from sparkmill.services.dispatcher.job_master_processes import JobMasterProcesses
from sparkmill.services.dispatcher.job_placement import (
    JobMasterProcessRecord,
    JobPlacement,
    JobRecord,
)

log = logging.getLogger(__name__)

JobLeaderLookup = Callable[[JobID], Awaitable[LeaderInfo | None]]
"""The JobMaster session and address the HA services name as a job's leader, read afresh."""

# What the JobMaster the dispatcher started may report before its session is known here: it
# was elected (CREATED, RUNNING), or it lost the leadership it was granted before its first
# report arrived (SUSPENDED: it hands the job back, and the job must start again).
_FROM_THE_STARTED_JOB_MASTER = (
    JobStatus.CREATED.value,
    JobStatus.RUNNING.value,
    JobStatus.SUSPENDED.value,
)


async def check_reporter(
    job: JobRecord,
    request: dispatcher_pb2.JobStatusReport,
    context: CallContext,
    processes: JobMasterProcesses,
    job_leader: JobLeaderLookup | None,
) -> None:
    """Raise unless ``request`` may speak for ``job`` (see the module docstring)."""
    reporter = processes.get(request.job_master_process_id)
    if reporter is None:
        # E.g. its process has not registered with this (new) leader yet: it retries.
        raise UnavailableError(
            f"job-master process {short(request.job_master_process_id)} is not registered "
            "with this dispatcher; register first"
        )
    if reporter.peer != context.peer:
        raise PermissionDeniedError(
            f"job-master process {short(reporter.process_id)} was registered by "
            f"{reporter.peer or 'an unauthenticated key'}; "
            f"{context.peer or 'an unauthenticated caller'} may not report for it"
        )
    session = request.job_master_session_id
    if job.session_id and session == job.session_id:
        return
    if not session:
        raise FailedPreconditionError(
            f"report for job {short(job.job_id)} refused: it names no JobMaster session"
        )
    if (
        request.status in _FROM_THE_STARTED_JOB_MASTER
        and not job.session_id
        and reporter.process_id == job.process_id
    ):
        # The JobMaster we started on that process, before any report of it reached us: known
        # here, so ZooKeeper is not asked (every job's first report would wait for a read). Its
        # hand-back must not be refused either: ZooKeeper never named the session it lost, and
        # the job would stay placed on a process that no longer runs it.
        return
    # Any other session - a takeover's first report, or any report of a leader whose earlier
    # ones this dispatcher never saw (they went to the leader before it, and its process was
    # not adopted when it registered here) - speaks for the job only if ZooKeeper names it as
    # the job's leader. Refusing the final report of the job's leader would leave the job
    # unfinished here for ever; so would refusing one because ZooKeeper cannot be read right
    # now (job_leader raises UnavailableError then, and the JobMaster retries).
    leader = await job_leader(job.job_id) if job_leader is not None else None
    if leader is not None and leader.session_id == session:
        return
    raise FailedPreconditionError(
        f"report for job {short(job.job_id)} from JobMaster session {short(session)} "
        "refused: that session does not lead the job"
    )


class HostedJobAction(enum.Enum):
    """What a (new) dispatcher leader does with a job a registering process says it hosts."""

    ADOPT = "adopt"  # its JobMaster leads the job: keep it instead of starting the job again
    STOP = "stop"  # the job ended here while that JobMaster still runs it: stop it
    LEAVE = "leave"  # suspended, deposed or unknown: not adopted; the job starts like any other


async def decide_hosted_job(
    job: JobRecord | None,
    hosted: jobs_pb2.HostedJob,
    job_leader: JobLeaderLookup | None,
) -> tuple[HostedJobAction, str]:
    """The action for one hosted job of a registering job-master process, and why."""
    if hosted.status == JobStatus.SUSPENDED.value:
        # That JobMaster lost leadership (e.g. ZooKeeper lost its quorum meanwhile) and leads
        # nothing: adopting it would leave the job SUSPENDED for ever.
        return HostedJobAction.LEAVE, "its JobMaster is suspended"
    if job is None or not hosted.job_master_session_id:
        return HostedJobAction.LEAVE, "the job is not known here"
    if job.terminal:
        return HostedJobAction.STOP, f"the job ended {job.status.name} here"
    try:
        leader = await job_leader(job.job_id) if job_leader is not None else None
    except UnavailableError as exc:
        # Cannot tell now (ZooKeeper unreachable): adopting is the lesser risk - a deposed
        # JobMaster is fenced everywhere, while leaving a leading one unadopted costs its reports.
        log.info("job %s: adopted without checking its leader: %s", short(job.job_id), exc)
        leader = None
    if leader is not None and leader.session_id != hosted.job_master_session_id:
        # Deposed while its process was cut off (a paused host): another JobMaster leads the
        # job now, and adopting the old one would restart a job that is running elsewhere.
        return HostedJobAction.LEAVE, f"JobMaster session {short(leader.session_id)} leads it"
    return HostedJobAction.ADOPT, "its JobMaster leads the job"


def jobs_no_longer_hosted(
    process: JobMasterProcessRecord,
    jobs: Mapping[JobID, JobRecord],
    hosted: job_master_pb2.HostedJobs,
    asked_at: float,
) -> list[JobRecord]:
    """The jobs placed on ``process`` that its heartbeat reply ``hosted`` shows it no longer
    runs (logged with why): not listed (its JobMaster ended without the dispatcher taking an
    outcome) or listed SUSPENDED (it lost its leadership and its hand-back never arrived: the
    report timed out, or it lost the leadership before it had a session to report with).

    Only jobs the process took before ``asked_at``, when the heartbeat was sent: the process
    lists a JobMaster from before it answers ``StartJob`` until the JobMaster is done, so such a
    job missing from the reply is gone, never one whose start the reply overtook."""
    listed = {entry.job_id: entry for entry in hosted.jobs}
    lost: list[JobRecord] = []
    for job_id in sorted(process.jobs):
        job = jobs.get(job_id)
        if (
            job is None
            or job.placement is not JobPlacement.ASSIGNED
            or job.process_id != process.process_id
            or job.placed_at >= asked_at
        ):
            continue
        entry = listed.get(job_id)
        if entry is not None and entry.status != JobStatus.SUSPENDED.value:
            continue
        log.warning(
            "job %s: its JobMaster on job-master process %s %s; starting the job again",
            short(job_id),
            short(process.process_id),
            "is gone" if entry is None else "lost leadership",
        )
        lost.append(job)
    return lost


def adopt_hosted_state(job: JobRecord, hosted: jobs_pb2.HostedJob) -> None:
    """``job`` takes the session and status of the JobMaster a registering process hosts."""
    job.session_id = hosted.job_master_session_id
    status = JobStatus(hosted.status)
    if not status.is_globally_terminal:
        # A terminal status only counts with its result, in the JobMaster's report.
        job.status = status


def check_replacement(previous: JobMasterProcessRecord, context: CallContext) -> None:
    """Only the key that registered a job-master process id may register it again."""
    if previous.peer != context.peer:
        raise PermissionDeniedError(
            f"job-master process {short(previous.process_id)} is registered by "
            f"{previous.peer or 'an unauthenticated key'}; "
            f"{context.peer or 'an unauthenticated caller'} may not replace it"
        )


async def stop_orphan(process: JobMasterProcessRecord, job_id: JobID, session: str) -> None:
    """Cancel ``job_id`` in a job-master process that still runs it although it ended here."""
    log.warning(
        "job %s ended here but job-master process %s still runs it; cancelling it there",
        short(job_id),
        short(process.process_id),
    )
    try:
        await process.client.cancel_job(
            job_master_pb2.JobMasterCancelJobRequest(job_id=job_id), fencing_token=session
        )
    except RpcError as exc:
        log.info("job %s: the orphaned JobMaster was not cancelled: %s", short(job_id), exc)
