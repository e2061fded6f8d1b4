"""Unit tests of the task executor's Task: one attempt on its own thread, states on the loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sparkmill.common.core.errors import ErrorCode, SuppressRestartsError, TaskCancelledError
from sparkmill.common.core.ids import (
    new_allocation_id,
    new_attempt_id,
    new_dataset_id,
    new_job_id,
    new_vertex_id,
)
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.deployment.state_update import TaskFailure
from sparkmill.common.pipeline.noop import NoOpOptions, encode_noop_payload
from sparkmill.common.v1 import common_pb2, task_executor_pb2
from sparkmill.services.taskexecutor.context import Invokable, TaskContext, TaskOutcome
from sparkmill.services.taskexecutor.operators import NoOpInvokable
from sparkmill.services.taskexecutor.task import LoopMailbox, Task

ES = ExecutionState
WAIT_S = 5.0


# ------------------------------------------------------------------------------------ helpers


def make_tdd(
    *,
    payload: bytes = b"",
    attempt_number: int = 0,
    subtask_index: int = 1,
    parallelism: int = 3,
) -> task_executor_pb2.TaskDeploymentDescriptor:
    tdd = task_executor_pb2.TaskDeploymentDescriptor(
        job_id=new_job_id(),
        job_name="test-job",
        vertex_id=new_vertex_id(),
        vertex_name="mapper",
        subtask_index=subtask_index,
        parallelism=parallelism,
        attempt_id=new_attempt_id(),
        attempt_number=attempt_number,
        allocation_id=new_allocation_id(),
        operator=common_pb2.OperatorSpec(kind="noop", payload=payload),
    )
    tdd.job_config["restart-strategy.type"] = "none"
    return tdd


@dataclass
class Report:
    state: ExecutionState
    failure: TaskFailure | None
    outcome: TaskOutcome | None
    thread: int


@dataclass
class RecordingListener:
    """Records every reported transition; ``terminal`` is set once a terminal state arrives."""

    reports: list[Report] = field(default_factory=list)
    terminal: asyncio.Event = field(default_factory=asyncio.Event)
    running: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(
        self,
        task: Task,
        state: ExecutionState,
        failure: TaskFailure | None,
        outcome: TaskOutcome | None,
    ) -> None:
        assert task.state is state  # the task's own state is already updated
        self.reports.append(Report(state, failure, outcome, threading.get_ident()))
        if state is ES.RUNNING:
            self.running.set()
        if state.is_terminal:
            self.terminal.set()

    @property
    def states(self) -> list[ExecutionState]:
        return [r.state for r in self.reports]

    @property
    def last(self) -> Report:
        return self.reports[-1]


def run_task(
    factory: Callable[[], Invokable],
    scenario: Callable[[Task, RecordingListener], Awaitable[None]],
    tdd: task_executor_pb2.TaskDeploymentDescriptor | None = None,
) -> None:
    async def main() -> None:
        listener = RecordingListener()
        task = Task(tdd or make_tdd(), factory, listener, asyncio.get_running_loop())
        try:
            await asyncio.wait_for(scenario(task, listener), WAIT_S)
        finally:
            task.cancel()
            task.join(WAIT_S)

    asyncio.run(main())


def state_of(task: Task) -> ExecutionState:
    """The task's state (a call, so that the type checker does not narrow it)."""
    return task.state


async def until_terminal(task: Task, listener: RecordingListener) -> None:
    await asyncio.wait_for(listener.terminal.wait(), WAIT_S)
    # Give the loop a chance to deliver anything (wrongly) posted after the terminal state.
    await asyncio.to_thread(task.join, WAIT_S)
    for _ in range(5):
        await asyncio.sleep(0)


class RaisingInvokable:
    def invoke(self, context: TaskContext) -> TaskOutcome:
        raise ValueError(f"broken record in subtask {context.subtask_index}")

    def cancel(self) -> None:
        pass


class BlockingInvokable:
    """Blocks until cancelled; then raises (``cooperative``) or returns normally."""

    def __init__(self, *, cooperative: bool = True) -> None:
        self.cooperative = cooperative
        self.release = threading.Event()
        self.invoked = threading.Event()
        self.cancel_calls = 0

    def invoke(self, context: TaskContext) -> TaskOutcome:
        self.invoked.set()
        if not self.release.wait(WAIT_S):
            raise AssertionError("never cancelled")
        if self.cooperative:
            raise TaskCancelledError("interrupted")
        return TaskOutcome(IOCounters(records_out=1))

    def cancel(self) -> None:
        self.cancel_calls += 1
        self.release.set()


class OutcomeInvokable:
    def __init__(self) -> None:
        self.seen: TaskContext | None = None

    def invoke(self, context: TaskContext) -> TaskOutcome:
        self.seen = context
        return TaskOutcome(IOCounters(3, 5, 30, 50), accumulator=b"ok")

    def cancel(self) -> None:
        pass


# ------------------------------------------------------------------------------------ tests


def test_noop_task_runs_initializing_running_finished_on_the_loop_thread() -> None:
    async def scenario(task: Task, listener: RecordingListener) -> None:
        assert state_of(task) is ES.DEPLOYING
        loop_thread = threading.get_ident()
        task.start()
        await until_terminal(task, listener)
        assert listener.states == [ES.INITIALIZING, ES.RUNNING, ES.FINISHED]
        assert task.state is ES.FINISHED
        assert all(r.thread == loop_thread for r in listener.reports)
        assert all(r.failure is None for r in listener.reports)
        assert listener.last.outcome == TaskOutcome()

    run_task(NoOpInvokable, scenario, make_tdd(payload=encode_noop_payload(NoOpOptions())))


def test_task_reports_the_invokable_outcome_and_builds_the_context_from_the_tdd() -> None:
    invokable = OutcomeInvokable()
    tdd = make_tdd(payload=b"opaque", attempt_number=2, subtask_index=0, parallelism=4)
    dataset = new_dataset_id()
    gate = tdd.inputs.add(
        dataset_id=dataset,
        pattern=common_pb2.ALL_TO_ALL,
        partitioner="hash",
        producer_parallelism=2,
    )
    gate.partitions.add(
        dataset_id=dataset, partition_number=1, producer_attempt_id="p1", producer_resource_id="r"
    )
    tdd.produced_dataset_ids.append("out-ds")

    async def scenario(task: Task, listener: RecordingListener) -> None:
        assert task.attempt_id == tdd.attempt_id
        assert task.job_id == tdd.job_id
        assert task.allocation_id == tdd.allocation_id
        assert task.name == "mapper (1/4) attempt #2"
        task.start()
        await until_terminal(task, listener)
        assert listener.states == [ES.INITIALIZING, ES.RUNNING, ES.FINISHED]
        assert listener.last.outcome == TaskOutcome(IOCounters(3, 5, 30, 50), b"ok")
        seen = invokable.seen
        assert seen is not None
        assert (seen.subtask_index, seen.parallelism, seen.attempt_number) == (0, 4, 2)
        assert seen.payload == b"opaque"
        assert seen.job_config == {"restart-strategy.type": "none"}
        assert seen.produced_dataset_ids == ["out-ds"]
        [input_gate] = seen.inputs
        assert (input_gate.pattern, input_gate.partitioner) == ("ALL_TO_ALL", "hash")
        assert input_gate.producer_parallelism == 2
        assert input_gate.partitions[0].partition_number == 1
        assert input_gate.partitions[0].producer_attempt_id == "p1"

    run_task(lambda: invokable, scenario, tdd)


def test_a_raising_invokable_fails_with_type_message_and_traceback() -> None:
    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await until_terminal(task, listener)
        assert listener.states == [ES.INITIALIZING, ES.RUNNING, ES.FAILED]
        assert task.state is ES.FAILED
        failure = listener.last.failure
        assert failure is not None
        assert failure.code is ErrorCode.INTERNAL
        assert failure.exception_type == "ValueError"
        assert failure.message == "broken record in subtask 1"
        assert failure.details.startswith("Traceback (most recent call last)")
        assert "in invoke" in failure.details
        assert "ValueError: broken record in subtask 1" in failure.details
        assert listener.last.outcome is None

    run_task(RaisingInvokable, scenario)


class _UnloadableFunction(SuppressRestartsError):
    """A subclass: the task executor decides by isinstance, not by the class name."""


class SuppressingInvokable(RaisingInvokable):
    def invoke(self, context: TaskContext) -> TaskOutcome:
        raise _UnloadableFunction("the user function cannot be loaded")


def test_a_suppress_restarts_error_subclass_is_reported_as_suppressing_restarts() -> None:
    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await until_terminal(task, listener)
        failure = listener.last.failure
        assert failure is not None
        assert failure.exception_type == "_UnloadableFunction"
        assert failure.suppress_restarts

    run_task(SuppressingInvokable, scenario)


def test_an_ordinary_failure_does_not_suppress_restarts() -> None:
    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await until_terminal(task, listener)
        failure = listener.last.failure
        assert failure is not None and not failure.suppress_restarts

    run_task(RaisingInvokable, scenario)


def test_the_noop_test_operator_fails_its_configured_attempts() -> None:
    payload = encode_noop_payload(NoOpOptions(fail_attempts=1))

    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await until_terminal(task, listener)
        failure = listener.last.failure
        assert listener.states[-1] is ES.FAILED
        assert failure is not None
        assert failure.exception_type == "TestOperatorFailure"
        assert "fails attempt 0 as configured" in failure.message

    run_task(NoOpInvokable, scenario, make_tdd(payload=payload, attempt_number=0))

    async def second_attempt(task: Task, listener: RecordingListener) -> None:
        task.start()
        await until_terminal(task, listener)
        assert listener.states == [ES.INITIALIZING, ES.RUNNING, ES.FINISHED]

    run_task(NoOpInvokable, second_attempt, make_tdd(payload=payload, attempt_number=1))


def test_a_factory_that_raises_fails_the_task() -> None:
    def factory() -> Invokable:
        raise ImportError("no module named 'operator_x'")

    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await until_terminal(task, listener)
        assert listener.states == [ES.INITIALIZING, ES.FAILED]
        assert listener.last.failure is not None
        assert listener.last.failure.exception_type == "ImportError"

    run_task(factory, scenario)


def test_cancel_while_running_ends_canceled() -> None:
    invokable = BlockingInvokable()

    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await asyncio.wait_for(listener.running.wait(), WAIT_S)
        await asyncio.to_thread(invokable.invoked.wait, WAIT_S)
        assert state_of(task) is ES.RUNNING
        task.cancel()
        await until_terminal(task, listener)
        assert listener.states == [ES.INITIALIZING, ES.RUNNING, ES.CANCELED]
        assert task.state is ES.CANCELED
        assert listener.last.failure is None
        assert invokable.cancel_calls == 1
        assert task.context.cancelled.is_set()

    run_task(lambda: invokable, scenario)


def test_cancel_wins_even_if_the_invokable_then_returns_normally() -> None:
    invokable = BlockingInvokable(cooperative=False)

    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await asyncio.to_thread(invokable.invoked.wait, WAIT_S)
        task.cancel()
        await until_terminal(task, listener)
        assert listener.states[-1] is ES.CANCELED
        assert ES.FINISHED not in listener.states

    run_task(lambda: invokable, scenario)


def test_cancel_interrupts_a_sleeping_noop_task() -> None:
    payload = encode_noop_payload(NoOpOptions(sleep_s=30.0))

    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await asyncio.wait_for(listener.running.wait(), WAIT_S)
        task.cancel()
        await until_terminal(task, listener)
        assert listener.states == [ES.INITIALIZING, ES.RUNNING, ES.CANCELED]

    run_task(NoOpInvokable, scenario, make_tdd(payload=payload))


def test_cancel_before_start_never_invokes() -> None:
    invoked: list[bool] = []

    class Recording(RaisingInvokable):
        def invoke(self, context: TaskContext) -> TaskOutcome:
            invoked.append(True)
            return TaskOutcome()

    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.cancel()
        task.start()
        await until_terminal(task, listener)
        assert listener.states == [ES.INITIALIZING, ES.CANCELED]
        assert invoked == []

    run_task(Recording, scenario)


def test_fail_externally_ends_failed_with_the_external_cause() -> None:
    invokable = BlockingInvokable()

    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await asyncio.wait_for(listener.running.wait(), WAIT_S)
        await asyncio.to_thread(invokable.invoked.wait, WAIT_S)
        task.fail_externally(ConnectionError("slot 3 was freed by the resource manager"))
        task.fail_externally(RuntimeError("a second cause is ignored"))
        await until_terminal(task, listener)
        assert listener.states == [ES.INITIALIZING, ES.RUNNING, ES.FAILED]
        assert task.state is ES.FAILED
        failure = listener.last.failure
        assert failure is not None
        assert failure.code is ErrorCode.FAILED_PRECONDITION
        assert failure.exception_type == "ConnectionError"
        assert failure.message == "slot 3 was freed by the resource manager"
        assert invokable.cancel_calls >= 1

    run_task(lambda: invokable, scenario)


def test_fail_externally_wins_over_a_normal_return() -> None:
    invokable = BlockingInvokable(cooperative=False)

    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await asyncio.to_thread(invokable.invoked.wait, WAIT_S)
        task.fail_externally(TimeoutError("job master lost"))
        await until_terminal(task, listener)
        assert listener.states[-1] is ES.FAILED
        assert listener.last.failure is not None
        assert listener.last.failure.exception_type == "TimeoutError"

    run_task(lambda: invokable, scenario)


def test_nothing_is_reported_after_a_terminal_state() -> None:
    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await until_terminal(task, listener)
        task.cancel()
        task.fail_externally(RuntimeError("too late"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert listener.states == [ES.INITIALIZING, ES.RUNNING, ES.FINISHED]
        assert task.state is ES.FINISHED

    run_task(OutcomeInvokable, scenario)


class CountingLoop:
    """Records the wakeups asked of it; runs them when the test says."""

    def __init__(self) -> None:
        self.wakeups: list[Any] = []

    def call_soon_threadsafe(self, callback: Any, *args: Any) -> None:
        self.wakeups.append((callback, args))

    def run(self) -> None:
        todo, self.wakeups = self.wakeups, []
        for callback, args in todo:
            callback(*args)


def test_the_mailbox_wakes_the_loop_once_for_what_arrives_before_it_runs() -> None:
    loop = CountingLoop()
    mailbox = LoopMailbox(loop)  # type: ignore[arg-type]
    seen: list[int] = []
    threads = [
        threading.Thread(target=mailbox.post, args=(lambda i=i: seen.append(i),)) for i in range(3)
    ]
    for thread in threads:
        thread.start()
        thread.join()
    assert len(loop.wakeups) == 1  # three posts, one wakeup
    loop.run()
    assert seen == [0, 1, 2]
    mailbox.post(lambda: seen.append(3))  # empty again: the next post wakes it again
    assert len(loop.wakeups) == 1
    loop.run()
    assert seen == [0, 1, 2, 3]
