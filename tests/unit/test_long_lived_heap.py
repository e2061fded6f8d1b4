"""LongLivedHeap: what a held structure's freezes keep out of collections, and the thaw that
frees its cycles once the last holder let go (with the real ``gc`` module: it is the thing
under test)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from sparkmill.common.runtime.heap import LongLivedHeap

pytestmark = pytest.mark.unit


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.collect()


def test_a_held_structure_is_frozen_and_its_cycles_freed_after_the_release() -> None:
    async def scenario() -> None:
        heap = LongLivedHeap(thaw_delay_s=0.01)
        garbage = _cycle()  # a cycle nobody refers to any more, frozen by the hold
        heap.hold("job-a")
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert garbage() is not None  # frozen: collections skip it
        heap.release("job-a")
        assert garbage() is not None  # not at once: the release's caller may still hold it
        await asyncio.sleep(0.05)
        assert garbage() is None
        assert heap.thaws == 1
        assert gc.get_freeze_count() > 0  # what survived is frozen again

    asyncio.run(scenario())


def test_each_release_thaws_once_and_what_is_still_held_is_frozen_again() -> None:
    async def scenario() -> None:
        heap = LongLivedHeap(thaw_delay_s=0.01)
        heap.hold("job-a")
        heap.hold("job-b")
        garbage = _cycle()
        heap.hold("job-b")  # a later slice of job b's graph
        heap.release("job-a")
        await asyncio.sleep(0.05)
        assert heap.thaws == 1 and garbage() is None  # job a's cycles go at once
        assert heap.holders == 1 and gc.get_freeze_count() > 0  # job b's graph frozen again
        heap.hold("job-c")
        heap.release("job-b")
        heap.release("job-b")  # twice, or by one that never held: nothing more
        heap.release("job-d")
        heap.release("job-c")  # within the delay: one collection for both
        await asyncio.sleep(0.05)
        assert heap.thaws == 2 and heap.holders == 0

    asyncio.run(scenario())


def test_without_a_loop_the_release_thaws_at_once_and_close_cancels_a_pending_thaw() -> None:
    heap = LongLivedHeap()
    garbage = _cycle()
    heap.hold("x")
    heap.release("x")
    assert heap.thaws == 1 and garbage() is None

    async def scenario() -> None:
        pending = LongLivedHeap(thaw_delay_s=0.01)
        pending.hold("y")
        pending.release("y")
        pending.close()
        await asyncio.sleep(0.05)
        assert pending.thaws == 0

    asyncio.run(scenario())


def test_the_startup_freeze_collects_first() -> None:
    garbage = _cycle()
    LongLivedHeap().freeze_startup()
    assert garbage() is None
    assert gc.get_freeze_count() > 0
