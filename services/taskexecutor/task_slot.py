"""One slot of the task executor's slot table and the budget its resources come from: the
counterparts of Flink's ``TaskSlot`` and ``ResourceBudgetManager``.

Both are plain records owned by :class:`~sparkmill.services.taskexecutor.slot_table.TaskSlotTable`,
which alone changes them, on the task executor's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sparkmill.common.core.ids import AllocationID, ExecutionAttemptID, JobID
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.services.taskexecutor.slot_types import SlotTask, TaskSlotInfo, TaskSlotState

# The kind of task a slot holds (the task executor's Task; the tests use a fake).
T = TypeVar("T", bound=SlotTask)


@dataclass(eq=False, slots=True)
class TaskSlot(Generic[T]):
    """One allocated slot: its job, allocation, profile, state and the tasks running in it."""

    index: int
    is_dynamic: bool
    resource_profile: ResourceProfile
    job_id: JobID
    allocation_id: AllocationID
    state: TaskSlotState = TaskSlotState.ALLOCATED
    tasks: dict[ExecutionAttemptID, T] = field(default_factory=dict)
    # The ticket of the armed timeout; it stays set after the timer fired, because the owner
    # validates the ticket only later, when it handles ``timeout_slot``.
    timeout_ticket: object | None = None

    def info(self) -> TaskSlotInfo:
        return TaskSlotInfo(
            self.index,
            self.allocation_id,
            self.job_id,
            self.resource_profile,
            self.state,
            self.is_dynamic,
            len(self.tasks),
        )

    def __repr__(self) -> str:
        return (
            f"TaskSlot(index={self.index}, state={self.state.name}, "
            f"allocation={self.allocation_id}, job={self.job_id}, {self.resource_profile})"
        )


class ResourceBudget:
    """Reserved-vs-total bookkeeping. Sums are kept (not a shrinking remainder) and compared
    with a tolerance, so that fractional CPU reservations do not drift into false refusals."""

    _EPSILON = 1e-9

    def __init__(self, total: ResourceProfile) -> None:
        self.total = total
        self._cpu = 0.0
        self._memory = 0

    def reserve(self, profile: ResourceProfile) -> bool:
        if self._cpu + profile.cpu_cores > self.total.cpu_cores + self._EPSILON:
            return False
        if self._memory + profile.memory_mb > self.total.memory_mb:
            return False
        self._cpu += profile.cpu_cores
        self._memory += profile.memory_mb
        return True

    def release(self, profile: ResourceProfile) -> None:
        self._cpu = max(0.0, self._cpu - profile.cpu_cores)
        self._memory = max(0, self._memory - profile.memory_mb)

    @property
    def available(self) -> ResourceProfile:
        return ResourceProfile(
            max(0.0, self.total.cpu_cores - self._cpu), max(0, self.total.memory_mb - self._memory)
        )


__all__ = ["ResourceBudget", "TaskSlot"]
