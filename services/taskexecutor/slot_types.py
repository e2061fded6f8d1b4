"""The states, transition tables and protocols of the TaskSlotTable (Flink's ``TaskSlotState``,
``TaskSlotPayload`` and ``SlotActions``), and the errors a slot operation answers with.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from sparkmill.common.core.errors import FailedPreconditionError, NotFoundError, RpcError
from sparkmill.common.core.ids import AllocationID, ExecutionAttemptID, JobID
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.state_machine import TransitionTable


class _SlotError(RpcError):
    """Keeps ``RpcError``'s constructor (the wire layer rebuilds errors from message and details)
    and adds the allocation id for local callers."""

    def __init__(
        self, message: str, *, details: str = "", allocation_id: AllocationID | None = None
    ) -> None:
        super().__init__(message, details=details)
        self.allocation_id = allocation_id


class SlotNotFoundError(_SlotError, NotFoundError):
    """No slot is allocated for an allocation id (wire code NOT_FOUND)."""

    @classmethod
    def for_allocation(cls, allocation_id: AllocationID, expected: str) -> SlotNotFoundError:
        return cls(
            f"no task slot is allocated for allocation id {allocation_id}; expected {expected}",
            allocation_id=allocation_id,
        )


class SlotNotActiveError(_SlotError, FailedPreconditionError):
    """The slot exists but is not ACTIVE for the asking job (wire code FAILED_PRECONDITION)."""


class TaskSlotTableState(enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"


TABLE_TRANSITIONS: TransitionTable[TaskSlotTableState] = TransitionTable(
    "task slot table",
    {
        # A table that never started can be closed directly: it owns nothing to release.
        TaskSlotTableState.CREATED: {TaskSlotTableState.RUNNING, TaskSlotTableState.CLOSED},
        TaskSlotTableState.RUNNING: {TaskSlotTableState.CLOSING},
        TaskSlotTableState.CLOSING: {TaskSlotTableState.CLOSED},
        TaskSlotTableState.CLOSED: set(),
    },
)


class TaskSlotState(enum.Enum):
    ALLOCATED = "ALLOCATED"  # reserved for a job, but its job master has not claimed it yet
    ACTIVE = "ACTIVE"  # claimed by the job master: tasks may be deployed into it
    RELEASING = "RELEASING"  # freed while tasks were still in it; waits for them to go


SLOT_TRANSITIONS: TransitionTable[TaskSlotState] = TransitionTable(
    "task slot",
    {
        TaskSlotState.ALLOCATED: {TaskSlotState.ACTIVE, TaskSlotState.RELEASING},
        # ACTIVE -> ALLOCATED happens when the job master connection is lost: the slot stays
        # reserved but starts its timeout again, so a vanished job cannot pin it forever.
        TaskSlotState.ACTIVE: {TaskSlotState.ALLOCATED, TaskSlotState.RELEASING},
        TaskSlotState.RELEASING: set(),
    },
)


class SlotTask(Protocol):
    """What the table needs from a task it hosts (Flink's ``TaskSlotPayload``)."""

    @property
    def attempt_id(self) -> ExecutionAttemptID: ...

    @property
    def job_id(self) -> JobID: ...

    @property
    def allocation_id(self) -> AllocationID: ...

    def fail_externally(self, cause: BaseException) -> None:
        """Start failing the task; it is removed from the table later, once it has stopped."""
        ...


class SlotActions(Protocol):
    """Requests from the table to its owner. Called synchronously on the owner's loop."""

    def free_slot(self, allocation_id: AllocationID) -> None:
        """A RELEASING slot just became empty: the owner should free it (and tell the RM)."""
        ...

    def timeout_slot(self, allocation_id: AllocationID, ticket: object) -> None:
        """An allocated slot was not activated in time; check ``is_valid_timeout`` first."""
        ...


@dataclass(frozen=True, slots=True)
class TaskSlotInfo:
    """A read-only snapshot of one allocated slot, so callers cannot corrupt the indexes."""

    index: int
    allocation_id: AllocationID
    job_id: JobID
    resource_profile: ResourceProfile
    state: TaskSlotState
    is_dynamic: bool
    number_of_tasks: int
