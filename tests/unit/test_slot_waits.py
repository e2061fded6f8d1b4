"""Unit tests: a region's batch is handed to the scheduler once every slot request is done."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence

from sparkmill.common.core.errors import DeadlineExceededError
from sparkmill.common.core.ids import AllocationID, ResourceID
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.services.jobmaster.scheduler.slot_waits import SlotOutcome, SlotWaits
from sparkmill.services.jobmaster.slotpool.slot_pool import (
    PendingSlotRequest,
    PhysicalSlot,
    TaskExecutorInfo,
)

PROFILE = ResourceProfile()


def _request() -> PendingSlotRequest:
    future: asyncio.Future[PhysicalSlot] = asyncio.get_running_loop().create_future()
    return PendingSlotRequest(AllocationID("a" * 32), PROFILE, 0.0, future)


def _slot(index: int) -> PhysicalSlot:
    te = TaskExecutorInfo(ResourceID("te"), "tcp://127.0.0.1:1")
    return PhysicalSlot(AllocationID(f"{index:032d}"), te, index, PROFILE)


class Recorder:
    def __init__(self) -> None:
        self.batches: list[tuple[list[str], list[SlotOutcome]]] = []

    def __call__(self, items: Sequence[str], outcomes: list[SlotOutcome]) -> None:
        self.batches.append((list(items), outcomes))


def in_loop(scenario: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    @functools.wraps(scenario)
    def test() -> None:
        asyncio.run(scenario())  # type: ignore[arg-type]

    return test


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@in_loop
async def test_the_batch_waits_for_every_request_and_keeps_the_order() -> None:
    ready = Recorder()
    waits: SlotWaits[str] = SlotWaits(ready)
    first, shared = _request(), _request()
    waits.wait(["a", "b", "c"], [first, shared, shared])  # b and c share one request

    shared.future.set_result(_slot(2))
    await _turns()
    assert ready.batches == []

    first.future.set_exception(DeadlineExceededError("no slot"))
    await _turns()
    [(items, outcomes)] = ready.batches
    assert items == ["a", "b", "c"]
    assert isinstance(outcomes[0], DeadlineExceededError)
    assert outcomes[1] == outcomes[2] == _slot(2)
    assert len(waits) == 0


@in_loop
async def test_a_batch_whose_slots_are_all_there_is_handed_over_in_a_later_turn() -> None:
    ready = Recorder()
    waits: SlotWaits[str] = SlotWaits(ready)
    request = _request()
    request.future.set_result(_slot(1))

    waits.wait(["a"], [request])
    assert ready.batches == []  # never from inside wait(): the caller is not done yet

    await _turns()
    assert ready.batches == [(["a"], [_slot(1)])]


@in_loop
async def test_a_withdrawn_request_is_a_cancellation_outcome() -> None:
    ready = Recorder()
    waits: SlotWaits[str] = SlotWaits(ready)
    request = _request()
    waits.wait(["a"], [request])

    request.future.cancel()
    await _turns()
    [(_, [outcome])] = ready.batches
    assert isinstance(outcome, asyncio.CancelledError)


@in_loop
async def test_close_withdraws_what_is_waited_for_and_hands_over_nothing() -> None:
    ready = Recorder()
    waits: SlotWaits[str] = SlotWaits(ready)
    requests = [_request(), _request()]
    waits.wait(["a", "b"], requests)
    requests[0].future.set_result(_slot(0))

    waits.close()
    await _turns()
    assert ready.batches == []
    assert requests[1].future.cancelled()  # the pool sees the request withdrawn
