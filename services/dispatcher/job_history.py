"""The dispatcher's job history: ended jobs archived, loaded back on leadership, expired by the
archive's limits; and the attempt logs the task executors keep (see :mod:`.job_archive` and
:mod:`.attempt_logs`).

The :class:`~.dispatcher.Dispatcher` calls :meth:`JobHistory.recover` when it takes the lead
(after its job table is rebuilt from the HA stores) and :meth:`JobHistory.job_ended` once an
ended job is cleaned up, and runs :meth:`JobHistory.expire_periodically`, which forgets ended
jobs after ``jobstore.expiration-time`` unless the archive keeps them. Writing an archive runs
in the background: it asks the task executors for the job's log index first (bounded by a
short deadline), and a job's outcome never waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from sparkmill.common.core.errors import NotFoundError, RpcError, UnavailableError
from sparkmill.common.core.ids import JobID, short
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import jobs_pb2
from sparkmill.services.dispatcher import job_recovery
from sparkmill.services.dispatcher.attempt_logs import TaskExecutorLogs, select_ref
from sparkmill.services.dispatcher.job_archive import ArchiveSettings, JobArchive, archived_job
from sparkmill.services.dispatcher.job_placement import JobRecord

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    """What the history needs of the dispatcher: its job table and its runtime."""

    @property
    def jobs(self) -> dict[JobID, JobRecord]: ...

    @property
    def runtime(self) -> ServiceRuntime: ...


class JobHistory:
    def __init__(
        self,
        dispatcher: Dispatcher,
        settings: ClusterSettings,
        logs: TaskExecutorLogs | None,
    ) -> None:
        self._dispatcher = dispatcher
        self._settings = settings
        self._logs = logs
        self.archive = JobArchive(
            ArchiveSettings(
                settings.archive_dir, settings.archive_retained_jobs, settings.archive_max_age_s
            )
        )
        self._archived: dict[JobID, jobs_pb2.AttemptLogIndex] = {}  # job -> its logs index

    async def start(self) -> None:
        if self._logs is not None:
            await self._logs.start()

    async def stop(self) -> None:
        if self._logs is not None:
            await self._logs.stop()

    def retention_note(self) -> str:
        kept = f"finished jobs are kept for {self._settings.job_store_expiration_s:g}s"
        if self.archive.enabled:
            return (
                f"{kept}, and archived: at most {self._settings.archive_retained_jobs} "
                f"for {self._settings.archive_max_age_s:g}s"
            )
        return f"{kept}; no job archive is configured (jobmanager.archive.fs.dir)"

    # -- the archive -------------------------------------------------------------------------

    async def recover(self) -> None:
        """Add every archived job the job table does not have yet (it ended before)."""
        if not self.archive.enabled:
            return
        runtime = self._dispatcher.runtime
        try:
            archived = await runtime.run_blocking(self.archive.load)
        except OSError as exc:
            log.error("the job archive %s cannot be read: %s", self.archive.directory, exc)
            return
        jobs = self._dispatcher.jobs
        for entry in archived:
            job_id = JobID(entry.result.job_id)
            self._archived[job_id] = entry.logs
            if job_id in jobs:
                continue
            record = job_recovery.ended_job(entry.result)
            if entry.plan.job_id:
                record.graph.CopyFrom(entry.plan)
            jobs[job_id] = record
        if archived:
            log.info("loaded %d archived job(s) from %s", len(archived), self.archive.directory)

    def job_ended(self, job_id: JobID) -> None:
        """Archive ``job_id`` (ended, its result recorded) in the background."""
        job = self._dispatcher.jobs.get(job_id)
        if not self.archive.enabled or job is None or job.result is None:
            return
        if job_id in self._archived:
            return
        self._dispatcher.runtime.spawn(self._archive(job_id), f"archive-{short(job_id)}")

    async def _archive(self, job_id: JobID) -> None:
        job = self._dispatcher.jobs.get(job_id)
        if job is None or job.result is None:
            return
        logs = jobs_pb2.AttemptLogIndex()
        if self._logs is not None:
            try:
                logs = await self._logs.index(job_id)
            except RpcError as exc:
                log.info("job %s archived without its log index: %s", short(job_id), exc)
        # The result's details were taken when the job ended (the dispatcher's final view).
        entry = archived_job(job.result, job.graph if job.graph.vertices else None, logs)
        try:
            await self._dispatcher.runtime.run_blocking(self.archive.write, entry)
        except OSError as exc:
            log.error(
                "job %s could not be archived in %s: %s", short(job_id), self.archive.directory, exc
            )
            return
        self._archived[job_id] = logs
        log.info("job %s archived in %s", short(job_id), self.archive.directory)

    def keeps(self, job_id: JobID) -> bool:
        """Whether the archive, not jobstore.expiration-time, decides when ``job_id`` goes."""
        return job_id in self._archived

    async def expire_periodically(self) -> None:
        """Forget ended jobs after jobstore.expiration-time (unless the archive keeps them),
        and expire the archive by its limits; runs until the dispatcher stops."""
        expiration_s = self._settings.job_store_expiration_s
        while True:
            await asyncio.sleep(min(60.0, max(1.0, expiration_s / 10)))
            horizon = time.time() - expiration_s
            jobs = self._dispatcher.jobs
            for job_id in [
                j.job_id
                for j in jobs.values()
                if j.terminal and j.ended_at < horizon and not self.keeps(j.job_id)
            ]:
                del jobs[job_id]
            await self.expire()

    async def expire(self) -> None:
        if not self.archive.enabled:
            return
        try:
            removed = await self._dispatcher.runtime.run_blocking(self.archive.expire)
        except OSError as exc:
            log.warning("expiring the job archive failed: %s", exc)
            return
        for job_id in removed:
            self._archived.pop(JobID(job_id), None)
            self._dispatcher.jobs.pop(JobID(job_id), None)

    # -- attempt logs ------------------------------------------------------------------------

    async def attempt_logs(self, job_id: str) -> jobs_pb2.AttemptLogIndex:
        """The task executors' index of the job's attempt logs, or the archived one when none
        answers (their logs may be gone; the index still says what ran where)."""
        if self._logs is None:
            raise UnavailableError("this dispatcher cannot reach the task executors' logs")
        try:
            index = await self._logs.index(job_id)
        except RpcError:
            index = jobs_pb2.AttemptLogIndex()
        if not index.logs and JobID(job_id) in self._archived:
            return self._archived[JobID(job_id)]
        return index

    async def attempt_log(self, request: jobs_pb2.GetAttemptLogRequest) -> jobs_pb2.AttemptLogChunk:
        if self._logs is None:
            raise UnavailableError("this dispatcher cannot reach the task executors' logs")
        try:
            return await self._logs.read(request)
        except NotFoundError:
            archived = self._archived.get(JobID(request.job_id))
            ref = (
                select_ref(
                    list(archived.logs),
                    request.vertex,
                    request.subtask_index,
                    request.attempt_number,
                )
                if archived is not None
                else None
            )
            if ref is None:
                raise
            raise NotFoundError(
                f"the log of {ref.vertex_name} subtask {ref.subtask_index} attempt "
                f"#{ref.attempt_number} was on task executor {ref.task_executor}, which no "
                "longer has it (or is gone)"
            ) from None
