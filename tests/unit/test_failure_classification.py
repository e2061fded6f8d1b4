"""Unit tests of failure classification: which task failures are restarted at all.

On the task executor, :func:`classify_task_exception` marks what no restart can fix; in the
JobMaster, :class:`RepeatedFailureDetector` fails the job when a subtask's attempt raises exactly
the error its previous attempt raised (a user's bug), while failures of the environment (lost
slots, executors, sessions) are always restarted. Exponential-delay counts failures that arrive
while a restart is pending as one incident.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from sparkmill.common.core.errors import (
    ErrorCode,
    InputNotFoundError,
    OperatorError,
    PartitionNotFoundError,
    SparkJobError,
    SparkSessionUnavailableError,
    SuppressRestartsError,
    ThrowableType,
    classify_task_exception,
)
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.services.jobmaster.executiongraph.execution_topology import ExecutionVertexID
from sparkmill.services.jobmaster.scheduler.failure_classifier import (
    RepeatedFailureDetector,
    error_signature,
)
from sparkmill.services.jobmaster.scheduler.restart_strategy import (
    ExponentialDelayRestartStrategy,
    FixedDelayRestartStrategy,
    RestartStrategy,
)
from sparkmill.services.taskexecutor.context import TaskContext, TaskOutcome
from sparkmill.services.taskexecutor.task import Task
from tests.unit.scheduler_harness import Harness, chain, run, settle
from tests.unit.test_task import RecordingListener, run_task, until_terminal

ES = ExecutionState


# ------------------------------------------------------------------------- task executor side


class AnalysisException(Exception):
    """Stands in for pyspark's (matched by class name: common/ never imports pyspark)."""


class ParseException(AnalysisException):
    pass


class Py4JNetworkError(Exception):
    pass


def _wrapped(outer: Exception, inner: BaseException) -> Exception:
    try:
        raise outer from inner
    except Exception as exc:
        return exc


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ValueError("boom"), ThrowableType.RECOVERABLE),
        (SparkJobError("vertex 'x' failed writing: ValueError: boom"), ThrowableType.RECOVERABLE),
        (SuppressRestartsError("cannot load"), ThrowableType.NON_RECOVERABLE),
        (InputNotFoundError("input path /nope matches no file"), ThrowableType.NON_RECOVERABLE),
        (
            _wrapped(OperatorError("operator 'read' failed"), InputNotFoundError("/nope")),
            ThrowableType.NON_RECOVERABLE,
        ),
        (
            _wrapped(OperatorError("operator 'select' failed"), ParseException("bad sql")),
            ThrowableType.NON_RECOVERABLE,
        ),
        (AnalysisException("[UNRESOLVED_COLUMN] x"), ThrowableType.NON_RECOVERABLE),
        (
            _wrapped(PartitionNotFoundError("lost", ()), OperatorError("operator 'read' failed")),
            ThrowableType.PARTITION_DATA_MISSING,
        ),
        (SparkSessionUnavailableError("no JVM"), ThrowableType.ENVIRONMENT),
        (
            _wrapped(SparkJobError("write failed"), Py4JNetworkError("gone")),
            ThrowableType.ENVIRONMENT,
        ),
    ],
)
def test_task_exceptions_are_classified_through_their_causes(
    exc: BaseException, kind: ThrowableType
) -> None:
    assert classify_task_exception(exc) is kind


class _Raising:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def invoke(self, context: TaskContext) -> TaskOutcome:
        raise self.exc

    def cancel(self) -> None:
        pass


@pytest.mark.parametrize(
    ("exc", "code", "suppress"),
    [
        (ValueError("boom"), ErrorCode.INTERNAL, False),
        (
            _wrapped(OperatorError("operator 'read' failed"), InputNotFoundError("/nope")),
            ErrorCode.INTERNAL,
            True,
        ),
        (AnalysisException("[UNRESOLVED_COLUMN] x"), ErrorCode.INTERNAL, True),
        (SparkSessionUnavailableError("no JVM"), ErrorCode.UNAVAILABLE, False),
    ],
)
def test_a_task_reports_the_classification_with_its_failure(
    exc: BaseException, code: ErrorCode, suppress: bool
) -> None:
    async def scenario(task: Task, listener: RecordingListener) -> None:
        task.start()
        await until_terminal(task, listener)
        failure = listener.last.failure
        assert listener.last.state is ES.FAILED and failure is not None
        assert failure.code is code
        assert failure.suppress_restarts is suppress

    run_task(lambda: _Raising(exc), scenario)


# ------------------------------------------------------------------------------- the detector


def test_the_signature_is_the_type_and_the_first_line() -> None:
    assert error_signature("SparkJobError", "ValueError: boom\n  trace 1") == (
        "SparkJobError",
        "ValueError: boom",
    )
    assert error_signature("X", "") == ("X", "")


def test_the_detector_names_the_earlier_attempt_that_failed_the_same_way() -> None:
    detector = RepeatedFailureDetector()
    vertex = ExecutionVertexID("v" * 32, 0)  # type: ignore[arg-type]
    other = ExecutionVertexID("v" * 32, 1)  # type: ignore[arg-type]
    assert detector.repeated(vertex, 0, "ValueError", "boom") is None
    assert detector.repeated(other, 0, "ValueError", "boom") is None  # another subtask
    assert detector.repeated(vertex, 1, "ValueError", "boom") == 0
    assert detector.repeated(vertex, 2, "ValueError", "another") is None
    detector.finished(vertex)
    assert detector.repeated(vertex, 3, "ValueError", "another") is None


def test_a_disabled_detector_never_calls_a_failure_deterministic() -> None:
    detector = RepeatedFailureDetector(enabled=False)
    vertex = ExecutionVertexID("v" * 32, 0)  # type: ignore[arg-type]
    assert detector.repeated(vertex, 0, "ValueError", "boom") is None
    assert detector.repeated(vertex, 1, "ValueError", "boom") is None


# ------------------------------------------------------------------------------- the scheduler


def fail(h: Harness, index: int, message: str, *, raised_by_task: bool = True) -> None:
    execution = h.execution("noop-0", index)
    assert h.scheduler.update_task_execution_state(
        execution.attempt_id,
        ES.FAILED,
        message=message,
        exception_type="SparkJobError" if raised_by_task else "UnavailableError",
        raised_by_task=raised_by_task,
    )


async def restarted(h: Harness, index: int) -> None:
    """Wait for the restart of noop-0 #index and run its new attempt."""
    for _ in range(200):
        await asyncio.sleep(0.005)
        h.offer()
        await settle()
        if h.state("noop-0", index) is ES.DEPLOYING:
            h.run("noop-0", index)
            return
    raise AssertionError(f"noop-0 #{index} was not restarted: {h.states('noop-0')}")


async def started(h: Harness) -> None:
    h.scheduler.start_scheduling()
    h.offer()
    await settle()
    h.run("noop-0", 0)
    h.run("noop-0", 1)


def test_the_same_error_on_the_next_attempt_fails_the_job_with_it_as_the_root_cause() -> None:
    async def scenario(h: Harness) -> None:
        await started(h)
        fail(h, 0, "vertex 'noop-0' failed writing: ValueError: bad row 7\ntrace a")
        await settle()
        assert h.scheduler.restarts == 1 and h.status() is JobStatus.RUNNING
        await restarted(h, 0)
        fail(h, 0, "vertex 'noop-0' failed writing: ValueError: bad row 7\ntrace b")
        await settle()
        assert h.status() is JobStatus.FAILING
        cause = h.scheduler.failure_cause
        assert "ValueError: bad row 7" in cause
        assert "attempt #0 of this subtask failed with the same error" in cause
        assert h.scheduler.restarts == 1  # not restarted again

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(100, 0.0))


def test_a_different_error_on_the_next_attempt_is_restarted() -> None:
    async def scenario(h: Harness) -> None:
        await started(h)
        fail(h, 0, "flaky stage fails attempt 0")
        await settle()
        await restarted(h, 0)
        fail(h, 0, "flaky stage fails attempt 1")
        await settle()
        assert h.status() is JobStatus.RUNNING
        assert h.scheduler.restarts == 2

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(100, 0.0))


def test_the_same_failure_of_the_environment_is_always_restarted() -> None:
    async def scenario(h: Harness) -> None:
        await started(h)
        fail(h, 0, "lost its slot on task executor x", raised_by_task=False)
        await settle()
        await restarted(h, 0)
        fail(h, 0, "lost its slot on task executor x", raised_by_task=False)
        await settle()
        assert h.status() is JobStatus.RUNNING
        assert h.scheduler.restarts == 2

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(100, 0.0))


def test_repeated_errors_are_restarted_when_the_rule_is_off() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.repeated_failures.enabled = False
        await started(h)
        fail(h, 0, "ValueError: timed out")
        await settle()
        await restarted(h, 0)
        fail(h, 0, "ValueError: timed out")
        await settle()
        assert h.status() is JobStatus.RUNNING
        assert h.scheduler.restarts == 2

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(100, 0.0))


class CountingExponential(ExponentialDelayRestartStrategy):
    def __init__(self) -> None:
        super().__init__(0.05, 1.0, 2.0, 600.0, 0.0, 2, random.Random(1))
        self.notified: list[float] = []

    def notify_failure(self, timestamp: float) -> None:
        self.notified.append(timestamp)
        super().notify_failure(timestamp)


def test_exponential_delay_counts_failures_during_a_pending_restart_as_one() -> None:
    strategy = CountingExponential()

    async def scenario(h: Harness) -> None:
        await started(h)
        # Both tasks of one lost executor fail together: one incident, one back-off.
        fail(h, 0, "lost its slot", raised_by_task=False)
        fail(h, 1, "lost its slot", raised_by_task=False)
        await settle()
        assert len(strategy.notified) == 1
        assert h.scheduler.restarts == 1
        await restarted(h, 0)
        await restarted(h, 1)
        # Another incident once the restart happened: counted (2 of 2 allowed), grows the pause.
        fail(h, 0, "lost its slot", raised_by_task=False)
        await settle()
        assert len(strategy.notified) == 2 and h.scheduler.restarts == 2
        assert strategy.backoff_s() == pytest.approx(0.1)
        assert h.status() is JobStatus.RUNNING

    run(chain(2, 2), scenario, restart_strategy=strategy)


def test_fixed_delay_still_counts_every_failure() -> None:
    strategy: RestartStrategy = FixedDelayRestartStrategy(1, 0.05)

    async def scenario(h: Harness) -> None:
        await started(h)
        fail(h, 0, "lost its slot", raised_by_task=False)
        fail(h, 1, "lost its slot", raised_by_task=False)
        await settle()
        assert h.status() is JobStatus.FAILED
        assert "no restart left" in h.scheduler.failure_cause

    run(chain(2, 2), scenario, restart_strategy=strategy)
