"""What the :class:`~sparkmill.services.jobmaster.scheduler.default_scheduler.DefaultScheduler`
needs from the outside (its I/O, a listener of progress) and the failure records it keeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from sparkmill.common.core.errors import RpcError
from sparkmill.common.core.ids import JobVertexID, ResourceID
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.states import JobStatus
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    Execution,
    ExecutionVertex,
)
from sparkmill.services.jobmaster.slotpool.slot_pool import PhysicalSlot


class SchedulerActions(Protocol):
    def submit_task(self, execution: Execution, slot: PhysicalSlot) -> asyncio.Future[None]:
        """Deploy the attempt into the slot (TaskExecutor.SubmitTask); the future ends when the
        task executor took it, or with the RpcError that says why not."""
        ...

    def cancel_task(
        self, execution: Execution, slot: PhysicalSlot
    ) -> asyncio.Future[RpcError | None]:
        """Ask the task executor to cancel the attempt; the future's result is None once it
        did, or the RpcError that says why it could not."""
        ...

    def job_status_changed(self, status: JobStatus, cause: str) -> None: ...


class ProgressListener(Protocol):
    """Told about finished attempts, about finished attempts that became void, and about
    parallelisms decided while the job runs (a JobMaster that takes the job over later
    restores what is still valid, with the same decisions)."""

    def attempt_finished(
        self, execution: Execution, accumulator: bytes, io: IOCounters | None
    ) -> None: ...

    def attempts_invalidated(self, vertices: list[ExecutionVertex]) -> None: ...

    def vertex_decided(
        self, vertex_id: JobVertexID, parallelism: int, reason: str, ranges: tuple[int, ...] = ()
    ) -> None: ...

    def blocklist_changed(self, until: Mapping[ResourceID, float]) -> None: ...


class NoProgressListener:
    def attempt_finished(
        self, execution: Execution, accumulator: bytes, io: IOCounters | None
    ) -> None:
        pass

    def attempts_invalidated(self, vertices: list[ExecutionVertex]) -> None:
        pass

    def vertex_decided(
        self, vertex_id: JobVertexID, parallelism: int, reason: str, ranges: tuple[int, ...] = ()
    ) -> None:
        pass

    def blocklist_changed(self, until: Mapping[ResourceID, float]) -> None:
        pass


@dataclass(frozen=True, slots=True)
class FailureRecord:
    timestamp: float
    vertex_name: str
    subtask_index: int
    attempt_number: int
    task_executor: str
    message: str
    details: str
    exception_type: str


MAX_EXCEPTIONS_KEPT = 100


class ExceptionHistory(list[FailureRecord]):
    """The job's failures, oldest first; the last ``MAX_EXCEPTIONS_KEPT`` are kept."""

    def add(
        self,
        vertex: ExecutionVertex,
        attempt_number: int,
        task_executor: str,
        message: str,
        details: str,
        exception_type: str,
    ) -> None:
        self.append(
            FailureRecord(
                time.time(),
                vertex.job_vertex.name,
                vertex.subtask_index,
                attempt_number,
                task_executor,
                message,
                details,
                exception_type,
            )
        )
        del self[:-MAX_EXCEPTIONS_KEPT]


__all__ = [
    "ExceptionHistory",
    "FailureRecord",
    "NoProgressListener",
    "ProgressListener",
    "SchedulerActions",
]
