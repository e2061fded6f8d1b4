"""The task executor's TaskSlotTable: construction, start and close, and allocating slots (static
and dynamic indices, the resource budget, idempotent and conflicting allocations)."""

from __future__ import annotations

import pytest

from sparkmill.common.core.errors import IllegalStateBug, InvalidArgumentError
from sparkmill.common.core.ids import new_allocation_id, new_attempt_id, new_job_id, new_resource_id
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.services.taskexecutor.slot_table import (
    SLOT_TRANSITIONS,
    TABLE_TRANSITIONS,
    TaskSlotState,
    TaskSlotTable,
    TaskSlotTableState,
)
from tests.unit.task_slot_table_fakes import (
    DEFAULT,
    N_SLOTS,
    SMALL,
    TIMEOUT,
    TOTAL,
    FakeTask,
    RecordingActions,
    active_slot_with_tasks,
    allocate,
    state_of,
)


# Each test gets a started table of N_SLOTS static slots with fake time and recording actions.
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
