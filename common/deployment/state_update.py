"""A task's state update (Flink's ``TaskExecutionState``), built and read in one place.

The task executor describes each transition of an attempt as a :class:`TaskStateUpdate` and
sends it as the protobuf ``TaskExecutionState`` (:meth:`TaskStateUpdate.to_proto`), batched per
job; the JobMaster turns each message back into the same value
(:meth:`TaskStateUpdate.from_proto`) before its scheduler applies it.

Decoding validates: a message no task executor of ours would build (no attempt id, a state
outside the enum, failure details on a state that is not FAILED) is refused with
:class:`MalformedTaskStateUpdate`, before anything of the batch is applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparkmill.common.core.errors import ErrorCode, InvalidArgumentError
from sparkmill.common.core.ids import ExecutionAttemptID
from sparkmill.common.core.io_counters import IOCounters, io_from_proto, io_to_proto
from sparkmill.common.core.partitions import InputPartitionInfo
from sparkmill.common.core.proto_convert import (
    error_code_to_proto,
    execution_state_from_proto,
    execution_state_to_proto,
)
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.v1 import job_master_pb2, task_executor_pb2


class MalformedTaskStateUpdate(InvalidArgumentError):
    """A ``TaskExecutionState`` message that does not describe a valid update."""


Written = tuple[tuple[str, tuple[int, ...]], ...]
"""Per hash or rebalance output of a finished attempt: (data set id, bytes per sub-partition)."""

MAX_WRITTEN_OUTPUTS = 256
MAX_SUBPARTITIONS_REPORTED = 32_768


def written_to_proto(written: Written, add: Any) -> None:
    """Add each entry of ``written`` with ``add`` (a repeated SubpartitionSizes' ``add``)."""
    for dataset_id, sizes in written:
        add(dataset_id=dataset_id, bytes=sizes)


def written_from_proto(
    entries: Sequence[task_executor_pb2.SubpartitionSizes],
    where: str,
    error: type[InvalidArgumentError] = InvalidArgumentError,
) -> Written:
    """The sizes ``entries`` report, checked (raises ``error`` naming ``where``)."""
    if len(entries) > MAX_WRITTEN_OUTPUTS:
        raise error(f"{where}: {len(entries)} outputs reported, at most {MAX_WRITTEN_OUTPUTS}")
    written = []
    for entry in entries:
        if not entry.dataset_id or len(entry.bytes) > MAX_SUBPARTITIONS_REPORTED:
            raise error(f"{where}: a sub-partition report without a data set or too long")
        if any(size < 0 for size in entry.bytes):
            raise error(f"{where}: a negative sub-partition size for {entry.dataset_id[:40]}")
        written.append((entry.dataset_id, tuple(entry.bytes)))
    return tuple(written)


@dataclass(frozen=True, slots=True)
class LostPartition:
    """An input partition a failed task could not read: its producer must run again."""

    dataset_id: str
    partition_number: int
    producer_attempt_id: str

    @classmethod
    def of(cls, partition: InputPartitionInfo) -> LostPartition:
        return cls(partition.dataset_id, partition.partition_number, partition.producer_attempt_id)

    def as_tuple(self) -> tuple[str, int, str]:
        """(data set id, partition number, producer attempt id), as the scheduler takes it."""
        return (self.dataset_id, self.partition_number, self.producer_attempt_id)


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """Why an attempt FAILED."""

    code: ErrorCode
    exception_type: str
    message: str
    details: str  # the traceback, if any
    # Input partitions the task could not read (see PartitionNotFoundError).
    lost_partitions: tuple[LostPartition, ...] = ()
    # The task raised a SuppressRestartsError (subclasses included): restarting cannot help.
    suppress_restarts: bool = False


@dataclass(frozen=True, slots=True)
class TaskStateUpdate:
    """One transition of one attempt, as its task executor reports it to the JobMaster."""

    attempt_id: ExecutionAttemptID
    state: ExecutionState
    failure: TaskFailure | None = None  # only with FAILED
    io: IOCounters | None = None  # records and bytes, when the attempt ended with an outcome
    accumulator: bytes = b""  # the operator's result (e.g. collected rows), on FINISHED
    written: Written = ()  # on FINISHED: bytes per sub-partition of its split outputs

    def __post_init__(self) -> None:
        if self.failure is not None and self.state is not ExecutionState.FAILED:
            raise ValueError(f"a {self.state.name} update cannot carry a failure: {self}")

    def to_proto(self) -> job_master_pb2.TaskExecutionState:
        message = job_master_pb2.TaskExecutionState(
            attempt_id=self.attempt_id,
            state=execution_state_to_proto(self.state),
            accumulator=self.accumulator,
        )
        failure = self.failure
        if failure is not None:
            message.error.code = error_code_to_proto(failure.code)
            message.error.message = failure.message
            message.error.details = failure.details
            message.error.exception_type = failure.exception_type
            message.suppress_restarts = failure.suppress_restarts
            add = message.lost_partitions.add
            for lost in failure.lost_partitions:
                add(
                    dataset_id=lost.dataset_id,
                    partition_number=lost.partition_number,
                    producer_attempt_id=lost.producer_attempt_id,
                )
        if self.io is not None:
            io_to_proto(self.io, message.io_metrics)
        written_to_proto(self.written, message.written.add)
        return message

    @classmethod
    def from_proto(cls, message: job_master_pb2.TaskExecutionState) -> TaskStateUpdate:
        """The update ``message`` describes; :class:`MalformedTaskStateUpdate` if it describes
        none (the error names the attempt and what is wrong)."""
        if not message.attempt_id:
            raise MalformedTaskStateUpdate("task state update: attempt_id is missing")
        where = f"task state update of attempt {message.attempt_id[:8]}"
        state = execution_state_from_proto(
            message.state, field=f"{where}: state", error=MalformedTaskStateUpdate
        )
        failure = None
        if message.HasField("error"):
            if state is not ExecutionState.FAILED:
                raise MalformedTaskStateUpdate(f"{where}: a {state.name} update carries an error")
            error = message.error
            failure = TaskFailure(
                code=_error_code(error.code, where),
                exception_type=error.exception_type,
                message=error.message,
                details=error.details,
                lost_partitions=tuple(
                    LostPartition(p.dataset_id, p.partition_number, p.producer_attempt_id)
                    for p in message.lost_partitions
                ),
                suppress_restarts=message.suppress_restarts,
            )
        elif message.lost_partitions or message.suppress_restarts:
            raise MalformedTaskStateUpdate(
                f"{where}: lost partitions or suppress_restarts without an error"
            )
        return cls(
            attempt_id=ExecutionAttemptID(message.attempt_id),
            state=state,
            failure=failure,
            io=io_from_proto(message.io_metrics) if message.HasField("io_metrics") else None,
            accumulator=message.accumulator,
            written=written_from_proto(message.written, where, MalformedTaskStateUpdate),
        )


def _error_code(number: int, where: str) -> ErrorCode:
    try:
        return ErrorCode(number)
    except ValueError:
        raise MalformedTaskStateUpdate(f"{where}: error code {number} is unknown") from None


__all__ = [
    "MAX_SUBPARTITIONS_REPORTED",
    "LostPartition",
    "MalformedTaskStateUpdate",
    "TaskFailure",
    "TaskStateUpdate",
    "Written",
    "written_from_proto",
    "written_to_proto",
]
