"""Unit tests of the job master's SlotPool, with fake time and a recording actions fake."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from sparkmill.common.core.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    ResourceExhaustedError,
    UnavailableError,
)
from sparkmill.common.core.ids import (
    AllocationID,
    ResourceID,
    new_allocation_id,
    new_job_id,
    new_resource_id,
)
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.services.jobmaster.slotpool.slot_pool import (
    PhysicalSlot,
    SlotOffer,
    SlotPool,
    TaskExecutorInfo,
)

REQUEST_TIMEOUT = 300.0
IDLE_TIMEOUT = 10.0
SMALL = ResourceProfile(cpu_cores=1, memory_mb=1024)
LARGE = ResourceProfile(cpu_cores=4, memory_mb=8192)


@dataclass
class RecordingActions:
    """Records every outgoing call of the pool, in order."""

    requested: list[tuple[AllocationID, ResourceProfile]] = field(default_factory=list)
    cancelled: list[AllocationID] = field(default_factory=list)
    freed: list[tuple[ResourceID, AllocationID, str]] = field(default_factory=list)
    lost: list[tuple[PhysicalSlot, BaseException]] = field(default_factory=list)
    excluded: dict[AllocationID, frozenset[ResourceID]] = field(default_factory=dict)

    def request_slot_from_resource_manager(
        self,
        allocation_id: AllocationID,
        resource_profile: ResourceProfile,
        excluded: frozenset[ResourceID] = frozenset(),
    ) -> None:
        self.requested.append((allocation_id, resource_profile))
        self.excluded[allocation_id] = excluded

    def cancel_slot_request_at_resource_manager(self, allocation_id: AllocationID) -> None:
        self.cancelled.append(allocation_id)

    def free_slot_at_task_executor(
        self, task_executor: TaskExecutorInfo, allocation_id: AllocationID, cause: str
    ) -> None:
        self.freed.append((task_executor.resource_id, allocation_id, cause))

    def slot_lost(self, slot: PhysicalSlot, cause: BaseException) -> None:
        self.lost.append((slot, cause))


@dataclass
class Harness:
    pool: SlotPool
    timers: ManualTimerService
    actions: RecordingActions


def run(scenario: Callable[[Harness], Awaitable[None]], *, connect: bool = True) -> None:
    async def main() -> None:
        timers = ManualTimerService()
        actions = RecordingActions()
        pool = SlotPool(new_job_id(), timers, actions, REQUEST_TIMEOUT, IDLE_TIMEOUT)
        if connect:
            pool.connect_to_resource_manager()
        await scenario(Harness(pool, timers, actions))

    asyncio.run(main())


def new_te(name: str = "te") -> TaskExecutorInfo:
    return TaskExecutorInfo(new_resource_id(), f"{name}:6123")


def offer(
    index: int, profile: ResourceProfile = SMALL, aid: AllocationID | None = None
) -> SlotOffer:
    return SlotOffer(aid or new_allocation_id(), index, profile)


# ---------------------------------------------------------------------- requests and offers


def test_request_is_sent_to_connected_rm_and_exact_offer_fulfils_it() -> None:
    async def scenario(h: Harness) -> None:
        first = h.pool.request_slot(SMALL)
        second = h.pool.request_slot(SMALL)
        assert h.actions.requested == [(first.allocation_id, SMALL), (second.allocation_id, SMALL)]
        assert not first.future.done()

        te = new_te()
        # The slot the RM reserved for the *second* request goes to exactly that request.
        reserved = offer(3, aid=second.allocation_id)
        assert h.pool.offer_slots(te, [reserved]) == [reserved]

        slot = second.future.result()
        assert slot.allocation_id == second.allocation_id
        assert slot.task_executor == te
        assert slot.slot_index == 3
        assert not first.future.done()
        assert h.actions.cancelled == []
        assert h.pool.pending_requests() == [first]
        assert h.pool.allocated_slots() == [slot]
        # The request timeout of the fulfilled request is disarmed.
        h.timers.advance(REQUEST_TIMEOUT + 1)
        assert second.future.result() is slot
        assert isinstance(first.future.exception(), DeadlineExceededError)

    run(scenario)


def test_offers_for_unknown_allocations_fulfil_requests_in_request_order() -> None:
    async def scenario(h: Harness) -> None:
        requests = [h.pool.request_slot(SMALL) for _ in range(3)]
        te = new_te()
        offers = [offer(0), offer(1)]

        assert h.pool.offer_slots(te, offers) == offers

        assert requests[0].future.result().allocation_id == offers[0].allocation_id
        assert requests[1].future.result().allocation_id == offers[1].allocation_id
        assert not requests[2].future.done()
        # The fulfilled requests no longer need a slot from the RM.
        assert h.actions.cancelled == [requests[0].allocation_id, requests[1].allocation_id]
        assert h.pool.pending_requests() == [requests[2]]
        assert h.pool.num_allocated_slots() == 2

    run(scenario)


def test_unknown_offer_skips_requests_whose_profile_it_cannot_serve() -> None:
    async def scenario(h: Harness) -> None:
        large = h.pool.request_slot(LARGE)
        small = h.pool.request_slot(SMALL)
        anything = h.pool.request_slot(UNKNOWN_PROFILE)

        small_offer = offer(0, SMALL)
        assert h.pool.offer_slots(new_te(), [small_offer]) == [small_offer]
        assert not large.future.done()
        assert small.future.result().allocation_id == small_offer.allocation_id
        assert not anything.future.done()

        large_offer = offer(1, LARGE)
        assert h.pool.offer_slots(new_te(), [large_offer]) == [large_offer]
        assert large.future.result().allocation_id == large_offer.allocation_id
        assert h.pool.pending_requests() == [anything]

    run(scenario)


def test_offer_nobody_needs_is_rejected() -> None:
    async def scenario(h: Harness) -> None:
        te = new_te()
        assert h.pool.offer_slots(te, [offer(0)]) == []
        assert h.pool.available_slots() == []

        h.pool.request_slot(LARGE)
        assert h.pool.offer_slots(te, [offer(1, SMALL)]) == []
        assert h.pool.slots_of_task_executor(te.resource_id) == []

    run(scenario)


def test_reoffer_of_accepted_slot_is_idempotent() -> None:
    async def scenario(h: Harness) -> None:
        request = h.pool.request_slot(SMALL)
        te = new_te()
        accepted = offer(0, aid=request.allocation_id)
        assert h.pool.offer_slots(te, [accepted]) == [accepted]
        slot = request.future.result()

        # The TE did not see the answer and offers again, together with an unneeded slot.
        assert h.pool.offer_slots(te, [accepted, offer(1)]) == [accepted]
        assert h.pool.allocated_slots() == [slot]
        assert h.pool.num_available_slots() == 0

        # The same allocation id on another TE (or slot index) is a conflict: rejected.
        assert h.pool.offer_slots(new_te("other"), [accepted]) == []
        assert h.pool.offer_slots(te, [offer(5, aid=request.allocation_id)]) == []
        assert h.pool.slot(request.allocation_id) is slot

    run(scenario)


def test_offer_to_closed_pool_is_rejected() -> None:
    async def scenario(h: Harness) -> None:
        request = h.pool.request_slot(SMALL)
        h.pool.close(RuntimeError("job finished"))
        assert h.pool.offer_slots(new_te(), [offer(0, aid=request.allocation_id)]) == []

    run(scenario)


# ---------------------------------------------------------------------- release and reuse


def test_release_fulfils_oldest_matching_pending_request_and_cancels_it_at_rm() -> None:
    async def scenario(h: Harness) -> None:
        first = h.pool.request_slot(SMALL)
        te = new_te()
        h.pool.offer_slots(te, [offer(0, aid=first.allocation_id)])
        slot = first.future.result()

        large = h.pool.request_slot(LARGE)
        second = h.pool.request_slot(SMALL)
        third = h.pool.request_slot(SMALL)

        assert h.pool.release_slot(slot.allocation_id)

        assert second.future.result() is slot
        assert not large.future.done()
        assert not third.future.done()
        assert h.actions.cancelled == [second.allocation_id]
        assert h.pool.allocated_slots() == [slot]
        assert h.pool.pending_requests() == [large, third]
        assert h.pool.num_available_slots() == 0

    run(scenario)


def test_released_slot_becomes_available_and_serves_next_request_at_once() -> None:
    async def scenario(h: Harness) -> None:
        first = h.pool.request_slot(SMALL)
        h.pool.offer_slots(new_te(), [offer(0, aid=first.allocation_id)])
        slot = first.future.result()
        sent_before = len(h.actions.requested)

        assert h.pool.release_slot(slot.allocation_id, RuntimeError("task finished"))
        assert h.pool.available_slots() == [slot]
        assert h.pool.is_slot_available(slot.allocation_id)
        assert not h.pool.release_slot(slot.allocation_id)  # not in use any more

        again = h.pool.request_slot(UNKNOWN_PROFILE)
        assert again.future.result() is slot
        assert again.allocation_id == slot.allocation_id
        assert len(h.actions.requested) == sent_before  # the RM was not asked
        assert h.pool.num_available_slots() == 0
        # Its idle timer was disarmed by the reuse.
        h.timers.advance(IDLE_TIMEOUT * 2)
        assert h.actions.freed == []
        assert h.pool.allocated_slots() == [slot]

    run(scenario)


def test_request_prefers_exactly_matching_idle_slot() -> None:
    async def scenario(h: Harness) -> None:
        big_req = h.pool.request_slot(LARGE)
        small_req = h.pool.request_slot(SMALL)
        te = new_te()
        h.pool.offer_slots(
            te,
            [offer(0, LARGE, big_req.allocation_id), offer(1, SMALL, small_req.allocation_id)],
        )
        big = big_req.future.result()
        small = small_req.future.result()
        h.pool.release_slot(big.allocation_id)
        h.pool.release_slot(small.allocation_id)

        assert h.pool.request_slot(SMALL).future.result() is small
        assert h.pool.request_slot(SMALL).future.result() is big  # larger slot still serves

    run(scenario)


def test_idle_slot_is_freed_at_task_executor_after_timeout() -> None:
    async def scenario(h: Harness) -> None:
        request = h.pool.request_slot(SMALL)
        te = new_te()
        h.pool.offer_slots(te, [offer(0, aid=request.allocation_id)])
        slot = request.future.result()
        h.pool.release_slot(slot.allocation_id)

        h.timers.advance(IDLE_TIMEOUT - 1)
        assert h.actions.freed == []
        h.timers.advance(1)
        assert len(h.actions.freed) == 1
        resource_id, allocation_id, cause = h.actions.freed[0]
        assert (resource_id, allocation_id) == (te.resource_id, slot.allocation_id)
        assert "idle" in cause
        assert h.pool.available_slots() == []
        assert h.pool.slot(slot.allocation_id) is None

    run(scenario)


# ---------------------------------------------------------------------- timeouts and failures


def test_request_timeout_fails_future_with_descriptive_error_and_cancels_at_rm() -> None:
    async def scenario(h: Harness) -> None:
        request = h.pool.request_slot(LARGE)
        h.timers.advance(REQUEST_TIMEOUT - 1)
        assert not request.future.done()
        h.timers.advance(1)

        error = request.future.exception()
        assert isinstance(error, DeadlineExceededError)
        message = str(error)
        assert str(LARGE) in message
        assert h.pool.job_id in message
        assert "300s" in message
        assert h.actions.cancelled == [request.allocation_id]
        assert h.pool.pending_requests() == []
        # A late offer for it is now an unknown offer that nobody needs.
        assert h.pool.offer_slots(new_te(), [offer(0, LARGE, request.allocation_id)]) == []

    run(scenario)


def test_requests_made_at_different_times_each_time_out_at_their_own_deadline() -> None:
    # One timer serves all of them (the oldest's deadline, then the next oldest's).
    async def scenario(h: Harness) -> None:
        first = h.pool.request_slot(SMALL)
        h.timers.advance(10)
        second = h.pool.request_slot(SMALL)
        third = h.pool.request_slot(SMALL)
        h.timers.advance(5)
        fourth = h.pool.request_slot(SMALL)
        # The first is served: its deadline passes with nothing to fail.
        h.pool.offer_slots(new_te(), [offer(0, aid=first.allocation_id)])
        h.timers.advance(REQUEST_TIMEOUT - 15)
        assert first.future.result() is not None
        assert not second.future.done()
        h.timers.advance(10)
        assert isinstance(second.future.exception(), DeadlineExceededError)
        assert isinstance(third.future.exception(), DeadlineExceededError)
        assert not fourth.future.done()
        h.timers.advance(4)
        assert not fourth.future.done()
        h.timers.advance(1)
        assert isinstance(fourth.future.exception(), DeadlineExceededError)
        assert h.pool.pending_requests() == []
        # With nothing pending no timer is left; a new request starts one again.
        fifth = h.pool.request_slot(SMALL)
        h.timers.advance(REQUEST_TIMEOUT)
        assert isinstance(fifth.future.exception(), DeadlineExceededError)

    run(scenario)


def test_a_timed_out_request_carries_the_resource_managers_last_word() -> None:
    async def main() -> None:
        why = ["waiting for 1 slot(s): no free slot fits: 0 task executor(s) with 0 slot(s)"]
        timers = ManualTimerService()
        pool = SlotPool(
            new_job_id(),
            timers,
            RecordingActions(),
            REQUEST_TIMEOUT,
            IDLE_TIMEOUT,
            why_waiting=lambda: why[0],
        )
        pool.connect_to_resource_manager()
        request = pool.request_slot(SMALL)
        timers.advance(REQUEST_TIMEOUT)
        assert f"did not provide one ({why[0]})" in str(request.future.exception())

    asyncio.run(main())


def test_the_resource_managers_failure_of_a_need_fails_the_oldest_waiting_request() -> None:
    async def scenario(h: Harness) -> None:
        first, second = h.pool.request_slot(SMALL), h.pool.request_slot(SMALL)
        cause = ResourceExhaustedError("no slot within 300s: 0 free")
        assert h.pool.fail_oldest_request(cause) == first.allocation_id
        assert first.future.exception() is cause and not second.future.done()
        assert h.pool.fail_oldest_request(cause) == second.allocation_id
        assert h.pool.fail_oldest_request(cause) is None

    run(scenario)


def test_request_timeout_without_rm_says_so() -> None:
    async def scenario(h: Harness) -> None:
        request = h.pool.request_slot(SMALL)
        h.timers.advance(REQUEST_TIMEOUT)
        error = request.future.exception()
        assert isinstance(error, DeadlineExceededError)
        assert "no resource manager is connected" in str(error)
        assert h.actions.cancelled == []  # never sent, nothing to cancel

    run(scenario, connect=False)


def test_fail_allocation_fails_that_request_only() -> None:
    async def scenario(h: Harness) -> None:
        first = h.pool.request_slot(SMALL)
        second = h.pool.request_slot(SMALL)
        cause = ResourceExhaustedError("no task executor has room")

        assert h.pool.fail_allocation(first.allocation_id, cause)
        assert first.future.exception() is cause
        assert not second.future.done()
        assert h.pool.pending_requests() == [second]
        assert h.actions.cancelled == []  # the RM itself gave up on it
        assert not h.pool.fail_allocation(first.allocation_id, cause)

    run(scenario)


def test_cancel_request_fails_future_and_cancels_at_rm() -> None:
    async def scenario(h: Harness) -> None:
        request = h.pool.request_slot(SMALL)
        cause = RuntimeError("vertex cancelled")
        assert h.pool.cancel_request(request.allocation_id, cause)
        assert request.future.exception() is cause
        assert h.actions.cancelled == [request.allocation_id]
        assert not h.pool.cancel_request(request.allocation_id, cause)

    run(scenario)


def test_caller_cancelling_future_withdraws_request() -> None:
    async def scenario(h: Harness) -> None:
        first = h.pool.request_slot(SMALL)
        second = h.pool.request_slot(SMALL)
        first.future.cancel()
        # Even before the done-callback ran, the cancelled request is skipped.
        unknown = offer(0)
        assert h.pool.offer_slots(new_te(), [unknown]) == [unknown]
        assert second.future.result().allocation_id == unknown.allocation_id

        await asyncio.sleep(0)  # let the done-callback run
        assert h.pool.pending_requests() == []
        assert first.allocation_id in h.actions.cancelled

    run(scenario)


# ---------------------------------------------------------------------- RM connection


def test_requests_wait_for_rm_and_are_resent_after_reconnect() -> None:
    async def scenario(h: Harness) -> None:
        first = h.pool.request_slot(SMALL)
        assert h.actions.requested == []

        h.pool.connect_to_resource_manager()
        assert h.actions.requested == [(first.allocation_id, SMALL)]

        h.pool.disconnect_resource_manager()
        second = h.pool.request_slot(LARGE)
        assert len(h.actions.requested) == 1
        # Cancelling while disconnected cannot reach the RM.
        third = h.pool.request_slot(SMALL)
        h.pool.cancel_request(third.allocation_id, RuntimeError("not needed"))
        assert h.actions.cancelled == []

        h.pool.connect_to_resource_manager()
        assert h.actions.requested[1:] == [
            (first.allocation_id, SMALL),
            (second.allocation_id, LARGE),
        ]
        assert h.pool.is_connected_to_resource_manager
        # Connecting again sends nothing twice.
        h.pool.connect_to_resource_manager()
        assert len(h.actions.requested) == 3

    run(scenario, connect=False)


# ---------------------------------------------------------------------- lost slots


def test_release_task_executor_drops_its_slots_and_reports_in_use_ones_lost() -> None:
    async def scenario(h: Harness) -> None:
        gone, kept = new_te("gone"), new_te("kept")
        requests = [h.pool.request_slot(SMALL) for _ in range(3)]
        h.pool.offer_slots(
            gone,
            [offer(0, aid=requests[0].allocation_id), offer(1, aid=requests[1].allocation_id)],
        )
        h.pool.offer_slots(kept, [offer(0, aid=requests[2].allocation_id)])
        in_use = requests[0].future.result()
        idle = requests[1].future.result()
        other = requests[2].future.result()
        h.pool.release_slot(idle.allocation_id)

        cause = ConnectionError("heartbeat timed out")
        removed = h.pool.release_task_executor(gone.resource_id, cause)

        assert removed == [in_use, idle]
        assert h.actions.lost == [(in_use, cause)]
        assert h.pool.slots_of_task_executor(gone.resource_id) == []
        assert h.pool.slots_of_task_executor(kept.resource_id) == [other]
        assert h.pool.available_slots() == []
        # The idle timer of the dropped slot is gone: nothing is freed at the dead TE.
        h.timers.advance(IDLE_TIMEOUT * 2)
        assert h.actions.freed == []
        assert h.pool.release_task_executor(gone.resource_id, cause) == []

    run(scenario)


def test_fail_slot_reports_in_use_slot_lost_and_silently_drops_idle_one() -> None:
    async def scenario(h: Harness) -> None:
        te = new_te()
        a = h.pool.request_slot(SMALL)
        b = h.pool.request_slot(SMALL)
        h.pool.offer_slots(te, [offer(0, aid=a.allocation_id), offer(1, aid=b.allocation_id)])
        slot_a, slot_b = a.future.result(), b.future.result()
        h.pool.release_slot(slot_b.allocation_id)
        cause = RuntimeError("freed by the task executor")

        assert h.pool.fail_slot(slot_a.allocation_id, cause) is slot_a
        assert h.pool.fail_slot(slot_b.allocation_id, cause) is slot_b
        assert h.pool.fail_slot(slot_b.allocation_id, cause) is None
        assert h.actions.lost == [(slot_a, cause)]
        assert h.pool.slots_of_task_executor(te.resource_id) == []

    run(scenario)


# ---------------------------------------------------------------------- close


def test_close_fails_pending_frees_all_slots_and_refuses_later_requests() -> None:
    async def scenario(h: Harness) -> None:
        te = new_te()
        used = h.pool.request_slot(SMALL)
        idle = h.pool.request_slot(SMALL)
        h.pool.offer_slots(te, [offer(0, aid=used.allocation_id), offer(1, aid=idle.allocation_id)])
        h.pool.release_slot(idle.allocation_id)
        waiting = h.pool.request_slot(LARGE)

        cause = RuntimeError("job cancelled")
        h.pool.close(cause)

        error = waiting.future.exception()
        assert isinstance(error, UnavailableError)
        assert error.__cause__ is cause
        assert h.actions.cancelled == [waiting.allocation_id]
        assert sorted(aid for _, aid, _ in h.actions.freed) == sorted(
            [used.allocation_id, idle.allocation_id]
        )
        assert all("job cancelled" in reason for _, _, reason in h.actions.freed)
        assert h.actions.lost == []
        assert h.pool.allocated_slots() == []
        assert h.pool.available_slots() == []
        assert h.pool.pending_requests() == []
        assert h.pool.is_closed

        later = h.pool.request_slot(SMALL)
        assert isinstance(later.future.exception(), FailedPreconditionError)
        # Timers are disarmed and a second close does nothing.
        h.timers.advance(REQUEST_TIMEOUT * 2)
        h.pool.close(cause)
        assert len(h.actions.freed) == 2

    run(scenario)


def test_invalid_timeouts_are_rejected() -> None:
    with pytest.raises(ValueError, match="slot_request_timeout_s"):
        SlotPool(new_job_id(), ManualTimerService(), RecordingActions(), 0, IDLE_TIMEOUT)
    with pytest.raises(ValueError, match="idle_slot_timeout_s"):
        SlotPool(new_job_id(), ManualTimerService(), RecordingActions(), REQUEST_TIMEOUT, -1)
