from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from sparkmill.common.core.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    IllegalStateBug,
    NotFoundError,
    ResourceExhaustedError,
    RpcError,
    UnavailableError,
)
from sparkmill.common.core.ids import (
    AllocationID,
    InstanceID,
    JobID,
    ResourceID,
    new_allocation_id,
    new_instance_id,
    new_job_id,
    new_resource_id,
)
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.core.slots import SlotID, SlotReport, SlotStatus
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.common.v1 import common_pb2
from sparkmill.services.resourcemanager.slot_manager import (
    SLOT_STATE_TRANSITIONS,
    AllocationStatus,
    SlotManager,
    SlotRequest,
    SlotState,
)
from sparkmill.services.resourcemanager.task_executor_registration import TaskExecutorRegistration

SMALL = ResourceProfile(1.0, 1024)
BIG = ResourceProfile(4.0, 8192)
REQUEST_TIMEOUT = 30.0
IDLE_TIMEOUT = 60.0
ALLOCATION_TIMEOUT = 5.0


@dataclass
class RecordingActions:
    allocations: list[tuple[InstanceID, SlotID, SlotRequest]] = field(default_factory=list)
    failures: list[tuple[JobID, AllocationID, RpcError]] = field(default_factory=list)
    idle: list[InstanceID] = field(default_factory=list)

    def allocate_slot(self, instance_id: InstanceID, slot_id: SlotID, request: SlotRequest) -> None:
        self.allocations.append((instance_id, slot_id, request))

    def notify_allocation_failure(
        self, job_id: JobID, allocation_id: AllocationID, cause: RpcError
    ) -> None:
        self.failures.append((job_id, allocation_id, cause))

    def notify_idle_task_executor(self, instance_id: InstanceID) -> None:
        self.idle.append(instance_id)

    def last_slot(self) -> SlotID:
        return self.allocations[-1][1]


def registration(
    resource_id: ResourceID, slots: int, profile: ResourceProfile
) -> TaskExecutorRegistration:
    """A task executor's decoded registration: ``slots`` slots of ``profile``."""
    return TaskExecutorRegistration(
        resource_id, "te-address", slots, profile.multiply(slots), profile, common_pb2.ServiceInfo()
    )


@dataclass
class TE:
    instance_id: InstanceID
    resource_id: ResourceID


class Harness:
    def __init__(self, spread_out: bool = True) -> None:
        self.timers = ManualTimerService()
        self.actions = RecordingActions()
        self.sm = SlotManager(
            self.timers,
            self.actions,
            REQUEST_TIMEOUT,
            IDLE_TIMEOUT,
            spread_out=spread_out,
            allocation_timeout_s=ALLOCATION_TIMEOUT,
        )
        self.job = new_job_id()

    def add_te(
        self,
        slots: int = 4,
        profile: ResourceProfile = SMALL,
        allocated: dict[int, AllocationID] | None = None,
    ) -> TE:
        te = TE(new_instance_id(), new_resource_id())
        report = self.report(slots, profile, allocated or {})
        assert self.sm.register_task_executor(
            te.instance_id, registration(te.resource_id, slots, profile), report
        )
        return te

    def report(
        self, slots: int, profile: ResourceProfile, allocated: dict[int, AllocationID]
    ) -> SlotReport:
        return SlotReport(
            tuple(
                SlotStatus(i, profile, allocated.get(i), self.job if i in allocated else None)
                for i in range(slots)
            )
        )

    def request(self, profile: ResourceProfile = UNKNOWN_PROFILE) -> SlotRequest:
        request = SlotRequest(self.job, new_allocation_id(), profile, "jm-address")
        assert self.sm.register_slot_request(request)
        return request

    def allocate(self, profile: ResourceProfile = UNKNOWN_PROFILE) -> tuple[SlotRequest, SlotID]:
        """A request that is served and confirmed by the task executor."""
        request = self.request(profile)
        slot_id = self.actions.last_slot()
        assert self.actions.allocations[-1][2] == request
        assert self.sm.on_allocation_result(request.allocation_id, slot_id, None)
        return request, slot_id

    def states(self, te: TE) -> list[SlotState]:
        return [info.state for info in self.sm.task_executor_slots(te.instance_id)]

    def check_counts(self, tes: list[TE]) -> None:
        seen: Counter[SlotState] = Counter()
        for te in tes:
            seen.update(self.states(te))
        assert self.sm.slot_counts() == {state: seen[state] for state in SlotState}


def per_te(h: Harness) -> Counter[ResourceID]:
    return Counter(slot_id.resource_id for _, slot_id, _ in h.actions.allocations)


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


# ------------------------------------------------------------------ matching


def test_request_goes_pending_then_allocated() -> None:
    h = Harness()
    te = h.add_te(slots=1)
    request = h.request()
    slot_id = SlotID(te.resource_id, 0)
    assert h.actions.allocations == [(te.instance_id, slot_id, request)]
    assert h.states(te) == [SlotState.PENDING]
    info = h.sm.allocation_of(request.allocation_id)
    assert info is not None and info.status is AllocationStatus.ALLOCATING
    assert info.slot_id == slot_id

    assert h.sm.on_allocation_result(request.allocation_id, slot_id, None)
    assert h.states(te) == [SlotState.ALLOCATED]
    info = h.sm.allocation_of(request.allocation_id)
    assert info is not None and info.status is AllocationStatus.ALLOCATED
    # a repeated answer is stale
    assert not h.sm.on_allocation_result(request.allocation_id, slot_id, None)
    h.check_counts([te])


def test_duplicate_slot_request_is_idempotent() -> None:
    h = Harness()
    h.add_te(slots=2)
    request = h.request()
    assert not h.sm.register_slot_request(request)
    assert len(h.actions.allocations) == 1
    h.sm.on_allocation_result(request.allocation_id, h.actions.last_slot(), None)
    assert not h.sm.register_slot_request(request)  # allocated already
    assert len(h.actions.allocations) == 1


def test_spread_out_balances_task_executors() -> None:
    h = Harness(spread_out=True)
    tes = [h.add_te(slots=4) for _ in range(3)]
    for _ in range(6):
        h.request()
    assert per_te(h) == {te.resource_id: 2 for te in tes}
    # deterministic tie-break: registration order
    assert [slot_id.resource_id for _, slot_id, _ in h.actions.allocations[:3]] == [
        te.resource_id for te in tes
    ]
    h.check_counts(tes)


def test_pack_mode_fills_one_task_executor_first() -> None:
    h = Harness(spread_out=False)
    tes = [h.add_te(slots=4) for _ in range(3)]
    for _ in range(6):
        h.request()
    assert per_te(h) == {tes[0].resource_id: 4, tes[1].resource_id: 2}
    h.check_counts(tes)


def test_pack_mode_refills_the_first_task_executor_after_frees() -> None:
    h = Harness(spread_out=False)
    first, second = h.add_te(slots=2), h.add_te(slots=2)
    allocated = [h.allocate() for _ in range(3)]
    request, slot_id = allocated[0]
    assert slot_id.resource_id == first.resource_id
    h.sm.free_slot(slot_id, request.allocation_id)
    h.request()
    assert h.actions.last_slot() == slot_id
    h.check_counts([first, second])


def test_duplicate_registration_reconciles_the_report() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    allocation = new_allocation_id()
    again = h.report(2, SMALL, {0: allocation})
    assert not h.sm.register_task_executor(
        te.instance_id, registration(te.resource_id, 2, SMALL), again
    )
    assert h.states(te) == [SlotState.ALLOCATED, SlotState.FREE]


def test_request_bigger_than_any_slot_waits_and_times_out() -> None:
    h = Harness()
    te = h.add_te(slots=2, profile=SMALL)
    request = h.request(BIG)
    assert h.actions.allocations == []
    assert h.sm.pending_requests() == [request]
    info = h.sm.allocation_of(request.allocation_id)
    assert info is not None and info.status is AllocationStatus.WAITING
    h.timers.advance(REQUEST_TIMEOUT)
    assert [(j, a) for j, a, _ in h.actions.failures] == [(h.job, request.allocation_id)]
    assert h.sm.number_pending_requests() == 0
    assert h.sm.allocation_of(request.allocation_id) is None
    assert h.states(te) == [SlotState.FREE] * 2


def test_smallest_fitting_slot_is_preferred() -> None:
    h = Harness()
    big_te = h.add_te(slots=1, profile=BIG)
    small_te = h.add_te(slots=1, profile=SMALL)
    h.request(SMALL)
    assert h.actions.last_slot().resource_id == small_te.resource_id
    h.request(SMALL)  # only the big slot is left; it fits
    assert h.actions.last_slot().resource_id == big_te.resource_id


# ------------------------------------------------------------------ waiting requests


def test_waiting_requests_are_served_in_request_order() -> None:
    h = Harness()
    te = h.add_te(slots=1)
    first, slot_id = h.allocate()
    second, third = h.request(), h.request()
    assert h.sm.pending_requests() == [second, third]

    assert h.sm.free_slot(slot_id, first.allocation_id)
    assert h.actions.allocations[-1][2] == second
    assert h.sm.pending_requests() == [third]
    assert h.states(te) == [SlotState.PENDING]
    h.check_counts([te])


def test_free_slot_with_wrong_allocation_is_ignored() -> None:
    h = Harness()
    te = h.add_te(slots=1)
    _, slot_id = h.allocate()
    assert not h.sm.free_slot(slot_id, new_allocation_id())
    assert h.states(te) == [SlotState.ALLOCATED]


def test_pending_timeout_message_helps_the_operator() -> None:
    h = Harness()
    h.add_te(slots=2, profile=SMALL)
    h.add_te(slots=1, profile=ResourceProfile(2.0, 2048))
    h.allocate(SMALL)
    request = h.request(BIG)
    h.timers.advance(REQUEST_TIMEOUT - 1)
    assert h.actions.failures == []
    h.timers.advance(1)
    [(job_id, allocation_id, error)] = h.actions.failures
    assert (job_id, allocation_id) == (h.job, request.allocation_id)
    assert isinstance(error, ResourceExhaustedError)
    message = str(error)
    assert request.allocation_id in message
    assert h.job in message
    assert str(BIG) in message
    assert "2 task executor(s)" in message
    assert "3 slot(s) in total" in message
    assert "2 free" in message
    assert str(ResourceProfile(2.0, 2048)) in message  # the largest free slot


def test_cancel_waiting_request() -> None:
    h = Harness()
    te = h.add_te(slots=1)
    first, slot_id = h.allocate()
    second = h.request()
    assert h.sm.unregister_slot_request(second.allocation_id)
    assert not h.sm.unregister_slot_request(second.allocation_id)
    assert h.sm.number_pending_requests() == 0
    h.timers.advance(REQUEST_TIMEOUT * 2)
    assert h.actions.failures == []
    h.sm.free_slot(slot_id, first.allocation_id)
    assert len(h.actions.allocations) == 1
    assert h.states(te) == [SlotState.FREE]


def test_cancel_in_flight_request_keeps_slot_until_reported_free() -> None:
    h = Harness()
    te = h.add_te(slots=1)
    request = h.request()
    slot_id = h.actions.last_slot()
    assert h.sm.unregister_slot_request(request.allocation_id)
    assert h.sm.allocation_of(request.allocation_id) is None
    # the task executor did allocate it: the slot is held until the TE frees it
    assert h.sm.on_allocation_result(request.allocation_id, slot_id, None)
    assert h.states(te) == [SlotState.ALLOCATED]
    assert h.sm.free_slot(slot_id, request.allocation_id)
    assert h.states(te) == [SlotState.FREE]
    assert len(h.actions.allocations) == 1


def test_cancel_in_flight_request_that_fails_frees_slot_without_retry() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    request = h.request()
    h.sm.unregister_slot_request(request.allocation_id)
    h.sm.on_allocation_result(request.allocation_id, h.actions.last_slot(), UnavailableError("x"))
    assert h.states(te) == [SlotState.FREE] * 2
    assert len(h.actions.allocations) == 1
    assert h.sm.number_pending_requests() == 0


def test_cancelling_an_allocated_request_is_refused() -> None:
    h = Harness()
    h.add_te(slots=1)
    request, _ = h.allocate()
    assert not h.sm.unregister_slot_request(request.allocation_id)


# ------------------------------------------------------------------ failed attempts


def test_refused_allocation_is_retried_on_another_slot() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    request = h.request()
    first_slot = h.actions.last_slot()
    assert h.sm.on_allocation_result(request.allocation_id, first_slot, UnavailableError("no"))
    second_slot = h.actions.last_slot()
    assert second_slot != first_slot
    assert h.actions.allocations[-1][2] == request
    assert h.sm.task_executor_slots(te.instance_id)[first_slot.slot_index].state is SlotState.FREE
    h.sm.on_allocation_result(request.allocation_id, second_slot, None)
    assert sorted(s.value for s in h.states(te)) == ["ALLOCATED", "FREE"]
    h.check_counts([te])


def test_refused_allocation_waits_again_when_no_other_slot() -> None:
    h = Harness()
    te = h.add_te(slots=1)
    request = h.request()
    slot_id = h.actions.last_slot()
    h.sm.on_allocation_result(request.allocation_id, slot_id, UnavailableError("no"))
    assert h.sm.pending_requests() == [request]
    assert h.states(te) == [SlotState.FREE]
    # not re-tried at once on the slot that just refused; the request keeps its deadline
    assert len(h.actions.allocations) == 1
    h.timers.advance(REQUEST_TIMEOUT)
    assert [a for _, a, _ in h.actions.failures] == [request.allocation_id]


def test_retried_request_keeps_its_place_in_the_queue() -> None:
    h = Harness()
    h.add_te(slots=1)
    first = h.request()
    slot_id = h.actions.last_slot()
    second = h.request()
    h.sm.on_allocation_result(first.allocation_id, slot_id, UnavailableError("no"))
    # the freed slot went to the other waiting request; the failed one is first in line again
    assert h.actions.allocations[-1][2] == second
    assert h.sm.pending_requests() == [first]
    h.sm.on_allocation_result(second.allocation_id, slot_id, None)
    third = h.request()
    h.sm.free_slot(slot_id, second.allocation_id)
    assert h.actions.allocations[-1][2] == first
    assert h.sm.pending_requests() == [third]


def test_slot_taken_by_another_allocation_becomes_allocated_unknown() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    request = h.request()
    taken = h.actions.last_slot()
    h.sm.on_allocation_result(request.allocation_id, taken, AlreadyExistsError("taken"))
    infos = h.sm.task_executor_slots(te.instance_id)
    assert infos[taken.slot_index].state is SlotState.ALLOCATED
    assert infos[taken.slot_index].allocation_id is None
    assert h.actions.last_slot() != taken
    # the next report tells the real owner
    owner = new_allocation_id()
    h.sm.report_slot_status(te.instance_id, h.report(2, SMALL, {taken.slot_index: owner}))
    info = h.sm.allocation_of(owner)
    assert info is not None and info.slot_id == taken
    h.check_counts([te])


def test_allocation_timeout_frees_slot_and_retries() -> None:
    h = Harness()
    te = h.add_te(slots=2)
    request = h.request()
    first_slot = h.actions.last_slot()
    h.timers.advance(ALLOCATION_TIMEOUT - 0.5)
    assert len(h.actions.allocations) == 1
    h.timers.advance(0.5)
    assert len(h.actions.allocations) == 2
    second_slot = h.actions.last_slot()
    assert second_slot != first_slot
    # the late answer for the first attempt is stale
    assert not h.sm.on_allocation_result(request.allocation_id, first_slot, None)
    assert h.sm.task_executor_slots(te.instance_id)[first_slot.slot_index].state is SlotState.FREE
    assert h.sm.on_allocation_result(request.allocation_id, second_slot, None)
    h.check_counts([te])


def test_allocation_timeout_error_type_when_it_must_wait() -> None:
    h = Harness()
    h.add_te(slots=1)
    request = h.request()
    h.timers.advance(ALLOCATION_TIMEOUT)
    assert h.sm.pending_requests() == [request]
    h.timers.advance(REQUEST_TIMEOUT)
    [(_, _, error)] = h.actions.failures
    assert isinstance(error, ResourceExhaustedError)
    assert not isinstance(error, DeadlineExceededError)


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
