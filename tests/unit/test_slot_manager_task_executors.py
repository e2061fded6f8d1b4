"""The SlotManager's view of task executors: registration, slot reports, unregistering, idle
task executors, consistent counts and suspension."""

from __future__ import annotations

import pytest

from sparkmill.common.core.errors import IllegalStateBug, NotFoundError
from sparkmill.common.core.ids import new_allocation_id, new_instance_id, new_resource_id
from sparkmill.common.core.resources import UNKNOWN_PROFILE
from sparkmill.common.core.slots import SlotID, SlotReport, SlotStatus
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.services.resourcemanager.slot_manager import (
    SLOT_STATE_TRANSITIONS,
    AllocationStatus,
    SlotManager,
    SlotRequest,
    SlotState,
)
from tests.unit.slot_manager_fakes import (
    ALLOCATION_TIMEOUT,
    BIG,
    IDLE_TIMEOUT,
    REQUEST_TIMEOUT,
    SMALL,
    TE,
    Harness,
    RecordingActions,
    registration,
)

# ------------------------------------------------------------------ state machine


def test_transition_table_forbids_pending_from_allocated() -> None:
    assert SLOT_STATE_TRANSITIONS.can_transition(SlotState.FREE, SlotState.PENDING)
    assert SLOT_STATE_TRANSITIONS.can_transition(SlotState.PENDING, SlotState.FREE)
    assert not SLOT_STATE_TRANSITIONS.can_transition(SlotState.ALLOCATED, SlotState.PENDING)


# ------------------------------------------------------------------ registration


def test_registration_registers_free_slots() -> None:
    h = Harness()
    te = h.add_te(slots=3)
    assert h.sm.number_registered_task_executors() == 1
    assert h.states(te) == [SlotState.FREE] * 3
    assert [i.slot_id for i in h.sm.task_executor_slots(te.instance_id)] == [
        SlotID(te.resource_id, i) for i in range(3)
    ]
    h.check_counts([te])


def test_duplicate_registration_is_refused_and_counts_unchanged() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    again = h.report(2, SMALL, {})
    assert not h.sm.register_task_executor(
        te.instance_id, registration(te.resource_id, 2, SMALL), again
    )
    assert h.sm.number_registered_task_executors() == 1
    assert h.sm.slot_counts()[SlotState.FREE] == 2


def test_same_resource_under_a_new_instance_is_a_caller_bug() -> None:
    h = Harness()
    te = h.add_te(slots=1)
    with pytest.raises(IllegalStateBug):
        h.sm.register_task_executor(
            new_instance_id(), registration(te.resource_id, 1, SMALL), h.report(1, SMALL, {})
        )


def test_unknown_slot_profile_in_report_gets_default_profile() -> None:
    h = Harness()
    te = TE(new_instance_id(), new_resource_id())
    report = SlotReport((SlotStatus(0, UNKNOWN_PROFILE),))
    h.sm.register_task_executor(te.instance_id, registration(te.resource_id, 1, BIG), report)
    assert h.sm.task_executor_slots(te.instance_id)[0].resource_profile == BIG
    h.request(BIG)
    assert h.actions.allocations[-1][1] == SlotID(te.resource_id, 0)


def test_registration_records_allocated_slots_from_report() -> None:
    h = Harness()
    allocation = new_allocation_id()
    te = h.add_te(slots=2, allocated={1: allocation})
    assert h.states(te) == [SlotState.FREE, SlotState.ALLOCATED]
    info = h.sm.allocation_of(allocation)
    assert info is not None
    assert info.status is AllocationStatus.ALLOCATED
    assert info.slot_id == SlotID(te.resource_id, 1)
    assert info.job_id == h.job
    h.check_counts([te])


def test_registration_serves_waiting_requests() -> None:
    h = Harness()
    request = h.request()
    assert h.sm.number_pending_requests() == 1
    te = h.add_te(slots=1)
    assert h.actions.allocations == [(te.instance_id, SlotID(te.resource_id, 0), request)]
    assert h.sm.number_pending_requests() == 0


def test_unknown_task_executor_queries() -> None:
    h = Harness()
    with pytest.raises(NotFoundError):
        h.sm.task_executor_slots(new_instance_id())
    assert not h.sm.report_slot_status(new_instance_id(), SlotReport())
    assert h.sm.unregister_task_executor(new_instance_id(), "gone") == []


def test_duplicate_registration_reconciles_the_report() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    allocation = new_allocation_id()
    again = h.report(2, SMALL, {0: allocation})
    assert not h.sm.register_task_executor(
        te.instance_id, registration(te.resource_id, 2, SMALL), again
    )
    assert h.states(te) == [SlotState.ALLOCATED, SlotState.FREE]


# ------------------------------------------------------------------ unregistering


def test_unregister_requeues_in_flight_and_returns_lost_allocations() -> None:
    h = Harness(spread_out=False)
    doomed = h.add_te(slots=2)
    allocated, _ = h.allocate()
    in_flight = h.request()
    assert h.actions.last_slot().resource_id == doomed.resource_id
    lost = h.sm.unregister_task_executor(doomed.instance_id, "heartbeat timeout")
    assert lost == [allocated]
    assert h.sm.pending_requests() == [in_flight]
    assert h.sm.number_registered_task_executors() == 0
    assert h.sm.slot_counts() == dict.fromkeys(SlotState, 0)
    assert h.sm.allocation_of(allocated.allocation_id) is None
    # a late answer from the dead task executor is ignored
    assert not h.sm.on_allocation_result(
        in_flight.allocation_id, SlotID(doomed.resource_id, 1), None
    )

    other = h.add_te(slots=1)
    assert h.actions.allocations[-1] == (other.instance_id, SlotID(other.resource_id, 0), in_flight)
    h.check_counts([other])


def test_unregister_retries_in_flight_on_other_task_executor_at_once() -> None:
    h = Harness()
    a = h.add_te(slots=1)
    b = h.add_te(slots=1)
    request = h.request()
    target = h.actions.last_slot()
    doomed = a if target.resource_id == a.resource_id else b
    survivor = b if doomed is a else a
    assert h.sm.unregister_task_executor(doomed.instance_id, "lost") == []
    assert h.actions.allocations[-1] == (
        survivor.instance_id,
        SlotID(survivor.resource_id, 0),
        request,
    )


def test_lost_allocation_learnt_from_report_uses_slot_profile() -> None:
    h = Harness()
    allocation = new_allocation_id()
    te = h.add_te(slots=1, allocated={0: allocation})
    [lost] = h.sm.unregister_task_executor(te.instance_id, "lost")
    assert lost == SlotRequest(h.job, allocation, SMALL, "")


# ------------------------------------------------------------------ reconciliation


def test_report_marks_free_slot_allocated_and_allocated_slot_free() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    mine, slot_id = h.allocate()
    assert slot_id.slot_index == 0
    foreign = new_allocation_id()
    # the TE says slot 0 is free and slot 1 is held by an allocation we did not know
    assert h.sm.report_slot_status(te.instance_id, h.report(2, SMALL, {1: foreign}))
    assert h.states(te) == [SlotState.FREE, SlotState.ALLOCATED]
    assert h.sm.allocation_of(mine.allocation_id) is None
    info = h.sm.allocation_of(foreign)
    assert info is not None and info.slot_id == SlotID(te.resource_id, 1)
    h.check_counts([te])


def test_report_does_not_disturb_in_flight_allocation() -> None:
    h = Harness()
    te = h.add_te(slots=1)
    request = h.request()
    slot_id = h.actions.last_slot()
    h.sm.report_slot_status(te.instance_id, h.report(1, SMALL, {}))
    h.sm.report_slot_status(te.instance_id, h.report(1, SMALL, {0: new_allocation_id()}))
    assert h.states(te) == [SlotState.PENDING]
    assert h.sm.on_allocation_result(request.allocation_id, slot_id, None)
    assert h.states(te) == [SlotState.ALLOCATED]


def test_report_freeing_a_slot_serves_waiting_requests() -> None:
    h = Harness()
    te = h.add_te(slots=1)
    h.allocate()
    waiting = h.request()
    h.sm.report_slot_status(te.instance_id, h.report(1, SMALL, {}))
    assert h.actions.allocations[-1][2] == waiting
    assert h.states(te) == [SlotState.PENDING]


def test_reported_allocation_serves_the_waiting_request_for_it() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    h.allocate()
    h.allocate()
    waiting = h.request()
    # the task executor reports slot 1 now holds the waiting request's allocation
    report = h.report(2, SMALL, {0: h.actions.allocations[0][2].allocation_id})
    report = SlotReport((report.slots[0], SlotStatus(1, SMALL, waiting.allocation_id, h.job)))
    h.sm.report_slot_status(te.instance_id, report)
    assert h.sm.number_pending_requests() == 0
    info = h.sm.allocation_of(waiting.allocation_id)
    assert info is not None and info.status is AllocationStatus.ALLOCATED
    h.timers.advance(REQUEST_TIMEOUT)
    assert h.actions.failures == []


# ------------------------------------------------------------------ idle task executors


def test_idle_task_executor_is_reported_once() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    h.timers.advance(IDLE_TIMEOUT - 1)
    assert h.actions.idle == []
    h.timers.advance(1)
    assert h.actions.idle == [te.instance_id]
    h.timers.advance(IDLE_TIMEOUT * 3)
    assert h.actions.idle == [te.instance_id]


def test_idle_timer_cancelled_by_use_and_restarted_when_idle_again() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    h.timers.advance(IDLE_TIMEOUT / 2)
    request, slot_id = h.allocate()
    h.timers.advance(IDLE_TIMEOUT * 2)
    assert h.actions.idle == []
    h.sm.free_slot(slot_id, request.allocation_id)
    h.timers.advance(IDLE_TIMEOUT - 1)
    assert h.actions.idle == []
    h.timers.advance(1)
    assert h.actions.idle == [te.instance_id]


def test_in_flight_allocation_counts_as_use() -> None:
    h = Harness()
    h.add_te(slots=1)
    request = h.request()
    h.timers.advance(ALLOCATION_TIMEOUT - 1)
    h.sm.on_allocation_result(request.allocation_id, h.actions.last_slot(), None)
    h.timers.advance(IDLE_TIMEOUT * 2)
    assert h.actions.idle == []


def test_unregistered_task_executor_is_not_reported_idle() -> None:
    h = Harness()
    te = h.add_te(slots=1)
    h.sm.unregister_task_executor(te.instance_id, "bye")
    h.timers.advance(IDLE_TIMEOUT * 2)
    assert h.actions.idle == []


# ------------------------------------------------------------------ counts and suspend


def test_counts_stay_consistent_through_a_busy_sequence() -> None:
    h = Harness()
    tes = [h.add_te(slots=3) for _ in range(2)]
    requests = [h.request() for _ in range(8)]
    h.check_counts(tes)
    assert h.sm.slot_counts() == {SlotState.FREE: 0, SlotState.PENDING: 6, SlotState.ALLOCATED: 0}
    assert h.sm.number_pending_requests() == 2
    for _, slot_id, request in list(h.actions.allocations):
        h.sm.on_allocation_result(request.allocation_id, slot_id, None)
        h.check_counts(tes)
    for request in requests[:2]:
        info = h.sm.allocation_of(request.allocation_id)
        assert info is not None and info.slot_id is not None
        h.sm.free_slot(info.slot_id, request.allocation_id)
        h.check_counts(tes)
    assert h.sm.slot_counts() == {SlotState.FREE: 0, SlotState.PENDING: 2, SlotState.ALLOCATED: 4}
    h.timers.advance(ALLOCATION_TIMEOUT)  # both attempts time out, each retried elsewhere or queued
    h.check_counts(tes)
    h.sm.unregister_task_executor(tes[0].instance_id, "gone")
    h.check_counts(tes[1:])
    assert sum(h.sm.slot_counts().values()) == 3


def test_suspend_forgets_everything_and_cancels_timers() -> None:
    h = Harness()
    h.add_te(slots=1)
    h.allocate()
    h.request()
    h.sm.suspend()
    assert h.sm.number_registered_task_executors() == 0
    assert h.sm.number_pending_requests() == 0
    assert h.sm.slot_counts() == dict.fromkeys(SlotState, 0)
    assert h.timers.advance(REQUEST_TIMEOUT + IDLE_TIMEOUT) == 0
    assert h.actions.failures == [] and h.actions.idle == []


def test_non_positive_timeouts_are_rejected() -> None:
    with pytest.raises(ValueError, match="slot_request_timeout_s"):
        SlotManager(ManualTimerService(), RecordingActions(), 0, IDLE_TIMEOUT)
