"""The task executor's book of slots: which slot belongs to which job, which tasks run where.

This is the Python counterpart of Flink's ``TaskSlotTable``. It is a pure, single-threaded data
structure owned by the task executor's event loop: no locks, no awaits. Everything that needs the
outside world (telling the resource manager a slot is free, timing out a slot) is delegated to
the owner through :class:`SlotActions`, so the table stays testable with fake time and fakes.

Slot life cycle (a free slot simply has no entry)::

    free --allocate_slot--> ALLOCATED <--mark_slot_active / mark_slot_inactive--> ACTIVE
                                |                                                   |
                                +------------------ free_slot ----------------------+
                                |  (no tasks: entry removed, index is free again)
                                +--> RELEASING (tasks are failed; when the last one is removed
                                     the owner is asked to free the slot for good)

Decisions taken where Flink leaves room (the tests pin each of them):

* A non-negative index at or beyond ``number_slots`` is a caller bug and raises
  :class:`~sparkmill.common.core.errors.InvalidArgumentError`, unless it is exactly the index of an
  existing dynamic slot being re-requested with the same allocation id and job (idempotent,
  ``True``).
* Re-allocating an allocation id whose slot is RELEASING returns ``False``: the slot is already
  on its way out and must not be handed out again.
* ``free_slot`` and ``mark_slot_active``/``mark_slot_inactive`` of an unknown allocation raise
  :class:`SlotNotFoundError`; ``try_mark_slot_active`` returns ``False`` instead (it is a guard).
* ``add_task`` with an attempt id that is already in the table returns ``False`` (an expected
  refusal is a return value in sparkmill, see :mod:`sparkmill.common.core.errors`).
* Mutations need a RUNNING table (else :class:`~sparkmill.common.core.errors.IllegalStateBug`);
  queries,
  ``create_slot_report`` and ``remove_task`` work in every state, because tasks keep finishing
  (and being removed by the owner) after the table was closed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from sparkmill.common.core.errors import (
    FailedPreconditionError,
    IllegalStateBug,
    InvalidArgumentError,
)
from sparkmill.common.core.ids import AllocationID, ExecutionAttemptID, JobID, ResourceID
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.slots import SlotReport, SlotStatus
from sparkmill.common.runtime.timers import TimerService
from sparkmill.services.taskexecutor.slot_types import (
    SLOT_TRANSITIONS,
    TABLE_TRANSITIONS,
    SlotActions,
    SlotNotActiveError,
    SlotNotFoundError,
    SlotTask,
    TaskSlotInfo,
    TaskSlotState,
    TaskSlotTableState,
)
from sparkmill.services.taskexecutor.task_slot import ResourceBudget, TaskSlot

_log = logging.getLogger(__name__)

__all__ = [
    "SLOT_TRANSITIONS",
    "TABLE_TRANSITIONS",
    "SlotActions",
    "SlotNotActiveError",
    "SlotNotFoundError",
    "SlotTask",
    "TaskSlotInfo",
    "TaskSlotState",
    "TaskSlotTable",
    "TaskSlotTableState",
]


T = TypeVar("T", bound=SlotTask)


class TaskSlotTable(Generic[T]):
    """All slots of one task executor plus indexes by index, allocation, job and attempt.

    Static slots have indices ``[0, number_slots)`` and the default profile. Dynamic slots
    (requested with a negative or ``None`` index and an explicit profile) get fresh indices from
    ``number_slots`` upwards that are never reused, so a stale report can never be mistaken for
    a newer slot. Every slot reserves its profile from ``total_resources`` while it exists.
    """

    def __init__(
        self,
        number_slots: int,
        total_resources: ResourceProfile,
        default_slot_profile: ResourceProfile,
        timer_service: TimerService,
    ) -> None:
        if number_slots <= 0:
            raise ValueError(f"the number of task slots must be positive, got {number_slots}")
        static_need = default_slot_profile.multiply(number_slots)
        if not ResourceBudget(total_resources).reserve(static_need):
            # Reports advertise every static slot as free capacity: refuse a config that lies.
            raise ValueError(
                f"{number_slots} static slots of {default_slot_profile} need {static_need}, "
                f"more than the total {total_resources}"
            )
        self._number_slots = number_slots
        self._default_profile = default_slot_profile
        self._budget = ResourceBudget(total_resources)
        self._timers = timer_service
        self._state = TaskSlotTableState.CREATED
        self._slot_actions: SlotActions | None = None
        self._next_dynamic_index = number_slots

        self._by_index: dict[int, TaskSlot[T]] = {}
        self._by_allocation: dict[AllocationID, TaskSlot[T]] = {}
        # Dicts (not sets) so that per-job listings come out in allocation order.
        self._by_job: dict[JobID, dict[AllocationID, TaskSlot[T]]] = {}
        self._by_attempt: dict[ExecutionAttemptID, TaskSlot[T]] = {}
        self._closed_callbacks: list[Callable[[], None]] = []

    @property
    def state(self) -> TaskSlotTableState:
        return self._state

    @property
    def is_running(self) -> bool:
        return self._state is TaskSlotTableState.RUNNING

    @property
    def number_slots(self) -> int:
        return self._number_slots

    @property
    def total_resources(self) -> ResourceProfile:
        return self._budget.total

    @property
    def available_resources(self) -> ResourceProfile:
        return self._budget.available

    def start(self, slot_actions: SlotActions) -> None:
        """Attach the owner; only a started table may allocate (the owner must be reachable)."""
        self._set_table_state(TaskSlotTableState.RUNNING)
        self._slot_actions = slot_actions

    def close(self, cause: BaseException | None = None) -> None:
        """Fail every hosted task and release every slot; CLOSED once all tasks have ended.

        As Flink's ``TaskSlotTableImpl#closeAsync``: a slot with no task is dropped at once; a
        slot with tasks stays (RELEASING) until its last task is removed with
        :meth:`remove_task`, so the table never claims to be closed while task threads still
        run. :meth:`when_closed` tells when that happens; an owner that cannot wait any longer
        calls :meth:`force_close`. The table never calls back into the owner while closing (the
        owner is the one closing it). Idempotent.
        """
        if self._state is TaskSlotTableState.CREATED:
            self._finish_closing()
            return
        if self._state is not TaskSlotTableState.RUNNING:
            return  # already CLOSING (re-entered from a task's fail_externally) or CLOSED
        self._set_table_state(TaskSlotTableState.CLOSING)
        cause = cause or FailedPreconditionError("the task slot table is closing")
        for slot in list(self._by_allocation.values()):
            self._release(slot, cause)
            if not slot.tasks and slot.allocation_id in self._by_allocation:
                self._remove(slot)
        self._maybe_finish_closing()

    def when_closed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the table is CLOSED (at once if it already is)."""
        if self._state is TaskSlotTableState.CLOSED:
            callback()
        else:
            self._closed_callbacks.append(callback)

    def running_tasks(self) -> list[T]:
        """The tasks that have not been removed yet (while closing: those still running)."""
        return [task for slot in self._by_allocation.values() for task in slot.tasks.values()]

    def force_close(self) -> list[T]:
        """Stop waiting for the tasks of a closing table: drop every slot and end CLOSED.

        Returns the tasks that had not ended, for the owner to report. Only for an owner whose
        wait for its tasks timed out.
        """
        if self._state is TaskSlotTableState.CLOSED:
            return []
        if self._state is not TaskSlotTableState.CLOSING:
            self.close()
        lingering = self.running_tasks()
        for slot in list(self._by_allocation.values()):
            for attempt_id in list(slot.tasks):
                self._by_attempt.pop(attempt_id, None)
            slot.tasks.clear()
            self._remove(slot)
        self._maybe_finish_closing()
        return lingering

    def _maybe_finish_closing(self) -> None:
        if self._state is TaskSlotTableState.CLOSING and not self._by_allocation:
            self._finish_closing()

    def _finish_closing(self) -> None:
        self._set_table_state(TaskSlotTableState.CLOSED)
        callbacks, self._closed_callbacks = self._closed_callbacks, []
        for callback in callbacks:
            callback()

    def allocate_slot(
        self,
        index: int | None,
        job_id: JobID,
        allocation_id: AllocationID,
        resource_profile: ResourceProfile,
        timeout_s: float,
    ) -> bool:
        """Allocate a slot for ``job_id`` under ``allocation_id``; ``False`` if refused.

        The resource manager may resend a slot request (e.g. after a lost reply), so asking again
        for the same allocation, job and index is a success that re-arms the timeout. Any other
        overlap (the index is taken, or the allocation id is used for another job or index) is
        refused, since honouring it would hand one slot to two owners. A static slot always
        gets the default profile (the requested one is ignored, as Flink does), so that the
        capacity advertised in slot reports stays true.
        """
        self._check_running("allocate a slot")
        dynamic = index is None or index < 0
        existing = self._by_allocation.get(allocation_id)
        if (
            index is not None
            and index >= self._number_slots
            and (existing is None or existing.index != index)
        ):
            raise InvalidArgumentError(
                f"cannot allocate slot index {index} for allocation id {allocation_id}: expected "
                f"a static index in [0, {self._number_slots}) or a negative index for a "
                "dynamic slot"
            )
        # Unknown ("any") profiles for a dynamic slot mean "a default-sized one".
        if dynamic and not resource_profile.is_unknown:
            profile = resource_profile
        else:
            profile = self._default_profile

        if existing is not None:
            return self._reallocate(existing, index, dynamic, job_id, profile, timeout_s)

        if not dynamic:
            assert index is not None
            occupant = self._by_index.get(index)
            if occupant is not None:
                _log.info("slot %d is already taken by %r", index, occupant)
                return False
        if not self._budget.reserve(profile):
            left = self._budget.available
            _log.info("cannot reserve %s for %s: only %s left", profile, allocation_id, left)
            return False
        if dynamic:
            index = self._next_dynamic_index
            self._next_dynamic_index += 1
        assert index is not None
        slot: TaskSlot[T] = TaskSlot(index, dynamic, profile, job_id, allocation_id)
        self._by_index[index] = slot
        self._by_allocation[allocation_id] = slot
        self._by_job.setdefault(job_id, {})[allocation_id] = slot
        self._arm_timeout(slot, timeout_s)
        return True

    def _reallocate(
        self,
        slot: TaskSlot[T],
        index: int | None,
        dynamic: bool,
        job_id: JobID,
        profile: ResourceProfile,
        timeout_s: float,
    ) -> bool:
        if slot.job_id != job_id:
            same = False
        elif dynamic:
            same = slot.is_dynamic and slot.resource_profile == profile
        else:
            same = slot.index == index
        if not same or slot.state is TaskSlotState.RELEASING:
            _log.info("allocation %s is already used by %r", slot.allocation_id, slot)
            return False
        if slot.state is TaskSlotState.ALLOCATED:
            self._arm_timeout(slot, timeout_s)
        return True

    def free_slot(self, allocation_id: AllocationID, cause: BaseException | None = None) -> int:
        """Free the slot: its index if it was empty (and is gone now), else ``-1``.

        A slot with tasks cannot vanish under them: it becomes RELEASING, its tasks are failed,
        and the owner is asked (``SlotActions.free_slot``) to free it again once the last task
        has been removed. Freeing a RELEASING slot again does not fail its tasks twice.
        """
        self._check_running("free a slot")
        slot = self._require(allocation_id, "an allocated slot to free")
        if not slot.tasks:
            self._remove(slot)
            return slot.index
        if slot.state is not TaskSlotState.RELEASING:
            self._release(slot, cause or FailedPreconditionError(f"slot {allocation_id} freed"))
        return -1

    def mark_slot_active(self, allocation_id: AllocationID) -> bool:
        """The job master claimed the slot: stop its timeout. ``False`` if RELEASING."""
        self._check_running("mark a slot active")
        slot = self._require(allocation_id, "an allocated slot to mark active")
        return self._activate(slot)

    def try_mark_slot_active(self, job_id: JobID, allocation_id: AllocationID) -> bool:
        """Like :meth:`mark_slot_active`, but a guard: ``False`` for unknown or foreign slots."""
        self._check_running("mark a slot active")
        slot = self._by_allocation.get(allocation_id)
        if slot is None or slot.job_id != job_id:
            return False
        return self._activate(slot)

    def mark_slot_inactive(self, allocation_id: AllocationID, timeout_s: float) -> bool:
        """Back to ALLOCATED with a fresh timeout (the job master went away). ``False`` if
        RELEASING. Tasks already in the slot stay there."""
        self._check_running("mark a slot inactive")
        slot = self._require(allocation_id, "an allocated slot to mark inactive")
        if slot.state is TaskSlotState.RELEASING:
            return False
        if slot.state is TaskSlotState.ACTIVE:
            self._set_slot_state(slot, TaskSlotState.ALLOCATED)
        self._arm_timeout(slot, timeout_s)
        return True

    def is_valid_timeout(self, allocation_id: AllocationID, ticket: object) -> bool:
        """Is ``ticket`` still the slot's current timeout? A timeout that raced with an
        activation, a re-allocation or a free is stale and must be ignored by the owner."""
        slot = self._by_allocation.get(allocation_id)
        return slot is not None and ticket is not None and slot.timeout_ticket is ticket

    def _activate(self, slot: TaskSlot[T]) -> bool:
        if slot.state is TaskSlotState.RELEASING:
            return False
        if slot.state is TaskSlotState.ALLOCATED:
            self._set_slot_state(slot, TaskSlotState.ACTIVE)
        self._disarm_timeout(slot)
        return True

    def _arm_timeout(self, slot: TaskSlot[T], timeout_s: float) -> None:
        # A fresh ticket per arming lets the owner tell the latest timeout from stale ones.
        ticket = object()
        slot.timeout_ticket = ticket
        allocation_id = slot.allocation_id

        def fire() -> None:
            if self.is_running and self.is_valid_timeout(allocation_id, ticket):
                assert self._slot_actions is not None
                self._slot_actions.timeout_slot(allocation_id, ticket)

        self._timers.schedule(allocation_id, timeout_s, fire)

    def _disarm_timeout(self, slot: TaskSlot[T]) -> None:
        if slot.timeout_ticket is not None:
            slot.timeout_ticket = None
            self._timers.cancel(slot.allocation_id)

    def add_task(self, task: T) -> bool:
        """Host ``task`` in the slot of its allocation; ``False`` if its attempt id is known.

        Only an ACTIVE slot of the task's own job accepts tasks: an ALLOCATED slot has not been
        claimed by the job master that deploys, and a RELEASING one is being torn down.
        """
        self._check_running("add a task")
        allocation_id = task.allocation_id
        slot = self._require(allocation_id, f"an active slot for task {task.attempt_id}")
        if slot.state is not TaskSlotState.ACTIVE or slot.job_id != task.job_id:
            raise SlotNotActiveError(
                f"task slot for allocation id {allocation_id} cannot take task "
                f"{task.attempt_id}: expected an ACTIVE slot of job {task.job_id}, found a "
                f"{slot.state.name} slot of job {slot.job_id}",
                allocation_id=allocation_id,
            )
        if task.attempt_id in self._by_attempt:
            _log.info("task %s is already in a slot, refusing it again", task.attempt_id)
            return False
        slot.tasks[task.attempt_id] = task
        self._by_attempt[task.attempt_id] = slot
        return True

    def remove_task(self, attempt_id: ExecutionAttemptID) -> T | None:
        """Forget a task that has stopped; if it was the last one of a RELEASING slot, ask the
        owner to free the slot (the owner also notifies the resource manager, which the table
        cannot do)."""
        slot = self._by_attempt.pop(attempt_id, None)
        if slot is None:
            return None
        task = slot.tasks.pop(attempt_id)
        if slot.state is TaskSlotState.RELEASING and not slot.tasks:
            if self.is_running:
                assert self._slot_actions is not None
                self._slot_actions.free_slot(slot.allocation_id)
            elif self._state is TaskSlotTableState.CLOSING:
                self._remove(slot)
                self._maybe_finish_closing()
        return task

    def get_task(self, attempt_id: ExecutionAttemptID) -> T | None:
        slot = self._by_attempt.get(attempt_id)
        return None if slot is None else slot.tasks[attempt_id]

    def tasks_of_job(self, job_id: JobID) -> list[T]:
        """Every task of the job, in any slot state (Flink lists only ACTIVE slots' tasks, but
        a job's tasks can also sit in ALLOCATED or RELEASING slots and callers need them)."""
        return [t for slot in self._by_job.get(job_id, {}).values() for t in slot.tasks.values()]

    def tasks_of_slot(self, allocation_id: AllocationID) -> list[T]:
        slot = self._by_allocation.get(allocation_id)
        return [] if slot is None else list(slot.tasks.values())

    def allocation_ids_of_job(self, job_id: JobID) -> list[AllocationID]:
        return list(self._by_job.get(job_id, {}))

    def job_ids(self) -> list[JobID]:
        return list(self._by_job)

    def active_allocation_ids(self, job_id: JobID | None = None) -> list[AllocationID]:
        slots = self._by_allocation if job_id is None else self._by_job.get(job_id, {})
        return [a for a, s in slots.items() if s.state is TaskSlotState.ACTIVE]

    def slots_of_job(self, job_id: JobID, state: TaskSlotState | None = None) -> list[TaskSlotInfo]:
        slots = self._by_job.get(job_id, {}).values()
        return [s.info() for s in slots if state is None or s.state is state]

    def slot_info(self, allocation_id: AllocationID) -> TaskSlotInfo | None:
        slot = self._by_allocation.get(allocation_id)
        return None if slot is None else slot.info()

    def has_allocated_slots(self, job_id: JobID) -> bool:
        """Does the job hold slots that are ALLOCATED but not yet ACTIVE?"""
        slots = self._by_job.get(job_id, {}).values()
        return any(s.state is TaskSlotState.ALLOCATED for s in slots)

    def is_allocated(self, index: int | None, job_id: JobID, allocation_id: AllocationID) -> bool:
        """Is the slot reserved (ALLOCATED or ACTIVE) for exactly this job and allocation? A
        negative/None index asks about a dynamic slot, whose index the caller does not know."""
        if index is None or index < 0:
            slot = self._by_allocation.get(allocation_id)
            if slot is None or not slot.is_dynamic:
                return False
        else:
            found = self._by_index.get(index)
            if found is None:
                return False
            slot = found
        return (
            slot.job_id == job_id
            and slot.allocation_id == allocation_id
            and slot.state is not TaskSlotState.RELEASING
        )

    def is_active(self, job_id: JobID, allocation_id: AllocationID) -> bool:
        slot = self._by_allocation.get(allocation_id)
        return slot is not None and slot.job_id == job_id and slot.state is TaskSlotState.ACTIVE

    def is_slot_free(self, index: int) -> bool:
        return index not in self._by_index

    def owning_job(self, allocation_id: AllocationID) -> JobID | None:
        slot = self._by_allocation.get(allocation_id)
        return None if slot is None else slot.job_id

    def current_allocation(self, index: int) -> AllocationID | None:
        slot = self._by_index.get(index)
        return None if slot is None else slot.allocation_id

    def __len__(self) -> int:
        """The number of allocated slots (in any state)."""
        return len(self._by_allocation)

    def create_slot_report(self, resource_id: ResourceID) -> SlotReport:
        """Every static index (free ones too, so the resource manager learns the full capacity
        even before anything is allocated), then every dynamic slot, in index order.

        ``resource_id`` is only logged: :class:`~sparkmill.common.core.slots.SlotReport` does not
        carry it.
        """
        dynamic = sorted(i for i in self._by_index if i >= self._number_slots)
        statuses: list[SlotStatus] = []
        for index in [*range(self._number_slots), *dynamic]:
            slot = self._by_index.get(index)
            if slot is None:
                statuses.append(SlotStatus(index, self._default_profile))
            else:
                statuses.append(
                    SlotStatus(index, slot.resource_profile, slot.allocation_id, slot.job_id)
                )
        _log.debug("slot report of %s: %d slots", resource_id, len(statuses))
        return SlotReport(tuple(statuses))

    def _check_running(self, action: str) -> None:
        if self._state is not TaskSlotTableState.RUNNING:
            raise IllegalStateBug(
                f"cannot {action}: the task slot table is {self._state.name}, expected RUNNING"
            )

    def _set_table_state(self, target: TaskSlotTableState) -> None:
        TABLE_TRANSITIONS.check(self._state, target, "the task slot table")
        self._state = target

    def _set_slot_state(self, slot: TaskSlot[T], target: TaskSlotState) -> None:
        SLOT_TRANSITIONS.check(slot.state, target, f"the slot of allocation {slot.allocation_id}")
        slot.state = target

    def _require(self, allocation_id: AllocationID, expected: str) -> TaskSlot[T]:
        slot = self._by_allocation.get(allocation_id)
        if slot is None:
            raise SlotNotFoundError.for_allocation(allocation_id, expected)
        return slot

    def _release(self, slot: TaskSlot[T], cause: BaseException) -> None:
        """Mark RELEASING and fail the tasks. A releasing slot needs no timeout: it is already
        leaving, and a timeout would only make the owner free it a second time."""
        if slot.state is not TaskSlotState.RELEASING:
            self._set_slot_state(slot, TaskSlotState.RELEASING)
        self._disarm_timeout(slot)
        # A snapshot: a task may remove itself synchronously while being failed.
        for task in list(slot.tasks.values()):
            try:
                task.fail_externally(cause)
            except Exception:
                # One misbehaving task must not keep the others (or the slot) alive.
                _log.exception("failing task %s of %r raised", task.attempt_id, slot)

    def _remove(self, slot: TaskSlot[T]) -> None:
        """Drop an empty slot from every index and give its resources back."""
        self._disarm_timeout(slot)
        del self._by_allocation[slot.allocation_id]
        del self._by_index[slot.index]
        job_slots = self._by_job.get(slot.job_id)
        if job_slots is None or slot.allocation_id not in job_slots:
            raise IllegalStateBug(f"{slot!r} is missing from the index of job {slot.job_id}")
        del job_slots[slot.allocation_id]
        if not job_slots:
            del self._by_job[slot.job_id]
        self._budget.release(slot.resource_profile)
