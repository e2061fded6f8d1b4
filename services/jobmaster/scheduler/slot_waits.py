"""Waiting for the slots of a region without an asyncio task per region.

A region is deployed once every one of its slot requests is served. Waiting for that with a
task per region (``gather`` over the requests' futures) cost two tasks and a handful of loop
callbacks per subtask, and deployments that a batch of finished subtasks made possible went out
in different turns of the event loop, one ``SubmitTasks`` each. Here each request's future gets
a done callback instead; the last one to complete hands the whole batch to the scheduler. Slots
freed within one turn therefore deploy their next subtasks within one turn, which the task
submission batcher sends as one ``SubmitTasks`` per task executor: deployment in waves.

Never synchronous: even a batch whose slots were all available at once is handed over in a
later turn, so the caller's own bookkeeping is complete before any deployment (or failure of
one) changes the graph, as it was with a task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial
from typing import Generic, TypeVar

from sparkmill.services.jobmaster.slotpool.slot_pool import PendingSlotRequest, PhysicalSlot

T = TypeVar("T")
SlotOutcome = PhysicalSlot | BaseException


class _Wait(Generic[T]):
    __slots__ = ("futures", "items", "remaining")

    def __init__(self, items: Sequence[T], futures: list[asyncio.Future[PhysicalSlot]]) -> None:
        self.items = items
        self.futures = futures
        self.remaining = 0


def outcome_of(future: asyncio.Future[PhysicalSlot]) -> SlotOutcome:
    """The slot a done request future granted, or why it did not (a withdrawn request's
    :class:`asyncio.CancelledError` included, as ``gather(return_exceptions=True)`` gave it)."""
    if future.cancelled():
        return asyncio.CancelledError()
    error = future.exception()
    return error if error is not None else future.result()


class SlotWaits(Generic[T]):
    """Batches waiting for their slot requests; ``ready(items, outcomes)`` gets each batch once
    every request is done, with one outcome per item in order."""

    def __init__(self, ready: Callable[[Sequence[T], list[SlotOutcome]], None]) -> None:
        self._ready = ready
        self._waiting: set[_Wait[T]] = set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._waiting)

    def wait(self, items: Sequence[T], requests: Sequence[PendingSlotRequest]) -> None:
        wait = _Wait(items, [request.future for request in requests])
        self._waiting.add(wait)
        # Members of one slot sharing group share a request: count each future once.
        distinct = {id(f): f for f in wait.futures}
        wait.remaining = len(distinct)
        if not distinct:
            wait.remaining = 1
            asyncio.get_running_loop().call_soon(self._one_done, wait, None)
        for future in distinct.values():
            future.add_done_callback(partial(self._one_done, wait))

    def _one_done(self, wait: _Wait[T], _: asyncio.Future[PhysicalSlot] | None) -> None:
        wait.remaining -= 1
        if wait.remaining or wait not in self._waiting:
            return
        self._waiting.discard(wait)
        if not self._closed:
            self._ready(wait.items, [outcome_of(f) for f in wait.futures])

    def close(self) -> None:
        """Withdraw every request still waited for; no batch is handed over any more."""
        self._closed = True
        waiting, self._waiting = self._waiting, set()
        for wait in waiting:
            for future in wait.futures:
                future.cancel()
