"""Task state reports from a task executor, decoded and handed to the scheduler.

A batch is decoded whole before any of it applies: a malformed message refuses the batch (the
RPC fails with a clear error) instead of leaving it half applied.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparkmill.common.core.errors import ErrorCode
from sparkmill.common.deployment.state_update import TaskStateUpdate
from sparkmill.common.v1 import job_master_pb2
from sparkmill.services.jobmaster.scheduler.default_scheduler import DefaultScheduler


def apply_task_state_updates(
    scheduler: DefaultScheduler, updates: Sequence[job_master_pb2.TaskExecutionState]
) -> None:
    decoded = [TaskStateUpdate.from_proto(update) for update in updates]
    for update in decoded:
        failure = update.failure
        scheduler.update_task_execution_state(
            update.attempt_id,
            update.state,
            message=failure.message if failure else "",
            details=failure.details if failure else "",
            exception_type=failure.exception_type if failure else "",
            suppress_restarts=failure.suppress_restarts if failure else False,
            # INTERNAL: the task's own code raised it (not its executor's environment).
            raised_by_task=failure is not None and failure.code is ErrorCode.INTERNAL,
            io=update.io,
            accumulator=update.accumulator,
            written=update.written,
            lost_partitions=[p.as_tuple() for p in failure.lost_partitions] if failure else (),
        )


__all__ = ["apply_task_state_updates"]
