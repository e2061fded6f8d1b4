"""Hand-written stand-ins for a job-master process's HA services in unit tests: one fixed
dispatcher leader, no resource manager, in-memory job stores."""

from __future__ import annotations

import asyncio

from sparkmill.common.ha.job_stores import InMemoryJobResultStore
from sparkmill.common.ha.leader import LeaderInfo, LeaderListener, LeaderRetrievalService
from sparkmill.common.ha.progress_log import InMemoryJobProgressStore

DISPATCHER = LeaderInfo("tcp://127.0.0.1:9", "dispatcher-session")


class TestingRetrieval(LeaderRetrievalService):
    """Tells its listener one fixed leader when started."""

    __test__ = False

    def __init__(self, leader: LeaderInfo | None) -> None:
        self.leader = leader

    async def start(self, listener: LeaderListener) -> None:
        result = listener(self.leader)
        if asyncio.iscoroutine(result):
            await result

    async def stop(self) -> None:
        pass

    def current(self) -> LeaderInfo | None:
        return self.leader


class TestingHa:
    __test__ = False

    def dispatcher_retrieval(self) -> LeaderRetrievalService:
        return TestingRetrieval(DISPATCHER)

    def resource_manager_retrieval(self) -> LeaderRetrievalService:
        return TestingRetrieval(None)

    def job_result_store(self) -> InMemoryJobResultStore:
        return InMemoryJobResultStore()

    def job_progress_store(self) -> InMemoryJobProgressStore:
        return InMemoryJobProgressStore()
