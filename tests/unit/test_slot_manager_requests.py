"""The SlotManager serving slot requests: matching (spread out or packed), waiting in order,
timeouts, cancellation, and retries after a refused or unanswered allocation."""

from __future__ import annotations

import pytest

from sparkmill.common.core.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    InvalidArgumentError,
    ResourceExhaustedError,
    UnavailableError,
)
from sparkmill.common.core.ids import new_allocation_id
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.core.slots import SlotID
from sparkmill.services.resourcemanager.slot_manager import (
    REFUSED_SLOT_RETRY_DELAY_S,
    AllocationStatus,
    SlotState,
)
from sparkmill.services.resourcemanager.slot_requests import SlotRequest, excluded_task_executors
from tests.unit.slot_manager_fakes import (
    ALLOCATION_TIMEOUT,
    BIG,
    REQUEST_TIMEOUT,
    SMALL,
    Harness,
    per_te,
)

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
    assert message.endswith(h.actions.more_slots_advice())  # the resource manager's advice


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


def test_refused_allocation_tries_the_same_slot_again_after_a_pause_when_no_other_slot() -> None:
    """A task executor refuses a request that overtakes the answer to its registration ("not
    registered at a resource manager"): the request must not wait out its deadline next to the
    free slot that refused it."""
    h = Harness()
    te = h.add_te(slots=1)
    request = h.request()
    slot_id = h.actions.last_slot()
    h.sm.on_allocation_result(request.allocation_id, slot_id, UnavailableError("not registered"))
    assert h.sm.pending_requests() == [request]
    assert h.states(te) == [SlotState.FREE]
    # not re-tried at once on the slot that just refused
    assert len(h.actions.allocations) == 1
    h.timers.advance(REFUSED_SLOT_RETRY_DELAY_S)
    assert len(h.actions.allocations) == 2 and h.actions.allocations[-1][1:] == (slot_id, request)
    assert h.sm.on_allocation_result(request.allocation_id, slot_id, None)
    assert h.states(te) == [SlotState.ALLOCATED] and h.sm.pending_requests() == []
    assert h.actions.failures == []


def test_a_slot_that_keeps_refusing_is_tried_at_the_pause_and_the_request_keeps_its_deadline() -> (
    None
):
    h = Harness()
    h.add_te(slots=1)
    request = h.request()
    refused = 0  # every attempt the slot manager makes is refused, each once
    while not h.actions.failures and h.timers.now() <= 2 * REQUEST_TIMEOUT:
        for _, slot_id, asked in h.actions.allocations[refused:]:
            assert asked == request
            refused += 1
            h.sm.on_allocation_result(request.allocation_id, slot_id, UnavailableError("no"))
        h.timers.advance(REFUSED_SLOT_RETRY_DELAY_S / 5)
    # one attempt per pause, no busy loop; the request still fails at its deadline
    assert 2 < refused <= REQUEST_TIMEOUT / REFUSED_SLOT_RETRY_DELAY_S + 1
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


def test_a_request_is_never_placed_on_an_excluded_task_executor() -> None:
    h = Harness(spread_out=True)
    slow, fast = h.add_te(slots=1), h.add_te(slots=4)

    def request() -> SlotRequest:
        excluded = frozenset({fast.resource_id})
        request = SlotRequest(h.job, new_allocation_id(), UNKNOWN_PROFILE, "jm", excluded=excluded)
        assert h.sm.register_slot_request(request)
        return request

    request()
    assert h.actions.allocations[-1][1].resource_id == slow.resource_id
    # Only the excluded executor has free slots: the request waits rather than take one.
    waiting = request()
    info = h.sm.allocation_of(waiting.allocation_id)
    assert info is not None and info.status is AllocationStatus.WAITING
    assert len(h.actions.allocations) == 1
    h.check_counts([slow, fast])


def test_excluded_task_executors_are_checked() -> None:
    assert excluded_task_executors(["te-1", "host.example-2"]) == {"te-1", "host.example-2"}
    with pytest.raises(InvalidArgumentError, match="not a task executor resource id"):
        excluded_task_executors(["../etc"])
    with pytest.raises(InvalidArgumentError, match="at most 1024"):
        excluded_task_executors([f"te-{i}" for i in range(1025)])
