"""Who leads each job, as seen through HA leader retrieval (Flink's ``JobLeaderIdService``).

The resource manager and the task executors hear from JobMasters that claim to lead a job.
A JobMaster that lost its job's leadership (deposed by ZooKeeper while its process lives on,
partitioned away, paused) may still send a registration or a slot request with its old session
id; obeying it would hand slots to a JobMaster that must not act any more, or replace the
registration of the real leader. So both services check a claim against the job's leader as
published in the HA services before they accept it, and hear when a job's leader changes.

Without HA (``high-availability.mode: none``) there is no published job leader to check
against: :meth:`JobLeaderTracker.verify` then answers ``None`` ("cannot tell") and callers
keep their standalone behaviour, where the last registration of a job wins.

Everything here runs on the owning service's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkmill.common.core.ids import JobID, short
from sparkmill.common.ha.leader import LeaderInfo, LeaderRetrievalService

log = logging.getLogger(__name__)

JobLeaderRetrievalFactory = Callable[[JobID], LeaderRetrievalService]
JobLeaderListener = Callable[[JobID, LeaderInfo | None], None]


@dataclass
class _TrackedJob:
    retrieval: LeaderRetrievalService
    leader: LeaderInfo | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class JobLeaderTracker:
    """The current leader of every job a service works for.

    ``factory`` makes the per-job leader retrieval (``None`` without HA); ``on_change`` is
    called with the job and its new leader (``None`` while it has none) after the first one.
    """

    def __init__(
        self, factory: JobLeaderRetrievalFactory | None, on_change: JobLeaderListener
    ) -> None:
        self._factory = factory
        self._on_change = on_change
        self._jobs: dict[JobID, _TrackedJob] = {}

    @property
    def can_verify(self) -> bool:
        return self._factory is not None

    def leader_of(self, job_id: JobID) -> LeaderInfo | None:
        tracked = self._jobs.get(job_id)
        return None if tracked is None else tracked.leader

    async def add_job(self, job_id: JobID) -> None:
        if self._factory is None or job_id in self._jobs:
            return
        tracked = _TrackedJob(self._factory(job_id))
        self._jobs[job_id] = tracked

        def listener(info: LeaderInfo | None) -> None:
            if self._jobs.get(job_id) is not tracked:
                return  # a retrieval of a job no longer tracked
            previous, tracked.leader = tracked.leader, info
            tracked.changed.set()
            tracked.changed = asyncio.Event()
            if previous is not None and previous != info:
                self._on_change(job_id, info)

        await tracked.retrieval.start(listener)

    async def remove_job(self, job_id: JobID) -> None:
        tracked = self._jobs.pop(job_id, None)
        if tracked is not None:
            await tracked.retrieval.stop()

    async def close(self) -> None:
        for job_id in list(self._jobs):
            await self.remove_job(job_id)

    async def verify(self, job_id: JobID, session_id: str, timeout_s: float) -> bool | None:
        """Does ``session_id`` lead ``job_id``? ``None`` when it cannot be told (no HA).

        A newly elected JobMaster may ask before its address is published, so an unknown or
        different leader is waited for, up to ``timeout_s``; only then is the claim refused.
        """
        if self._factory is None:
            return None
        await self.add_job(job_id)
        tracked = self._jobs[job_id]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while tracked.leader is None or tracked.leader.session_id != session_id:
            remaining = deadline - loop.time()
            if remaining <= 0:
                leader = tracked.leader
                log.info(
                    "job %s: session %s does not lead it (leader: %s)",
                    short(job_id),
                    short(session_id),
                    "none published" if leader is None else short(leader.session_id),
                )
                return False
            try:
                async with asyncio.timeout(remaining):
                    await tracked.changed.wait()
            except TimeoutError:
                continue
        return True
