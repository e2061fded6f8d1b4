"""JobLeaderTracker: a JobMaster's claim to lead a job is checked against HA leader retrieval."""

from __future__ import annotations

import asyncio

from sparkmill.common.core.ids import JobID, new_job_id
from sparkmill.common.ha.job_leaders import JobLeaderTracker
from sparkmill.common.ha.leader import LeaderInfo, LeaderListener, LeaderRetrievalService


class TestingLeaderRetrievalService(LeaderRetrievalService):
    """A job's published leader, set by the test."""

    __test__ = False

    def __init__(self) -> None:
        self.listener: LeaderListener | None = None
        self.leader: LeaderInfo | None = None
        self.stopped = False

    async def start(self, listener: LeaderListener) -> None:
        self.listener = listener
        if self.leader is not None:
            listener(self.leader)

    async def stop(self) -> None:
        self.stopped = True

    def current(self) -> LeaderInfo | None:
        return self.leader

    def publish(self, leader: LeaderInfo | None) -> None:
        self.leader = leader
        assert self.listener is not None
        self.listener(leader)


class Retrievals:
    def __init__(self) -> None:
        self.by_job: dict[JobID, TestingLeaderRetrievalService] = {}

    def __call__(self, job_id: JobID) -> LeaderRetrievalService:
        return self.of(job_id)

    def of(self, job_id: JobID) -> TestingLeaderRetrievalService:
        return self.by_job.setdefault(job_id, TestingLeaderRetrievalService())


def test_without_ha_a_claim_cannot_be_told() -> None:
    async def scenario() -> None:
        tracker = JobLeaderTracker(None, lambda job, leader: None)
        assert not tracker.can_verify
        assert await tracker.verify(new_job_id(), "s1", 0.1) is None

    asyncio.run(scenario())


def test_the_published_leader_is_accepted_and_another_session_refused() -> None:
    async def scenario() -> None:
        retrievals = Retrievals()
        job = new_job_id()
        retrievals.of(job).leader = LeaderInfo("tcp://jm-2:1", "new")
        tracker = JobLeaderTracker(retrievals, lambda j, leader: None)
        assert await tracker.verify(job, "new", 0.1) is True
        assert await tracker.verify(job, "old", 0.05) is False

    asyncio.run(scenario())


def test_a_leader_published_while_waiting_is_accepted() -> None:
    async def scenario() -> None:
        retrievals = Retrievals()
        job = new_job_id()
        tracker = JobLeaderTracker(retrievals, lambda j, leader: None)
        waiting = asyncio.create_task(tracker.verify(job, "s1", 5.0))
        await asyncio.sleep(0.01)
        retrievals.by_job[job].publish(LeaderInfo("tcp://jm:1", "s1"))
        assert await asyncio.wait_for(waiting, 1.0) is True

    asyncio.run(scenario())


def test_a_leader_change_is_reported_and_removal_stops_the_retrieval() -> None:
    async def scenario() -> None:
        retrievals = Retrievals()
        job = new_job_id()
        changes: list[tuple[JobID, LeaderInfo | None]] = []
        tracker = JobLeaderTracker(retrievals, lambda j, leader: changes.append((j, leader)))
        retrievals.of(job).leader = LeaderInfo("tcp://jm-1:1", "s1")
        await tracker.add_job(job)
        assert changes == []  # the first leader is not a change
        retrievals.by_job[job].publish(LeaderInfo("tcp://jm-2:1", "s2"))
        assert changes == [(job, LeaderInfo("tcp://jm-2:1", "s2"))]
        assert tracker.leader_of(job) == LeaderInfo("tcp://jm-2:1", "s2")
        await tracker.remove_job(job)
        assert retrievals.by_job[job].stopped
        assert tracker.leader_of(job) is None

    asyncio.run(scenario())
