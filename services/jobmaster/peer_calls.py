"""Best-effort calls of a JobMaster to its peers: the ones whose failure is only logged.

Freeing a slot it no longer needs, cancelling an attempt (whose failure the scheduler is
told as a value, not raised), cancelling an attempt a task executor runs but the JobMaster
does not know (heartbeat reconciliation), telling a task executor to let go of the job, and
telling the resource manager the JobMaster is gone. A peer that cannot be reached is gone or
finds out by itself (the heartbeats between them stop).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sparkmill.common.core.errors import RpcError, UnavailableError
from sparkmill.common.core.ids import AllocationID, ExecutionAttemptID, JobID, ResourceID, short
from sparkmill.common.v1 import resource_manager_pb2, task_executor_pb2
from sparkmill.common.v1.gateways import ResourceManagerClient, TaskExecutorClient

log = logging.getLogger(__name__)

FREE_SLOT_TIMEOUT_S = 5.0
RM_DISCONNECT_TIMEOUT_S = 2.0


@dataclass
class TaskExecutorConnection:
    """A task executor that offered the JobMaster slots: where it is and the client to call it."""

    resource_id: ResourceID
    address: str
    client: TaskExecutorClient


async def free_slot(
    client: TaskExecutorClient, job_id: JobID, allocation_id: AllocationID, cause: str
) -> None:
    try:
        await client.free_slot(
            task_executor_pb2.FreeSlotRequest(
                job_id=job_id, allocation_id=allocation_id, cause=cause
            ),
            timeout=FREE_SLOT_TIMEOUT_S,
        )
    except RpcError as exc:
        log.debug("freeing slot %s failed: %s", short(allocation_id), exc)


async def cancel_attempt(
    client: TaskExecutorClient | None, job_id: JobID, attempt_id: str, timeout_s: float
) -> RpcError | None:
    """Cancel an attempt the scheduler cancels; None once the task executor did, else why not
    (the scheduler then counts the attempt as cancelled: it does not run for the job)."""
    if client is None:
        return UnavailableError("task executor gone")
    try:
        await client.cancel_task(
            task_executor_pb2.CancelTaskRequest(job_id=job_id, attempt_id=attempt_id),
            timeout=timeout_s,
        )
    except RpcError as exc:
        return exc
    return None


async def cancel_unknown_attempt(
    client: TaskExecutorClient, job_id: JobID, attempt_id: ExecutionAttemptID, timeout_s: float
) -> None:
    try:
        await client.cancel_task(
            task_executor_pb2.CancelTaskRequest(job_id=job_id, attempt_id=attempt_id),
            timeout=timeout_s,
        )
    except RpcError as exc:
        log.debug("cancelling unknown attempt %s: %s", short(attempt_id), exc)


async def disconnect_task_executor(
    client: TaskExecutorClient, resource_id: str, job_id: JobID, cause: str, timeout_s: float
) -> None:
    try:
        await client.disconnect_job_master(
            task_executor_pb2.DisconnectJobMasterFromTaskExecutorRequest(
                job_id=job_id, cause=cause
            ),
            timeout=timeout_s,
        )
    except RpcError as exc:
        log.debug("task executor %s not told to disconnect: %s", short(resource_id), exc)


async def disconnect_from_resource_manager(
    client: ResourceManagerClient, job_id: JobID, session_id: str, cause: str
) -> None:
    try:
        await client.disconnect_job_master(
            resource_manager_pb2.DisconnectJobMasterRequest(
                job_id=job_id, job_master_session_id=session_id, cause=cause
            ),
            timeout=RM_DISCONNECT_TIMEOUT_S,
        )
    except RpcError as exc:
        log.info("could not disconnect from the resource manager: %s", exc)


__all__ = [
    "cancel_unknown_attempt",
    "disconnect_from_resource_manager",
    "disconnect_task_executor",
    "free_slot",
]
