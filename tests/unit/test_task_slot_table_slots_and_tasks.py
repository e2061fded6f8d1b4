"""The task executor's TaskSlotTable: slot timeouts and activation, freeing slots, tasks in slots,
per-job indexes and the slot report."""

from __future__ import annotations

import pytest

from sparkmill.common.core.errors import (
    ErrorCode,
    FailedPreconditionError,
    NotFoundError,
    error_from_code,
)
from sparkmill.common.core.ids import new_allocation_id, new_attempt_id, new_job_id, new_resource_id
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.core.slots import SlotStatus
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.services.taskexecutor.slot_table import (
    SlotNotActiveError,
    SlotNotFoundError,
    TaskSlotState,
    TaskSlotTable,
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
