"""What a JobMaster needs from the process hosting it: :class:`JobMasterHost`.

A :class:`~sparkmill.services.jobmaster.job_master.JobMaster` leads one job; the job-master process
(:class:`~sparkmill.services.jobmaster.service.JobMasterProcess`) hosts many of them and owns what
they share: the process identity, the job result and progress stores, the resource manager leader it
follows, and the connection to the dispatcher leader that job status reports go to. A JobMaster
sees its process only through this protocol (in Flink, a ``JobMaster`` likewise reaches its
``JobManagerRunner`` through the ``OnCompletionActions`` and high-availability services it is
given), so it never imports the process and unit tests host it in a hand-written fake.
"""

from __future__ import annotations

from typing import Protocol

from sparkmill.common.core.ids import JobID
from sparkmill.common.ha.job_stores import JobResultStore
from sparkmill.common.ha.leader import LeaderInfo
from sparkmill.common.ha.progress_log import JobProgressStore
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.v1 import dispatcher_pb2


class HostedJobMaster(Protocol):
    """The host's view of one hosted JobMaster (enough to forget it when it is done)."""

    @property
    def job_id(self) -> JobID: ...


class JobMasterHost(Protocol):
    @property
    def identity(self) -> ServiceIdentity:
        """The process: its id and RPC address go into every report and registration."""
        ...

    @property
    def result_store(self) -> JobResultStore:
        """Where finished jobs' results are; a JobMaster never runs a job that has one."""
        ...

    @property
    def progress_store(self) -> JobProgressStore:
        """The jobs' progress logs (what finished, so a new JobMaster does not redo it)."""
        ...

    @property
    def rm_leader(self) -> LeaderInfo | None:
        """The resource manager leader as the process knows it now (None: none known)."""
        ...

    async def report_job_status(self, report: dispatcher_pb2.JobStatusReport) -> bool:
        """Deliver a job status report to the dispatcher leader, retrying until it is taken
        (True) or refused (False: unknown job, or another JobMaster session leads it)."""
        ...

    def job_master_done(self, job_master: HostedJobMaster) -> None:
        """``job_master`` stopped working on its job: route nothing more to it."""
        ...


__all__ = ["HostedJobMaster", "JobMasterHost"]
