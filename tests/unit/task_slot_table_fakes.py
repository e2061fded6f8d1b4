"""Hand-written fakes of the TaskSlotTable tests: fake tasks, recording slot actions, and helpers
that allocate slots (with fake time)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkmill.common.core.ids import (
    AllocationID,
    ExecutionAttemptID,
    JobID,
    new_allocation_id,
    new_attempt_id,
    new_job_id,
)
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.services.taskexecutor.slot_table import (
    TaskSlotTable,
    TaskSlotTableState,
)

N_SLOTS = 3


DEFAULT = ResourceProfile(cpu_cores=1, memory_mb=1024)


# Room for the three static slots plus one more default-sized slot.
TOTAL = ResourceProfile(cpu_cores=4, memory_mb=4096)


SMALL = ResourceProfile(cpu_cores=0.5, memory_mb=512)


TIMEOUT = 10.0


@dataclass
class FakeTask:
    attempt_id: ExecutionAttemptID
    job_id: JobID
    allocation_id: AllocationID
    failures: list[BaseException] = field(default_factory=list)

    def fail_externally(self, cause: BaseException) -> None:
        self.failures.append(cause)


@dataclass
class RecordingActions:
    freed: list[AllocationID] = field(default_factory=list)
    timeouts: list[tuple[AllocationID, object]] = field(default_factory=list)

    def free_slot(self, allocation_id: AllocationID) -> None:
        self.freed.append(allocation_id)

    def timeout_slot(self, allocation_id: AllocationID, ticket: object) -> None:
        self.timeouts.append((allocation_id, ticket))


def allocate(
    table: TaskSlotTable[FakeTask],
    index: int | None = 0,
    job: JobID | None = None,
    profile: ResourceProfile = UNKNOWN_PROFILE,
) -> tuple[JobID, AllocationID]:
    job = job or new_job_id()
    aid = new_allocation_id()
    assert table.allocate_slot(index, job, aid, profile, TIMEOUT)
    return job, aid


def active_slot_with_tasks(
    table: TaskSlotTable[FakeTask], n_tasks: int, index: int = 0
) -> tuple[JobID, AllocationID, list[FakeTask]]:
    job, aid = allocate(table, index)
    assert table.mark_slot_active(aid)
    tasks = [FakeTask(new_attempt_id(), job, aid) for _ in range(n_tasks)]
    for task in tasks:
        assert table.add_task(task)
    return job, aid, tasks


def state_of(table: TaskSlotTable[FakeTask]) -> TaskSlotTableState:
    """The state, read through a call (mypy would narrow a property across assertions)."""
    return table.state
