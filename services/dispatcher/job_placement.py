"""Where the dispatcher stands with each job and job-master process: :class:`JobPlacement`,
:class:`JobRecord` and :class:`JobMasterProcessRecord`.

A job's :class:`~sparkmill.common.core.states.JobStatus` is what its JobMaster reports; the
*placement* is the dispatcher's own bookkeeping of which job-master process hosts the job (Flink's
``Dispatcher`` keeps the same with its ``JobManagerRunner`` per job)::

    RECOVERED --(recovery grace period over, or no JobMaster contends for it)--> WAITING
    WAITING --(StartJob sent to the least loaded process)--> STARTING
    STARTING --(StartJob answered, or a report or registration claims the job)--> ASSIGNED
    STARTING / ASSIGNED --(StartJob refused, process lost, JobMaster suspended)--> WAITING
    any but ENDED --(a globally terminal status with its result)--> ENDED

A recovered job waits for the grace period before it is started anew, because the job-master
process that led it under the previous dispatcher leader may still be alive and claim it when
it registers (RECOVERED -> ASSIGNED). When ZooKeeper shows that no JobMaster contends for the
job's leadership any more, no process can claim it and it is started without waiting. A job
whose JobMaster waited as a standby can claim it with its first report from WAITING too.
ASSIGNED -> ASSIGNED is a report or registration that (re)names the hosting process.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkmill.common.core.ids import JobID, short
from sparkmill.common.core.state_machine import TransitionTable
from sparkmill.common.core.states import JobStatus
from sparkmill.common.v1 import common_pb2, jobs_pb2
from sparkmill.common.v1.gateways import JobMasterClient


class JobPlacement(enum.Enum):
    RECOVERED = 1  # recovered by a new dispatcher leader; waiting to be claimed by its process
    WAITING = 2  # no job-master process hosts it: it is started on the next one available
    STARTING = 3  # StartJob was sent to a job-master process, no answer yet
    ASSIGNED = 4  # a job-master process hosts its JobMaster (leading, or standby in election)
    ENDED = 5  # globally terminal, the result recorded: no process will ever host it again


_P = JobPlacement
JOB_PLACEMENT_TRANSITIONS: TransitionTable[JobPlacement] = TransitionTable(
    "job placement",
    {
        _P.RECOVERED: {_P.WAITING, _P.ASSIGNED, _P.ENDED},
        _P.WAITING: {_P.STARTING, _P.ASSIGNED, _P.ENDED},
        _P.STARTING: {_P.ASSIGNED, _P.WAITING, _P.ENDED},
        _P.ASSIGNED: {_P.ASSIGNED, _P.WAITING, _P.ENDED},
        _P.ENDED: set(),
    },
)


def can_start(placement: JobPlacement) -> bool:
    """Guard: the job should be sent to a job-master process now (no process hosts it, and it
    is not reserved for the process that led it before a dispatcher leader change)."""
    return placement is JobPlacement.WAITING


def can_be_released(placement: JobPlacement) -> bool:
    """Guard: a process was given or claimed the job, and it goes back to WAITING now that its
    start failed or its process or JobMaster was lost. A job that ended stays ended, one that
    waits already stays as it is, and a recovered one stays reserved until the grace period
    ends."""
    return placement in (JobPlacement.STARTING, JobPlacement.ASSIGNED)


def is_waiting_for_claim(placement: JobPlacement) -> bool:
    """Guard: recovered and not claimed yet (the grace period will release it)."""
    return placement is JobPlacement.RECOVERED


@dataclass
class JobMasterProcessRecord:
    """A registered job-master process and the jobs the dispatcher placed on it."""

    process_id: str
    address: str
    client: JobMasterClient
    info: common_pb2.ServiceInfo
    jobs: set[JobID] = field(default_factory=set)
    # The authenticated key that registered the process ("" with security off): only that key
    # may report for the jobs placed on it, or register the process id again.
    peer: str = ""


@dataclass
class JobRecord:
    """The dispatcher's record of one job: graph, last reported status, placement, result."""

    job_id: JobID
    name: str
    graph: common_pb2.JobGraph
    submitted_at: float
    status: JobStatus = JobStatus.INITIALIZING
    ended_at: float = 0.0
    process_id: str = ""
    session_id: str = ""
    address: str = ""
    details: jobs_pb2.JobDetails | None = None
    result: jobs_pb2.JobResult | None = None
    placement: JobPlacement = JobPlacement.WAITING
    # time.monotonic() when a process last took the job (moved to ASSIGNED: StartJob answered,
    # or a report or registration claimed it): a heartbeat sent later shows whether that process
    # still runs it.
    placed_at: float = 0.0
    # Set once the result is recorded: wakes the GetJobResult calls that wait for the end.
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    # Held while one status report of the job is checked and applied (reports in order).
    reports: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Told of every placement change: the :class:`JobTable` holding the record.
    placement_listener: Callable[[JobRecord], None] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def terminal(self) -> bool:
        return self.status.is_globally_terminal

    def move_to(self, placement: JobPlacement) -> None:
        """Change the placement; one the table does not allow is a bug."""
        JOB_PLACEMENT_TRANSITIONS.check(self.placement, placement, f"job {short(self.job_id)}")
        self.placement = placement
        if placement is JobPlacement.ASSIGNED:
            self.placed_at = time.monotonic()
        if self.placement_listener is not None:
            self.placement_listener(self)

    def lose_process(self) -> None:
        """Its job-master process is gone: unless the job ended, it waits to start elsewhere."""
        if self.terminal:
            return
        self.process_id = ""
        self.session_id = ""
        if can_be_released(self.placement):
            self.move_to(JobPlacement.WAITING)
        self.status = JobStatus.INITIALIZING

    def record_result(self, result: jobs_pb2.JobResult) -> jobs_pb2.JobResult:
        self.result = result
        self.ended.set()
        return result


class JobTable(dict[JobID, JobRecord]):
    """The dispatcher's jobs by id, with an index of those waiting to be started.

    Ended jobs stay in the table for ``jobstore.expiration-time`` or as long as the archive keeps
    them: tens of thousands on a busy session cluster. Every submission and every lost process
    looks for jobs to start, and a scan of the whole table each time would make the dispatcher's
    work per job grow with the number of jobs it ever ran. Every record put in the table reports
    its placement changes to it, so the waiting ones are known without a scan.
    """

    def __init__(self) -> None:
        super().__init__()
        self._waiting: dict[JobID, JobRecord] = {}

    def __setitem__(self, job_id: JobID, job: JobRecord) -> None:
        super().__setitem__(job_id, job)
        job.placement_listener = self._placement_changed
        self._placement_changed(job)

    def clear(self) -> None:
        super().clear()
        self._waiting.clear()

    def _placement_changed(self, job: JobRecord) -> None:
        if can_start(job.placement):
            self._waiting[job.job_id] = job

    def waiting(self) -> list[JobRecord]:
        """The jobs that should be sent to a job-master process now, oldest submission first."""
        jobs = [
            job
            for job in self._waiting.values()
            if can_start(job.placement) and self.get(job.job_id) is job
        ]
        self._waiting = {job.job_id: job for job in jobs}
        return sorted(jobs, key=lambda job: job.submitted_at)


__all__ = [
    "JOB_PLACEMENT_TRANSITIONS",
    "JobMasterProcessRecord",
    "JobPlacement",
    "JobRecord",
    "JobTable",
    "can_be_released",
    "can_start",
    "is_waiting_for_claim",
]
