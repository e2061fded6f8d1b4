"""Unit tests of the task executor's TaskSlotTable, with fake tasks, fake actions and fake time."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sparkmill.common.core.errors import (
    ErrorCode,
    FailedPreconditionError,
    IllegalStateBug,
    InvalidArgumentError,
    NotFoundError,
    error_from_code,
)
from sparkmill.common.core.ids import (
    AllocationID,
    ExecutionAttemptID,
    JobID,
    new_allocation_id,
    new_attempt_id,
    new_job_id,
    new_resource_id,
)
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.core.slots import SlotStatus
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.services.taskexecutor.slot_table import (
    SLOT_TRANSITIONS,
    TABLE_TRANSITIONS,
    SlotNotActiveError,
    SlotNotFoundError,
    TaskSlotState,
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


@pytest.fixture
def timers() -> ManualTimerService:
    return ManualTimerService()


@pytest.fixture
def actions() -> RecordingActions:
    return RecordingActions()


@pytest.fixture
def table(timers: ManualTimerService, actions: RecordingActions) -> TaskSlotTable[FakeTask]:
    t: TaskSlotTable[FakeTask] = TaskSlotTable(N_SLOTS, TOTAL, DEFAULT, timers)
    t.start(actions)
    return t


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


# ---- construction and lifecycle ---------------------------------------------------------------


def test_constructor_rejects_no_slots_and_a_budget_smaller_than_the_static_slots() -> None:
    with pytest.raises(ValueError, match="positive"):
        TaskSlotTable(0, TOTAL, DEFAULT, ManualTimerService())
    with pytest.raises(ValueError, match="static slots"):
        TaskSlotTable(5, TOTAL, DEFAULT, ManualTimerService())


def test_operations_before_start_are_bugs(timers: ManualTimerService) -> None:
    t: TaskSlotTable[FakeTask] = TaskSlotTable(N_SLOTS, TOTAL, DEFAULT, timers)
    assert t.state is TaskSlotTableState.CREATED
    with pytest.raises(IllegalStateBug, match="CREATED"):
        t.allocate_slot(0, new_job_id(), new_allocation_id(), UNKNOWN_PROFILE, TIMEOUT)
    # Queries and the report work before start: everything is free.
    assert t.is_slot_free(0)
    assert len(t.create_slot_report(new_resource_id())) == N_SLOTS


def test_start_twice_is_a_bug(table: TaskSlotTable[FakeTask], actions: RecordingActions) -> None:
    assert table.state is TaskSlotTableState.RUNNING
    with pytest.raises(IllegalStateBug, match="RUNNING -> RUNNING"):
        table.start(actions)


def state_of(table: TaskSlotTable[FakeTask]) -> TaskSlotTableState:
    """The state, read through a call (mypy would narrow a property across assertions)."""
    return table.state


def test_close_of_a_created_table_goes_straight_to_closed(timers: ManualTimerService) -> None:
    t: TaskSlotTable[FakeTask] = TaskSlotTable(N_SLOTS, TOTAL, DEFAULT, timers)
    t.close()
    assert t.state is TaskSlotTableState.CLOSED
    with pytest.raises(IllegalStateBug):
        t.start(RecordingActions())


def test_close_fails_tasks_frees_every_slot_and_refuses_later_operations(
    table: TaskSlotTable[FakeTask], actions: RecordingActions, timers: ManualTimerService
) -> None:
    job, aid, tasks = active_slot_with_tasks(table, 2)
    _, pending = allocate(table, 1)
    _, dynamic = allocate(table, -1, profile=SMALL)
    cause = RuntimeError("shutting down")

    closed: list[str] = []

    table.close(cause)
    table.when_closed(lambda: closed.append("closed"))

    # Slots without tasks go at once; the slot with tasks waits for them (Flink's closeAsync).
    assert table.state is TaskSlotTableState.CLOSING and closed == []
    assert all(t.failures == [cause] for t in tasks)
    assert table.owning_job(dynamic) is None and table.owning_job(pending) is None
    assert not timers.is_scheduled(pending)
    assert table.running_tasks() == tasks
    assert table.remove_task(tasks[0].attempt_id) is tasks[0]
    assert table.state is TaskSlotTableState.CLOSING
    assert table.remove_task(tasks[1].attempt_id) is tasks[1]

    assert state_of(table) is TaskSlotTableState.CLOSED and closed == ["closed"]
    assert len(table) == 0
    assert all(table.is_slot_free(i) for i in range(N_SLOTS))
    assert table.tasks_of_job(job) == []
    assert table.available_resources == TOTAL
    assert timers.advance(TIMEOUT * 2) == 0
    # The owner is closing the table itself: no call-backs into it.
    assert actions.freed == [] and actions.timeouts == []
    # Tasks that stop later are simply unknown now.
    assert table.remove_task(tasks[0].attempt_id) is None

    with pytest.raises(IllegalStateBug, match="CLOSED"):
        table.allocate_slot(0, job, new_allocation_id(), UNKNOWN_PROFILE, TIMEOUT)
    with pytest.raises(IllegalStateBug):
        table.add_task(FakeTask(new_attempt_id(), job, aid))
    with pytest.raises(IllegalStateBug):
        table.free_slot(aid)
    with pytest.raises(IllegalStateBug):
        table.mark_slot_active(aid)
    with pytest.raises(IllegalStateBug):
        table.try_mark_slot_active(job, aid)

    table.close()  # idempotent
    assert state_of(table) is TaskSlotTableState.CLOSED


def test_close_keeps_going_when_a_task_raises_while_being_failed(
    table: TaskSlotTable[FakeTask],
) -> None:
    job, aid = allocate(table, 0)
    table.mark_slot_active(aid)

    class ExplodingTask(FakeTask):
        def fail_externally(self, cause: BaseException) -> None:
            raise ValueError("boom")

    bad = ExplodingTask(new_attempt_id(), job, aid)
    good = FakeTask(new_attempt_id(), job, aid)
    assert table.add_task(bad) and table.add_task(good)
    table.close()
    assert len(good.failures) == 1
    assert table.state is TaskSlotTableState.CLOSING
    # The owner gave up waiting: both tasks are reported, the table is CLOSED.
    assert table.force_close() == [bad, good]
    assert state_of(table) is TaskSlotTableState.CLOSED
    assert table.available_resources == TOTAL
    assert table.force_close() == []


def test_closing_a_table_whose_tasks_remove_themselves_ends_closed_at_once(
    table: TaskSlotTable[FakeTask],
) -> None:
    job, aid = allocate(table, 0)
    table.mark_slot_active(aid)

    class SelfRemovingTask(FakeTask):
        def fail_externally(self, cause: BaseException) -> None:
            super().fail_externally(cause)
            table.remove_task(self.attempt_id)

    assert table.add_task(SelfRemovingTask(new_attempt_id(), job, aid))
    table.close()
    assert table.state is TaskSlotTableState.CLOSED
    assert len(table) == 0


def test_transition_tables() -> None:
    assert TABLE_TRANSITIONS.is_terminal(TaskSlotTableState.CLOSED)
    assert TABLE_TRANSITIONS.can_transition(TaskSlotTableState.CREATED, TaskSlotTableState.CLOSED)
    assert not TABLE_TRANSITIONS.can_transition(
        TaskSlotTableState.CLOSED, TaskSlotTableState.RUNNING
    )
    assert SLOT_TRANSITIONS.is_terminal(TaskSlotState.RELEASING)
    assert SLOT_TRANSITIONS.can_transition(TaskSlotState.ACTIVE, TaskSlotState.ALLOCATED)
    assert not SLOT_TRANSITIONS.can_transition(TaskSlotState.RELEASING, TaskSlotState.ACTIVE)


# ---- allocation --------------------------------------------------------------------------------


def test_static_allocation_uses_the_default_profile_and_reserves_budget(
    table: TaskSlotTable[FakeTask],
) -> None:
    job, aid = allocate(table, 1, profile=ResourceProfile(cpu_cores=3, memory_mb=3000))
    info = table.slot_info(aid)
    assert info is not None
    assert (info.index, info.state, info.is_dynamic) == (1, TaskSlotState.ALLOCATED, False)
    assert info.resource_profile == DEFAULT
    assert not table.is_slot_free(1) and table.is_slot_free(0)
    assert table.current_allocation(1) == aid and table.current_allocation(0) is None
    assert table.owning_job(aid) == job
    assert table.is_allocated(1, job, aid)
    assert not table.is_allocated(1, new_job_id(), aid)
    assert not table.is_allocated(0, job, aid)
    assert not table.is_allocated(-1, job, aid)  # a negative index asks for a dynamic slot
    assert table.available_resources == TOTAL - DEFAULT
    assert len(table) == 1


def test_dynamic_slots_get_fresh_indices_beyond_the_static_range(
    table: TaskSlotTable[FakeTask],
) -> None:
    job, first = allocate(table, -1, profile=SMALL)
    _, second = allocate(table, None, profile=SMALL)
    infos = [table.slot_info(first), table.slot_info(second)]
    assert [i.index for i in infos if i] == [N_SLOTS, N_SLOTS + 1]
    assert all(i is not None and i.is_dynamic and i.resource_profile == SMALL for i in infos)
    assert table.current_allocation(N_SLOTS) == first
    assert table.is_allocated(-1, job, first)
    assert table.is_allocated(None, job, first)
    assert not table.is_allocated(-1, new_job_id(), first)
    assert table.available_resources == TOTAL - SMALL - SMALL

    # Indices are never reused, so an old report cannot be confused with a new slot.
    assert table.free_slot(first) == N_SLOTS
    _, third = allocate(table, -5, profile=SMALL)
    third_info = table.slot_info(third)
    assert third_info is not None and third_info.index == N_SLOTS + 2


def test_dynamic_slot_with_unknown_profile_gets_the_default_profile(
    table: TaskSlotTable[FakeTask],
) -> None:
    _, aid = allocate(table, -1, profile=UNKNOWN_PROFILE)
    info = table.slot_info(aid)
    assert info is not None and info.resource_profile == DEFAULT
    assert table.available_resources == TOTAL - DEFAULT


def test_allocation_fails_when_the_budget_cannot_hold_the_profile(
    table: TaskSlotTable[FakeTask], timers: ManualTimerService
) -> None:
    job = new_job_id()
    big = new_allocation_id()
    assert not table.allocate_slot(-1, job, big, ResourceProfile(5, 512), TIMEOUT)
    assert table.owning_job(big) is None and not timers.is_scheduled(big)
    assert table.available_resources == TOTAL

    _, filler = allocate(table, -1, job, ResourceProfile(cpu_cores=2, memory_mb=1024))
    allocate(table, 0, job)
    allocate(table, 1, job)
    # Dynamic slots compete with static ones for the same budget.
    late = new_allocation_id()
    assert not table.allocate_slot(2, job, late, UNKNOWN_PROFILE, TIMEOUT)
    assert table.is_slot_free(2)
    # The refused dynamic request did not consume an index.
    assert table.current_allocation(N_SLOTS) == filler

    table.free_slot(filler)
    assert table.allocate_slot(2, job, late, UNKNOWN_PROFILE, TIMEOUT)
    assert table.available_resources == ResourceProfile(1, 1024)


def test_fractional_cpu_budget_does_not_drift() -> None:
    t: TaskSlotTable[FakeTask] = TaskSlotTable(
        1, ResourceProfile(0.3, 300), ResourceProfile(0.1, 100), ManualTimerService()
    )
    t.start(RecordingActions())
    job = new_job_id()
    assert t.allocate_slot(0, job, new_allocation_id(), UNKNOWN_PROFILE, TIMEOUT)
    assert t.allocate_slot(-1, job, new_allocation_id(), ResourceProfile(0.1, 100), TIMEOUT)
    assert t.allocate_slot(-1, job, new_allocation_id(), ResourceProfile(0.1, 100), TIMEOUT)
    assert not t.allocate_slot(-1, job, new_allocation_id(), ResourceProfile(0.1, 100), TIMEOUT)


def test_non_negative_index_outside_the_static_range_is_invalid(
    table: TaskSlotTable[FakeTask],
) -> None:
    aid = new_allocation_id()
    with pytest.raises(InvalidArgumentError, match=aid) as err:
        table.allocate_slot(N_SLOTS, new_job_id(), aid, UNKNOWN_PROFILE, TIMEOUT)
    assert f"[0, {N_SLOTS})" in str(err.value)
    assert len(table) == 0


def test_reallocating_the_same_allocation_is_idempotent_and_rearms_the_timeout(
    table: TaskSlotTable[FakeTask], actions: RecordingActions, timers: ManualTimerService
) -> None:
    job, aid = allocate(table, 0)
    timers.advance(TIMEOUT - 1)
    assert table.allocate_slot(0, job, aid, UNKNOWN_PROFILE, TIMEOUT)
    assert len(table) == 1 and table.available_resources == TOTAL - DEFAULT
    timers.advance(2)  # the first deadline has passed, the re-armed one has not
    assert actions.timeouts == []
    timers.advance(TIMEOUT)
    assert [a for a, _ in actions.timeouts] == [aid]


def test_reallocating_an_active_slot_succeeds_without_arming_a_timeout(
    table: TaskSlotTable[FakeTask], timers: ManualTimerService
) -> None:
    job, aid = allocate(table, 0)
    table.mark_slot_active(aid)
    assert table.allocate_slot(0, job, aid, UNKNOWN_PROFILE, TIMEOUT)
    assert table.is_active(job, aid)
    assert not timers.is_scheduled(aid)


def test_dynamic_reallocation_is_idempotent_only_for_the_same_profile(
    table: TaskSlotTable[FakeTask],
) -> None:
    job, aid = allocate(table, -1, profile=SMALL)
    assert table.allocate_slot(-1, job, aid, SMALL, TIMEOUT)
    # The resource manager may also re-request it by the index it saw in a slot report.
    assert table.allocate_slot(N_SLOTS, job, aid, SMALL, TIMEOUT)
    assert not table.allocate_slot(-1, job, aid, DEFAULT, TIMEOUT)
    assert not table.allocate_slot(0, job, aid, UNKNOWN_PROFILE, TIMEOUT)
    assert len(table) == 1 and table.is_slot_free(0)
    assert table.available_resources == TOTAL - SMALL


def test_conflicting_allocations_are_refused(table: TaskSlotTable[FakeTask]) -> None:
    job, aid = allocate(table, 0)
    other_job = new_job_id()
    # The index is taken by another allocation (of the same or another job).
    assert not table.allocate_slot(0, job, new_allocation_id(), UNKNOWN_PROFILE, TIMEOUT)
    assert not table.allocate_slot(0, other_job, new_allocation_id(), UNKNOWN_PROFILE, TIMEOUT)
    # The allocation id is reused for another job or another index.
    assert not table.allocate_slot(0, other_job, aid, UNKNOWN_PROFILE, TIMEOUT)
    assert not table.allocate_slot(1, job, aid, UNKNOWN_PROFILE, TIMEOUT)
    assert not table.allocate_slot(-1, job, aid, SMALL, TIMEOUT)
    assert table.current_allocation(0) == aid and table.owning_job(aid) == job
    assert table.is_slot_free(1) and len(table) == 1
    assert table.available_resources == TOTAL - DEFAULT


def test_reallocating_a_releasing_slot_is_refused(table: TaskSlotTable[FakeTask]) -> None:
    job, aid, _ = active_slot_with_tasks(table, 1)
    assert table.free_slot(aid) == -1
    assert not table.allocate_slot(0, job, aid, UNKNOWN_PROFILE, TIMEOUT)
    assert not table.is_allocated(0, job, aid)


# ---- timeouts and activation -------------------------------------------------------------------


def test_an_allocated_slot_times_out_with_a_valid_ticket(
    table: TaskSlotTable[FakeTask], actions: RecordingActions, timers: ManualTimerService
) -> None:
    _, aid = allocate(table, 0)
    assert timers.is_scheduled(aid)
    timers.advance(TIMEOUT - 0.5)
    assert actions.timeouts == []
    timers.advance(1)
    assert len(actions.timeouts) == 1
    timed_out, ticket = actions.timeouts[0]
    assert timed_out == aid
    # The owner validates later: the ticket stays valid until something supersedes it.
    assert table.is_valid_timeout(aid, ticket)
    assert not table.is_valid_timeout(aid, object())
    assert not table.is_valid_timeout(new_allocation_id(), ticket)
    assert table.free_slot(aid) == 0
    assert not table.is_valid_timeout(aid, ticket)


def test_rearming_or_activating_invalidates_the_old_ticket(
    table: TaskSlotTable[FakeTask], actions: RecordingActions, timers: ManualTimerService
) -> None:
    job, aid = allocate(table, 0)
    timers.advance(TIMEOUT)
    _, first = actions.timeouts[0]
    assert table.allocate_slot(0, job, aid, UNKNOWN_PROFILE, TIMEOUT)
    assert not table.is_valid_timeout(aid, first)
    timers.advance(TIMEOUT)
    _, second = actions.timeouts[1]
    assert second is not first and table.is_valid_timeout(aid, second)
    assert table.mark_slot_active(aid)
    assert not table.is_valid_timeout(aid, second)


def test_activation_cancels_the_timeout(
    table: TaskSlotTable[FakeTask], actions: RecordingActions, timers: ManualTimerService
) -> None:
    job, aid = allocate(table, 0)
    assert table.mark_slot_active(aid)
    assert table.is_active(job, aid)
    assert not table.is_active(new_job_id(), aid)
    assert not timers.is_scheduled(aid)
    assert timers.advance(TIMEOUT * 3) == 0
    assert actions.timeouts == []
    assert table.mark_slot_active(aid)  # already active is fine
    assert table.active_allocation_ids() == [aid]


def test_mark_slot_active_of_an_unknown_allocation_raises(
    table: TaskSlotTable[FakeTask],
) -> None:
    aid = new_allocation_id()
    with pytest.raises(SlotNotFoundError, match=aid) as err:
        table.mark_slot_active(aid)
    assert "expected" in str(err.value)
    assert err.value.allocation_id == aid
    with pytest.raises(SlotNotFoundError, match=aid):
        table.mark_slot_inactive(aid, TIMEOUT)


def test_a_releasing_slot_cannot_be_activated_or_deactivated(
    table: TaskSlotTable[FakeTask],
) -> None:
    job, aid, _ = active_slot_with_tasks(table, 1)
    table.free_slot(aid)
    assert not table.mark_slot_active(aid)
    assert not table.try_mark_slot_active(job, aid)
    assert not table.mark_slot_inactive(aid, TIMEOUT)
    info = table.slot_info(aid)
    assert info is not None and info.state is TaskSlotState.RELEASING


def test_mark_slot_inactive_rearms_the_timeout(
    table: TaskSlotTable[FakeTask], actions: RecordingActions, timers: ManualTimerService
) -> None:
    job, aid, tasks = active_slot_with_tasks(table, 1)
    assert table.mark_slot_inactive(aid, 5.0)
    info = table.slot_info(aid)
    assert info is not None and info.state is TaskSlotState.ALLOCATED
    assert table.has_allocated_slots(job)
    assert table.tasks_of_slot(aid) == tasks  # the tasks stay
    assert timers.is_scheduled(aid)
    timers.advance(5.0)
    assert [a for a, _ in actions.timeouts] == [aid]


def test_try_mark_slot_active_is_a_guard(table: TaskSlotTable[FakeTask]) -> None:
    job, aid = allocate(table, 0)
    assert not table.try_mark_slot_active(new_job_id(), aid)
    assert not table.try_mark_slot_active(job, new_allocation_id())
    assert not table.is_active(job, aid)
    assert table.try_mark_slot_active(job, aid)
    assert table.is_active(job, aid)
    assert table.try_mark_slot_active(job, aid)


# ---- freeing -----------------------------------------------------------------------------------


def test_freeing_an_empty_slot_removes_it(
    table: TaskSlotTable[FakeTask], actions: RecordingActions, timers: ManualTimerService
) -> None:
    job, aid = allocate(table, 2)
    assert table.free_slot(aid) == 2
    assert table.is_slot_free(2)
    assert table.owning_job(aid) is None and table.slot_info(aid) is None
    assert table.allocation_ids_of_job(job) == [] and table.job_ids() == []
    assert table.available_resources == TOTAL
    assert not timers.is_scheduled(aid)
    assert actions.freed == []
    # The index can be allocated again.
    assert table.allocate_slot(2, new_job_id(), new_allocation_id(), UNKNOWN_PROFILE, TIMEOUT)


def test_freeing_an_unknown_allocation_raises(table: TaskSlotTable[FakeTask]) -> None:
    aid = new_allocation_id()
    with pytest.raises(SlotNotFoundError, match=aid):
        table.free_slot(aid)


def test_freeing_a_slot_with_tasks_releases_it_until_the_last_task_is_removed(
    table: TaskSlotTable[FakeTask], actions: RecordingActions
) -> None:
    _, aid, tasks = active_slot_with_tasks(table, 2)
    cause = RuntimeError("job master asked to free the slot")

    assert table.free_slot(aid, cause) == -1

    info = table.slot_info(aid)
    assert info is not None and info.state is TaskSlotState.RELEASING
    assert [t.failures for t in tasks] == [[cause], [cause]]
    assert not table.is_slot_free(0)
    assert table.available_resources == TOTAL - DEFAULT
    # Freeing again does not fail the tasks a second time.
    assert table.free_slot(aid) == -1
    assert [len(t.failures) for t in tasks] == [1, 1]

    assert table.remove_task(tasks[0].attempt_id) is tasks[0]
    assert actions.freed == []
    assert table.remove_task(tasks[1].attempt_id) is tasks[1]
    assert actions.freed == [aid]

    # The owner reacts by freeing the now empty slot for good.
    assert table.free_slot(aid) == 0
    assert table.is_slot_free(0) and table.available_resources == TOTAL


def test_free_slot_without_cause_still_fails_tasks(table: TaskSlotTable[FakeTask]) -> None:
    _, aid, tasks = active_slot_with_tasks(table, 1)
    table.free_slot(aid)
    assert len(tasks[0].failures) == 1
    assert aid in str(tasks[0].failures[0])


def test_a_task_removing_itself_while_failed_triggers_the_free_slot_action(
    table: TaskSlotTable[FakeTask], actions: RecordingActions
) -> None:
    job, aid = allocate(table, 0)
    table.mark_slot_active(aid)

    class SelfRemovingTask(FakeTask):
        def fail_externally(self, cause: BaseException) -> None:
            super().fail_externally(cause)
            table.remove_task(self.attempt_id)

    task = SelfRemovingTask(new_attempt_id(), job, aid)
    assert table.add_task(task)
    assert table.free_slot(aid) == -1
    assert actions.freed == [aid]
    assert table.get_task(task.attempt_id) is None


def test_removing_a_task_from_an_active_slot_does_not_free_it(
    table: TaskSlotTable[FakeTask], actions: RecordingActions
) -> None:
    job, aid, tasks = active_slot_with_tasks(table, 1)
    assert table.remove_task(tasks[0].attempt_id) is tasks[0]
    assert table.remove_task(tasks[0].attempt_id) is None
    assert actions.freed == []
    assert table.is_active(job, aid)


# ---- tasks -------------------------------------------------------------------------------------


def test_add_task_needs_an_existing_slot(table: TaskSlotTable[FakeTask]) -> None:
    aid = new_allocation_id()
    task = FakeTask(new_attempt_id(), new_job_id(), aid)
    with pytest.raises(SlotNotFoundError, match=aid) as err:
        table.add_task(task)
    assert err.value.code is ErrorCode.NOT_FOUND
    assert task.attempt_id in str(err.value)


def test_add_task_needs_an_active_slot_of_the_same_job(table: TaskSlotTable[FakeTask]) -> None:
    job, aid = allocate(table, 0)
    with pytest.raises(SlotNotActiveError, match=aid) as err:
        table.add_task(FakeTask(new_attempt_id(), job, aid))
    assert "expected an ACTIVE slot" in str(err.value) and "ALLOCATED" in str(err.value)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert isinstance(err.value, FailedPreconditionError)

    table.mark_slot_active(aid)
    other_job = new_job_id()
    with pytest.raises(SlotNotActiveError, match=other_job):
        table.add_task(FakeTask(new_attempt_id(), other_job, aid))
    assert table.tasks_of_slot(aid) == []


def test_add_task_to_a_releasing_slot_is_refused(table: TaskSlotTable[FakeTask]) -> None:
    job, aid, _ = active_slot_with_tasks(table, 1)
    table.free_slot(aid)
    with pytest.raises(SlotNotActiveError, match="RELEASING"):
        table.add_task(FakeTask(new_attempt_id(), job, aid))


def test_a_duplicate_attempt_id_is_refused(table: TaskSlotTable[FakeTask]) -> None:
    job, aid, (task,) = active_slot_with_tasks(table, 1)
    again = FakeTask(task.attempt_id, job, aid)
    assert not table.add_task(again)
    # Also when it targets another slot of the job.
    _, other = allocate(table, 1, job)
    table.mark_slot_active(other)
    assert not table.add_task(FakeTask(task.attempt_id, job, other))
    assert table.get_task(task.attempt_id) is task
    assert table.tasks_of_slot(other) == []


def test_slot_errors_cross_the_wire_as_their_base_types() -> None:
    aid = new_allocation_id()
    err = SlotNotFoundError.for_allocation(aid, "a slot")
    rebuilt = error_from_code(err.code, err.message)
    assert type(rebuilt) is NotFoundError and aid in rebuilt.message
    active = SlotNotActiveError("not active", allocation_id=aid)
    assert type(error_from_code(active.code, active.message)) is FailedPreconditionError


# ---- per-job indexes and queries ---------------------------------------------------------------


def test_per_job_indexes(table: TaskSlotTable[FakeTask]) -> None:
    job_a, a0, tasks_a0 = active_slot_with_tasks(table, 2, index=0)
    _, a1 = allocate(table, 1, job_a)
    job_b, b0, tasks_b0 = active_slot_with_tasks(table, 1, index=2)
    _, b_dyn = allocate(table, -1, job_b, SMALL)

    assert table.allocation_ids_of_job(job_a) == [a0, a1]
    assert table.allocation_ids_of_job(job_b) == [b0, b_dyn]
    assert table.allocation_ids_of_job(new_job_id()) == []
    assert set(table.job_ids()) == {job_a, job_b}
    assert table.active_allocation_ids(job_a) == [a0]
    assert sorted(table.active_allocation_ids()) == sorted([a0, b0])
    assert table.has_allocated_slots(job_a) and table.has_allocated_slots(job_b)
    assert not table.has_allocated_slots(new_job_id())

    assert table.tasks_of_job(job_a) == tasks_a0
    assert table.tasks_of_job(job_b) == tasks_b0
    assert table.tasks_of_slot(a1) == [] and table.tasks_of_slot(new_allocation_id()) == []
    assert table.get_task(tasks_b0[0].attempt_id) is tasks_b0[0]
    assert table.get_task(new_attempt_id()) is None

    assert [s.allocation_id for s in table.slots_of_job(job_a)] == [a0, a1]
    assert [s.number_of_tasks for s in table.slots_of_job(job_a)] == [2, 0]
    allocated_b = table.slots_of_job(job_b, TaskSlotState.ALLOCATED)
    assert [(s.allocation_id, s.index) for s in allocated_b] == [(b_dyn, N_SLOTS)]

    table.mark_slot_active(a1)
    assert not table.has_allocated_slots(job_a)
    for task in tasks_a0:
        table.remove_task(task.attempt_id)
    table.free_slot(a0)
    table.free_slot(a1)
    assert table.job_ids() == [job_b]
    assert table.tasks_of_job(job_a) == []


# ---- slot report -------------------------------------------------------------------------------


def test_slot_report_of_an_empty_table_lists_every_static_slot_as_free(
    table: TaskSlotTable[FakeTask],
) -> None:
    report = table.create_slot_report(new_resource_id())
    assert list(report.slots) == [SlotStatus(i, DEFAULT) for i in range(N_SLOTS)]
    assert all(s.is_free for s in report.slots)


def test_slot_report_lists_static_slots_then_allocated_dynamic_slots(
    table: TaskSlotTable[FakeTask],
) -> None:
    job, s1 = allocate(table, 1)
    _, d0 = allocate(table, -1, job, SMALL)
    _, d1 = allocate(table, -1, job, ResourceProfile(0.25, 256))
    table.free_slot(d0)

    report = table.create_slot_report(new_resource_id())

    assert list(report.slots) == [
        SlotStatus(0, DEFAULT),
        SlotStatus(1, DEFAULT, s1, job),
        SlotStatus(2, DEFAULT),
        SlotStatus(N_SLOTS + 1, ResourceProfile(0.25, 256), d1, job),
    ]
