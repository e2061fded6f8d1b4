"""Unit tests: a task that ends within one batching window reports only its final state.

The task executor sends a job's state updates in batches. A final state replaces the same
attempt's INITIALIZING and RUNNING while they still wait in the queue, so a short task costs the
JobMaster one update instead of three; what was already sent is never taken back, and updates
of different attempts keep their order. A final state also ends the batching window at once
(the JobMaster waits for it); non-final ones wait for company.
"""

from __future__ import annotations

import asyncio

import pytest

from sparkmill.common.core.ids import JobID
from sparkmill.common.v1 import common_pb2, job_master_pb2
from sparkmill.services.taskexecutor import job_connection
from sparkmill.services.taskexecutor.job_connection import JobConnection

A = "a" * 32
B = "b" * 32


def _connection() -> JobConnection:
    return JobConnection(JobID("c" * 32), "tcp://127.0.0.1:7", "1" * 32, client=None)  # type: ignore[arg-type]


def _update(attempt: str, state: common_pb2.ExecutionState) -> job_master_pb2.TaskExecutionState:
    return job_master_pb2.TaskExecutionState(attempt_id=attempt, state=state)


def _states(batch: list[job_master_pb2.TaskExecutionState]) -> list[tuple[str, int]]:
    return [(u.attempt_id, u.state) for u in batch]


def test_a_final_state_replaces_the_queued_earlier_ones_of_its_attempt() -> None:
    connection = _connection()
    connection.queue_update(_update(A, common_pb2.EXECUTION_INITIALIZING), final=False)
    connection.queue_update(_update(B, common_pb2.EXECUTION_INITIALIZING), final=False)
    connection.queue_update(_update(A, common_pb2.EXECUTION_RUNNING), final=False)
    connection.queue_update(_update(A, common_pb2.EXECUTION_FINISHED), final=True)

    assert _states(connection.take_updates()) == [
        (A, common_pb2.EXECUTION_FINISHED),
        (B, common_pb2.EXECUTION_INITIALIZING),
    ]
    assert connection.updates == []


def test_what_was_sent_is_not_replaced_and_the_final_state_follows_it() -> None:
    connection = _connection()
    connection.queue_update(_update(A, common_pb2.EXECUTION_INITIALIZING), final=False)
    first = connection.take_updates()
    connection.queue_update(_update(A, common_pb2.EXECUTION_RUNNING), final=False)
    connection.queue_update(_update(A, common_pb2.EXECUTION_FAILED), final=True)

    assert _states(first) == [(A, common_pb2.EXECUTION_INITIALIZING)]
    assert _states(connection.take_updates()) == [(A, common_pb2.EXECUTION_FAILED)]


def test_a_batch_put_back_after_a_failed_send_keeps_every_update_in_order() -> None:
    connection = _connection()
    connection.queue_update(_update(A, common_pb2.EXECUTION_INITIALIZING), final=False)
    batch = connection.take_updates()
    connection.queue_update(_update(A, common_pb2.EXECUTION_RUNNING), final=False)
    connection.requeue_updates(batch)  # the send failed; it goes out again, first
    connection.queue_update(_update(A, common_pb2.EXECUTION_FINISHED), final=True)

    assert _states(connection.take_updates()) == [
        (A, common_pb2.EXECUTION_INITIALIZING),
        (A, common_pb2.EXECUTION_RUNNING),
        (A, common_pb2.EXECUTION_FINISHED),
    ]


def test_a_final_state_ends_the_batching_window_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        connection = _connection()
        connection.queue_update(_update(A, common_pb2.EXECUTION_RUNNING), final=False)
        waiting = asyncio.ensure_future(connection.batching_window())
        await asyncio.sleep(0)
        assert not waiting.done()  # a non-final update waits for company
        connection.queue_update(_update(A, common_pb2.EXECUTION_FINISHED), final=True)
        # Long before the (here: one hour) window would end, on however loaded a machine.
        await asyncio.wait_for(waiting, 5)

    monkeypatch.setattr(job_connection, "UPDATE_BATCH_WINDOW_S", 3600.0)
    asyncio.run(scenario())


def test_without_a_final_state_the_window_runs_its_course() -> None:
    async def scenario() -> float:
        connection = _connection()
        loop = asyncio.get_running_loop()
        connection.queue_update(_update(B, common_pb2.EXECUTION_RUNNING), final=False)
        started = loop.time()
        await connection.batching_window()
        return loop.time() - started

    assert asyncio.run(scenario()) >= job_connection.UPDATE_BATCH_WINDOW_S - 1e-4
