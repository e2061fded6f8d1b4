"""Submission is stored under the dispatcher's leadership, never after it ended.

A dispatcher that was paused or cut off can still be answering for a moment after its
ZooKeeper session expired, while a successor already recovered the job graph store. The graph
write is fenced by the leadership (in ZooKeeper: one transaction with a check of the leader's
latch node), and a leadership lost during the write is reported as NOT_LEADER so the client
asks the new leader, where its retry finds the job.
"""

from __future__ import annotations

import asyncio

import pytest

from sparkmill.common.core.errors import NotLeaderError
from tests.unit.dispatcher_harness import (
    RecordingJobGraphStore,
    TestingFencedElection,
    call_context,
    leading_dispatcher,
    submission,
)


def test_the_graph_is_stored_with_the_leaders_fence_before_the_job_is_known() -> None:
    async def scenario() -> None:
        election, store = TestingFencedElection(), RecordingJobGraphStore()
        dispatcher = leading_dispatcher(election, store)
        request = submission()
        reply = await dispatcher.submit_job(request, call_context())
        assert reply.job_id == request.job_graph.job_id
        assert store.fences == [election.fence]
        assert store.stored() == [reply.job_id]
        assert reply.job_id in dispatcher.jobs

    asyncio.run(scenario())


def test_a_leader_whose_session_ended_stores_nothing_and_says_not_leader() -> None:
    async def scenario() -> None:
        election, store = TestingFencedElection(), RecordingJobGraphStore()
        dispatcher = leading_dispatcher(election, store)
        election.session_ended = True  # ZooKeeper's view; the loop has not heard of it yet
        with pytest.raises(NotLeaderError):
            await dispatcher.submit_job(submission(), call_context())
        assert store.fences == [] and store.stored() == []
        assert dispatcher.jobs == {}

    asyncio.run(scenario())


def test_leadership_lost_during_the_write_is_not_acknowledged_nor_kept_here() -> None:
    async def scenario() -> None:
        election, store = TestingFencedElection(), RecordingJobGraphStore()
        dispatcher = leading_dispatcher(election, store)
        loop = asyncio.get_running_loop()

        def revoke() -> None:  # the loop hears of the lost session before the write returns
            loop.call_soon_threadsafe(setattr, dispatcher, "session_id", None)

        store.during_put = revoke
        request = submission()
        with pytest.raises(NotLeaderError):
            await dispatcher.submit_job(request, call_context())
        # Stored while it still led, so the successor recovers it; this process forgets it.
        assert store.stored() == [request.job_graph.job_id]
        assert dispatcher.jobs == {}

    asyncio.run(scenario())
