"""The job history: an archive of every ended job, like the archives Flink's JobManager writes
to ``jobmanager.archive.fs.dir`` for its history server.

When a job ends, the leading dispatcher writes one file per job (an ``ArchivedJob`` protobuf:
the job's result with its details, exceptions and subtask attempts, the plan without operator
payloads, its parameters, and the index of its attempt logs) into the archive directory, by
default ``<high-availability.storageDir>/completed-jobs``. Every dispatcher that takes the lead
loads the archive, so ``jobs list``, the REST API and the dashboard still show ended jobs after
a failover and after the whole cluster restarted. The archive keeps at most
``historyserver.archive.retained-jobs`` jobs, none older than ``historyserver.archive.max-age``.

File I/O is blocking: the dispatcher calls these methods through its runtime's blocking pool.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError

from sparkmill.common.core.ids import is_valid_id
from sparkmill.common.v1 import common_pb2, jobs_pb2

log = logging.getLogger(__name__)

SUFFIX = ".job"


@dataclass(frozen=True)
class ArchiveSettings:
    directory: str  # "" = no archive
    retained_jobs: int
    max_age_s: float


def archived_job(
    result: jobs_pb2.JobResult,
    graph: common_pb2.JobGraph | None,
    logs: jobs_pb2.AttemptLogIndex | None,
    now: float | None = None,
) -> jobs_pb2.ArchivedJob:
    """What the archive keeps of an ended job: no accumulators (collected rows went to the
    client) and no operator payloads (the user's code), everything else."""
    archived = jobs_pb2.ArchivedJob(archived_at=time.time() if now is None else now)
    archived.result.CopyFrom(result)
    archived.result.ClearField("accumulators")
    if graph is not None:
        archived.plan.CopyFrom(graph)
        for vertex in archived.plan.vertices:
            vertex.operator.ClearField("payload")
    if logs is not None:
        archived.logs.CopyFrom(logs)
    return archived


class JobArchive:
    def __init__(self, settings: ArchiveSettings) -> None:
        self.settings = settings
        self.directory = Path(settings.directory) if settings.directory else None

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def write(self, archived: jobs_pb2.ArchivedJob) -> None:
        """Store ``archived`` atomically (a reader never sees half a file), replacing an older
        archive of the same job."""
        if self.directory is None:
            return
        job_id = archived.result.job_id
        if not is_valid_id(job_id):
            raise ValueError(f"bug: archiving a job without a valid id: {job_id[:40]!r}")
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / f"{job_id}{SUFFIX}"
        temporary = target.with_suffix(".tmp")
        with temporary.open("wb") as out:
            out.write(archived.SerializeToString())
            out.flush()
            os.fsync(out.fileno())
        temporary.replace(target)

    def load(self) -> list[jobs_pb2.ArchivedJob]:
        """Every archived job that is still retained, oldest first (unreadable files are
        skipped with a warning, never fatal: one broken file must not hide the others)."""
        if self.directory is None or not self.directory.is_dir():
            return []
        jobs = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            archived = jobs_pb2.ArchivedJob()
            try:
                archived.ParseFromString(path.read_bytes())
            except (OSError, DecodeError) as exc:
                log.warning("skipping the unreadable job archive %s: %s", path.name, exc)
                continue
            jobs.append(archived)
        jobs.sort(key=lambda a: (a.result.details.ended_at or a.archived_at, a.result.job_id))
        expired = {a.result.job_id for a in self.expired(jobs)}
        return [a for a in jobs if a.result.job_id not in expired]

    def expired(
        self, jobs: list[jobs_pb2.ArchivedJob], now: float | None = None
    ) -> list[jobs_pb2.ArchivedJob]:
        """The archives of ``jobs`` (oldest first) that the count and age limits drop."""
        now = time.time() if now is None else now
        horizon = now - self.settings.max_age_s
        too_many = max(0, len(jobs) - self.settings.retained_jobs)
        return [
            a
            for i, a in enumerate(jobs)
            if i < too_many or (a.result.details.ended_at or a.archived_at) < horizon
        ]

    def expire(self, now: float | None = None) -> list[str]:
        """Remove the archives past the limits; the ids of the removed jobs."""
        if self.directory is None or not self.directory.is_dir():
            return []
        jobs = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            archived = jobs_pb2.ArchivedJob()
            try:
                archived.ParseFromString(path.read_bytes())
            except (OSError, DecodeError):
                continue
            jobs.append(archived)
        jobs.sort(key=lambda a: (a.result.details.ended_at or a.archived_at, a.result.job_id))
        removed = []
        for archived in self.expired(jobs, now):
            job_id = archived.result.job_id
            with contextlib.suppress(FileNotFoundError):
                (self.directory / f"{job_id}{SUFFIX}").unlink()
            removed.append(job_id)
        return removed


__all__ = ["ArchiveSettings", "JobArchive", "archived_job"]
