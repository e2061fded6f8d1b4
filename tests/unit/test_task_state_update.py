"""The task state update codec (common/deployment/state_update.py): round trips of every shape
the task executor sends, and the refusal of messages no task executor builds."""

from __future__ import annotations

import pytest

from sparkmill.common.core.errors import ErrorCode, InvalidArgumentError
from sparkmill.common.core.ids import ExecutionAttemptID, new_attempt_id
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.partitions import InputPartitionInfo
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.deployment.state_update import (
    LostPartition,
    MalformedTaskStateUpdate,
    TaskFailure,
    TaskStateUpdate,
)
from sparkmill.common.v1 import common_pb2, job_master_pb2

ES = ExecutionState
ATTEMPT = ExecutionAttemptID("a" * 32)
LOST = (LostPartition("ds-1", 3, "b" * 32), LostPartition("ds-2", 0, "c" * 32))
FAILURE = TaskFailure(
    ErrorCode.INTERNAL, "ValueError", "bad row", "Traceback ...", LOST, suppress_restarts=True
)


def round_trip(update: TaskStateUpdate) -> TaskStateUpdate:
    wire = job_master_pb2.TaskExecutionState.FromString(update.to_proto().SerializeToString())
    return TaskStateUpdate.from_proto(wire)


@pytest.mark.parametrize(
    "update",
    [
        TaskStateUpdate(ATTEMPT, ES.INITIALIZING),
        TaskStateUpdate(ATTEMPT, ES.RUNNING),
        TaskStateUpdate(ATTEMPT, ES.FINISHED, io=IOCounters(10, 5, 1000, 500), accumulator=b"r"),
        TaskStateUpdate(ATTEMPT, ES.FINISHED, io=IOCounters()),  # an outcome of zeros is kept
        TaskStateUpdate(ATTEMPT, ES.CANCELED),
        TaskStateUpdate(ATTEMPT, ES.FAILED, FAILURE),
        TaskStateUpdate(
            ATTEMPT, ES.FAILED, TaskFailure(ErrorCode.FAILED_PRECONDITION, "Lost", "slot freed", "")
        ),
        TaskStateUpdate(ATTEMPT, ES.FAILED),  # a FAILED report without details is still one
    ],
    ids=lambda u: f"{u.state.name}-{'failure' if u.failure else 'io' if u.io else 'plain'}",
)
def test_every_update_the_task_executor_sends_round_trips(update: TaskStateUpdate) -> None:
    assert round_trip(update) == update


def test_the_wire_form_is_the_one_the_job_master_always_read() -> None:
    message = TaskStateUpdate(ATTEMPT, ES.FAILED, FAILURE, IOCounters(1, 2, 3, 4)).to_proto()
    assert message.state == common_pb2.EXECUTION_FAILED
    assert (message.error.code, message.error.exception_type) == (common_pb2.INTERNAL, "ValueError")
    assert message.suppress_restarts
    assert [(p.dataset_id, p.partition_number) for p in message.lost_partitions] == [
        ("ds-1", 3),
        ("ds-2", 0),
    ]
    assert message.io_metrics.bytes_in == 3
    assert not TaskStateUpdate(ATTEMPT, ES.RUNNING).to_proto().HasField("io_metrics")


def test_a_lost_partition_comes_from_the_input_partition_the_task_could_not_read() -> None:
    partition = InputPartitionInfo("ds-1", 3, "b" * 32, "te-1")
    assert LostPartition.of(partition) == LOST[0]
    assert LOST[0].as_tuple() == ("ds-1", 3, "b" * 32)


def test_only_a_failed_update_may_carry_a_failure() -> None:
    with pytest.raises(ValueError, match="a FINISHED update cannot carry a failure"):
        TaskStateUpdate(ATTEMPT, ES.FINISHED, FAILURE)


def _message(**fields: object) -> job_master_pb2.TaskExecutionState:
    base: dict[str, object] = {"attempt_id": new_attempt_id(), "state": common_pb2.EXECUTION_FAILED}
    return job_master_pb2.TaskExecutionState(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (_message(attempt_id=""), "attempt_id is missing"),
        (_message(state=common_pb2.EXECUTION_STATE_UNSPECIFIED), "state: 0 is not an execution"),
        (_message(state=42), "state: 42 is not an execution state"),
        (
            _message(state=common_pb2.EXECUTION_RUNNING, error=common_pb2.ErrorInfo(message="x")),
            "a RUNNING update carries an error",
        ),
        (_message(error={"code": 99}), "error code 99 is unknown"),
        (
            _message(lost_partitions=[common_pb2.ResultPartitionRef(dataset_id="d")]),
            "lost partitions or suppress_restarts without an error",
        ),
        (_message(suppress_restarts=True), "without an error"),
    ],
    ids=[
        "no-attempt",
        "unspecified",
        "unknown-state",
        "error-on-running",
        "bad-code",
        "lost",
        "sr",
    ],
)
def test_a_malformed_message_is_refused_with_a_typed_error(
    message: job_master_pb2.TaskExecutionState, problem: str
) -> None:
    with pytest.raises(MalformedTaskStateUpdate, match=problem) as refused:
        TaskStateUpdate.from_proto(message)
    # An INVALID_ARGUMENT for the task executor's RPC, naming the attempt when there is one.
    assert isinstance(refused.value, InvalidArgumentError)
    if message.attempt_id:
        assert message.attempt_id[:8] in str(refused.value)


def test_the_sub_partition_sizes_of_a_finished_attempt_travel_and_are_checked() -> None:
    written = (("ds-1", (10, 0, 7)), ("ds-2", ()))
    update = TaskStateUpdate(new_attempt_id(), ExecutionState.FINISHED, written=written)
    assert TaskStateUpdate.from_proto(update.to_proto()).written == written
    bad = update.to_proto()
    bad.written[0].bytes[1] = -1
    with pytest.raises(MalformedTaskStateUpdate, match="negative sub-partition size"):
        TaskStateUpdate.from_proto(bad)
    bad = update.to_proto()
    bad.written.add(dataset_id="ds-3").bytes.extend([0] * 40_000)
    with pytest.raises(MalformedTaskStateUpdate, match="too long"):
        TaskStateUpdate.from_proto(bad)


def test_the_pipeline_worker_reports_the_sizes_with_the_outcome() -> None:
    from sparkmill.services.taskexecutor.context import TaskOutcome
    from sparkmill.services.taskexecutor.pipeline.codec import finished_result, outcome_of

    outcome = TaskOutcome(written=(("ds-1", (1, 2, 3)),))
    assert outcome_of(finished_result("a1", outcome)).written == outcome.written
