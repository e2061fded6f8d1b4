"""An attempt's context and outcome as the pipeline worker channel's messages.

The task executor sends a :class:`~sparkmill.services.taskexecutor.context.TaskContext` as a
``PipelineAttempt``; the worker answers with a ``PipelineAttemptResult``: the
:class:`~sparkmill.services.taskexecutor.context.TaskOutcome` of a finished attempt, or what it
raised, already classified (the exception's class stays in the worker: only its name, message,
traceback text, kind and lost input partitions cross).
"""

from __future__ import annotations

import traceback

from sparkmill.common.core.errors import (
    PartitionNotFoundError,
    TaskCancelledError,
    ThrowableType,
    classify_task_exception,
)
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.partitions import InputPartitionInfo
from sparkmill.common.deployment.descriptor import input_gate_from_proto, input_gate_to_proto
from sparkmill.common.deployment.state_update import written_from_proto
from sparkmill.common.v1 import pipeline_worker_pb2 as pw
from sparkmill.common.v1 import task_executor_pb2
from sparkmill.services.taskexecutor.context import TaskContext, TaskOutcome

MAX_MESSAGE_CHARS = 64 * 1024
MAX_DETAILS_CHARS = 256 * 1024
MAX_LOST_PARTITIONS = 100_000


class RemoteAttemptError(Exception):
    """An attempt failed in the pipeline worker: what it raised there, as the worker told it.

    The task executor builds the attempt's failure from these fields instead of from this
    exception (whose own class says nothing about the task).
    """

    def __init__(
        self,
        exception_type: str,
        message: str,
        details: str,
        kind: ThrowableType,
        lost_partitions: tuple[InputPartitionInfo, ...] = (),
    ) -> None:
        super().__init__(message)
        self.exception_type = exception_type
        self.message = message
        self.details = details
        self.kind = kind
        self.lost_partitions = lost_partitions


def attempt_to_proto(context: TaskContext) -> pw.PipelineAttempt:
    return pw.PipelineAttempt(
        attempt_id=context.attempt_id,
        job_id=context.job_id,
        job_name=context.job_name,
        vertex_id=context.vertex_id,
        vertex_name=context.vertex_name,
        subtask_index=context.subtask_index,
        parallelism=context.parallelism,
        attempt_number=context.attempt_number,
        job_master_epoch=context.job_master_epoch,
        payload=context.payload,
        job_config=context.job_config,
        inputs=[input_gate_to_proto(gate) for gate in context.inputs],
        produced_dataset_ids=context.produced_dataset_ids,
        consumer_parallelism=context.consumer_parallelism,
        resource_id=context.resource_id,
        allocation_id=context.allocation_id,
        slot_index=-1 if context.slot_index is None else context.slot_index,
        exchange_dir=context.exchange_dir,
        protected_dirs=list(context.protected_dirs),
    )


def attempt_from_proto(attempt: pw.PipelineAttempt) -> TaskContext:
    return TaskContext(
        job_id=attempt.job_id,
        job_name=attempt.job_name,
        vertex_id=attempt.vertex_id,
        vertex_name=attempt.vertex_name,
        subtask_index=attempt.subtask_index,
        parallelism=attempt.parallelism,
        attempt_id=attempt.attempt_id,
        attempt_number=attempt.attempt_number,
        payload=attempt.payload,
        job_master_epoch=attempt.job_master_epoch,
        job_config=dict(attempt.job_config),
        inputs=[input_gate_from_proto(gate) for gate in attempt.inputs],
        produced_dataset_ids=list(attempt.produced_dataset_ids),
        consumer_parallelism=dict(attempt.consumer_parallelism),
        resource_id=attempt.resource_id,
        allocation_id=attempt.allocation_id,
        slot_index=None if attempt.slot_index < 0 else attempt.slot_index,
        exchange_dir=attempt.exchange_dir,
        protected_dirs=tuple(attempt.protected_dirs),
    )


def finished_result(attempt_id: str, outcome: TaskOutcome) -> pw.PipelineAttemptResult:
    return pw.PipelineAttemptResult(
        attempt_id=attempt_id,
        finished=True,
        records_in=outcome.io.records_in,
        records_out=outcome.io.records_out,
        bytes_in=outcome.io.bytes_in,
        bytes_out=outcome.io.bytes_out,
        accumulator=outcome.accumulator,
        written=[
            task_executor_pb2.SubpartitionSizes(dataset_id=d, bytes=sizes)
            for d, sizes in outcome.written
        ],
    )


def cancelled_result(attempt_id: str) -> pw.PipelineAttemptResult:
    return pw.PipelineAttemptResult(attempt_id=attempt_id, cancelled=True)


def failed_result(attempt_id: str, exc: BaseException) -> pw.PipelineAttemptResult:
    """Called in the ``except`` block that caught ``exc`` (the traceback is formatted here)."""
    lost = exc.partitions if isinstance(exc, PartitionNotFoundError) else ()
    return pw.PipelineAttemptResult(
        attempt_id=attempt_id,
        exception_type=type(exc).__name__ or "Exception",
        message=str(exc)[:MAX_MESSAGE_CHARS],
        details=traceback.format_exc()[-MAX_DETAILS_CHARS:],
        throwable=classify_task_exception(exc).name,
        lost_partitions=[
            task_executor_pb2.InputPartition(
                dataset_id=p.dataset_id,
                partition_number=p.partition_number,
                producer_attempt_id=p.producer_attempt_id,
                producer_resource_id=p.producer_resource_id,
            )
            for p in lost[:MAX_LOST_PARTITIONS]
        ],
    )


def outcome_of(result: pw.PipelineAttemptResult) -> TaskOutcome:
    """The outcome of a finished attempt; raises what a failed one raised (as a
    :class:`RemoteAttemptError`) or ``TaskCancelledError`` for a cancelled one."""
    if result.finished:
        return TaskOutcome(
            io=IOCounters(
                max(0, result.records_in),
                max(0, result.records_out),
                max(0, result.bytes_in),
                max(0, result.bytes_out),
            ),
            accumulator=result.accumulator,
            written=written_from_proto(result.written, f"attempt {result.attempt_id[:8]}"),
        )
    if result.cancelled:
        raise TaskCancelledError("cancelled in the pipeline worker")
    # The worker is the less trusted side: an unknown kind is an ordinary, recoverable failure
    # (never one that suppresses restarts of its own accord).
    kind = ThrowableType.__members__.get(result.throwable, ThrowableType.RECOVERABLE)
    raise RemoteAttemptError(
        result.exception_type[:200] or "Exception",
        result.message[:MAX_MESSAGE_CHARS],
        result.details[-MAX_DETAILS_CHARS:],
        kind,
        tuple(
            InputPartitionInfo(
                p.dataset_id, p.partition_number, p.producer_attempt_id, p.producer_resource_id
            )
            for p in result.lost_partitions[:MAX_LOST_PARTITIONS]
        ),
    )
