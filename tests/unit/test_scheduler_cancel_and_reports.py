"""The DefaultScheduler cancelling jobs, applying task state reports (stale, illegal, fast tasks)
and losing slots."""

from __future__ import annotations

import pytest

from sparkmill.common.core.errors import NotFoundError
from sparkmill.common.core.ids import (
    new_attempt_id,
    short,
)
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.services.jobmaster.scheduler.restart_strategy import (
    FixedDelayRestartStrategy,
)
from tests.unit.scheduler_harness import (
    ES,
    Harness,
    chain,
    run,
    settle,
)

# ------------------------------------------------------------------------------------ cancel


@pytest.mark.parametrize("late_report", [ES.FAILED, ES.FINISHED, ES.CANCELED])
def test_cancel_while_running(late_report: ExecutionState) -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        assert h.offer(1) == 1  # noop-0 #0 gets a slot, noop-0 #1 keeps waiting
        await settle()
        h.run("noop-0", 0)
        pending_request = h.open_requests()[0]

        h.scheduler.cancel()
        await settle()
        assert h.status() is JobStatus.CANCELLING
        # Deployed: a cancel RPC; waiting for a slot: withdrawn; never scheduled: cancelled.
        assert h.state("noop-0", 0) is ES.CANCELING
        assert [e.attempt_id for e, _ in h.actions.cancelled] == [
            h.execution("noop-0", 0).attempt_id
        ]
        assert h.state("noop-0", 1) is ES.CANCELED
        assert h.rm.cancelled == [pending_request]
        assert h.pool.num_pending_requests() == 0
        assert h.states("noop-1") == [ES.CANCELED, ES.CANCELED]

        # Whatever the task executor reports now, the cancellation wins.
        assert h.report("noop-0", 0, late_report, message="interrupted")
        assert h.state("noop-0", 0) is ES.CANCELED
        assert h.status() is JobStatus.CANCELED
        assert h.actions.status_names == ["RUNNING", "CANCELLING", "CANCELED"]
        assert h.scheduler.exceptions == []
        assert h.scheduler.restarts == 0
        assert h.pool.num_allocated_slots() == 0
        assert h.pool.num_available_slots() == 1

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(5, 0.0))


def test_cancel_rpc_failure_counts_as_cancelled() -> None:
    async def scenario(h: Harness) -> None:
        h.actions.cancel_failure = NotFoundError("no such task")
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.scheduler.cancel()
        await settle()
        assert h.state("noop-0", 0) is ES.CANCELED
        assert h.status() is JobStatus.CANCELED
        assert h.pool.num_allocated_slots() == 0

    run(chain(1, 1), scenario)


def test_cancel_before_any_slot_arrived_cancels_at_once() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        requests = list(h.rm.requested)
        h.scheduler.cancel()
        await settle()
        assert h.status() is JobStatus.CANCELED
        assert sorted(h.rm.cancelled) == sorted(requests)
        # A slot arriving late is not wanted any more.
        assert h.offer() == 0
        assert h.actions.submitted == []
        h.scheduler.cancel()  # idempotent
        assert h.actions.status_names == ["RUNNING", "CANCELLING", "CANCELED"]

    run(chain(2, 1), scenario)


# ------------------------------------------------------------------------------------ reports


def test_stale_and_illegal_state_updates_are_ignored() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        old = h.execution("noop-0", 0)
        h.run("noop-0", 0)
        assert h.report("noop-0", 0, ES.FAILED, message="first")
        await settle()
        new = h.execution("noop-0", 0)
        assert new is not old
        assert new.state is ES.DEPLOYING

        # Reports about the superseded attempt change nothing.
        for state in (ES.RUNNING, ES.FINISHED, ES.FAILED, ES.CANCELED):
            assert h.scheduler.update_task_execution_state(old.attempt_id, state) is False
        assert old.state is ES.FAILED
        assert new.state is ES.DEPLOYING
        # Unknown attempts, DEPLOYING (the job master's own state) and illegal moves neither.
        assert h.scheduler.update_task_execution_state(new_attempt_id(), ES.RUNNING) is False
        assert h.report("noop-0", 0, ES.DEPLOYING) is False
        h.run("noop-0", 0)
        assert h.report("noop-0", 0, ES.INITIALIZING) is False
        assert h.state("noop-0", 0) is ES.RUNNING
        assert h.report("noop-0", 0, ES.FINISHED) is True
        assert h.report("noop-0", 0, ES.FINISHED) is False  # a duplicate
        assert h.report("noop-0", 0, ES.FAILED) is False  # terminal stays terminal
        assert h.state("noop-0", 0) is ES.FINISHED
        assert h.status() is JobStatus.FINISHED
        assert len(h.scheduler.exceptions) == 1

    run(chain(1, 1), scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.0))


def test_a_fast_task_may_finish_before_reporting_running() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert h.report("noop-0", 0, ES.FINISHED)  # straight from DEPLOYING
        assert h.status() is JobStatus.FINISHED

    run(chain(1, 1), scenario)


# ------------------------------------------------------------------------------------ slot loss


def test_slot_lost_fails_the_running_attempt() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        _, slot = h.actions.submitted[0]

        lost = h.pool.fail_slot(slot.allocation_id, ConnectionError("task executor vanished"))
        assert lost is slot
        await settle()
        execution = h.execution("noop-0", 0)
        assert execution.state is ES.FAILED
        assert execution.failure_info is not None
        message = execution.failure_info.message
        assert "lost its slot on task executor" in message
        assert short(h.te.resource_id) in message
        assert "te-1:6123" in message
        assert "task executor vanished" in message
        assert execution.failure_info.exception_class == "ConnectionError"
        assert h.status() is JobStatus.FAILED
        assert h.scheduler.exceptions[0].task_executor == h.te.resource_id
        assert h.pool.num_allocated_slots() == 0
        assert h.pool.num_available_slots() == 0  # the lost slot is gone, not reused

    run(chain(1, 1), scenario)


def test_slot_lost_with_restart_reruns_the_attempt_in_a_new_slot() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.pool.release_task_executor(h.te.resource_id, ConnectionError("heartbeat timeout"))
        await settle()
        assert h.execution("noop-0", 0).attempt_number == 1
        assert h.state("noop-0", 0) is ES.SCHEDULED
        assert len(h.rm.requested) == 2  # the lost slot cannot be reused
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(chain(1, 1), scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.0))


def test_slot_lost_while_canceling_completes_the_cancellation() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.scheduler.cancel()
        await settle()
        assert h.state("noop-0", 0) is ES.CANCELING
        _, slot = h.actions.submitted[0]
        h.pool.fail_slot(slot.allocation_id, ConnectionError("gone"))
        assert h.state("noop-0", 0) is ES.CANCELED
        assert h.status() is JobStatus.CANCELED
        assert h.scheduler.exceptions == []

    run(chain(1, 1), scenario)
