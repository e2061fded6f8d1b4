"""Short garbage-collector pauses for a service that holds large, long-lived structures.

CPython's cyclic collector traverses every tracked object of the generations it collects. A
full (oldest-generation) collection in a JobMaster that holds the ExecutionGraph of a
10,000 x 10,000 job walks about a million objects: 100-300 ms with the event loop stopped,
repeated every time enough new objects have survived, although the graph itself is never
garbage while the job runs. ``gc.freeze()`` moves every tracked object into a permanent
generation that collections skip; what is frozen is still freed by reference counting, but
cycles among frozen objects are only found once they are thawed (``gc.unfreeze()``).

:class:`LongLivedHeap` applies that in two places:

* :meth:`freeze_startup`: what a service process allocated before it serves (modules,
  classes, its own wiring) lives as long as the process;
* :meth:`hold` / :meth:`release`: while a large structure is held (a JobMaster's graph, frozen
  slice by slice as it is built), whatever exists is frozen; when a holder releases its
  structure, one collection of the thawed heap runs a moment later (the structure's cycles are
  freed there, in one pause instead of dozens during the job), and what survives, the
  structures still held included, is frozen again.

A small job never calls :meth:`hold`: it pays nothing, and its objects are collected as usual.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

log = logging.getLogger(__name__)

THAW_DELAY_S = 1.0
"""How long after a release the heap is thawed and collected: the released structure's last
references (a stand-down task, an RPC in flight) are gone by then, and several jobs ending
together cost one collection."""


class LongLivedHeap:
    """The process's frozen generation (one per process: ``gc`` is process-wide). Loop thread
    only."""

    def __init__(self, *, thaw_delay_s: float = THAW_DELAY_S) -> None:
        self.thaw_delay_s = thaw_delay_s
        self._holders: set[object] = set()
        self._thaw: asyncio.TimerHandle | None = None
        self.thaws = 0

    @property
    def holders(self) -> int:
        return len(self._holders)

    def freeze_startup(self) -> None:
        """Collect what start-up left behind, then freeze the rest for the process's life."""
        gc.collect()
        gc.freeze()

    def hold(self, holder: object) -> None:
        """``holder`` keeps a large structure alive: freeze everything that exists now (call it
        again as the structure grows; it costs no traversal)."""
        self._holders.add(holder)
        gc.freeze()

    def release(self, holder: object) -> None:
        """``holder`` let go of its structure: the heap is thawed and collected after
        :data:`THAW_DELAY_S` (on the running loop; at once without one). Releases within
        that delay share one collection."""
        if holder not in self._holders:
            return
        self._holders.discard(holder)
        if self._thaw is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._thaw_and_collect()
            return
        self._thaw = loop.call_later(self.thaw_delay_s, self._thaw_and_collect)

    def _thaw_and_collect(self) -> None:
        self._thaw = None
        started = time.monotonic()
        gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        self.thaws += 1
        log.info(
            "heap thawed after a large structure was released: %d objects collected, %d kept "
            "frozen, %.0f ms (%d structure(s) still held)",
            collected,
            gc.get_freeze_count(),
            (time.monotonic() - started) * 1000,
            len(self._holders),
        )

    def close(self) -> None:
        if self._thaw is not None:
            self._thaw.cancel()
            self._thaw = None


__all__ = ["THAW_DELAY_S", "LongLivedHeap"]
