"""Keyed one-shot timers, behind an interface so that pure logic can be tested with fake time.

The components that time things out (task slots never activated, pending slot requests, idle
task executors) take a :class:`TimerService`. In a service it is :class:`AsyncioTimerService`,
whose callbacks run on the service's event loop; in unit tests it is :class:`ManualTimerService`,
whose clock only moves when the test calls :meth:`ManualTimerService.advance`.

Scheduling a key that is already scheduled replaces the old timer: a timeout is always "the
latest one asked for", which is what re-allocating or re-requesting needs.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...


class TimerService(Clock, Protocol):
    def schedule(self, key: Hashable, delay_s: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``delay_s`` unless cancelled or rescheduled."""
        ...

    def cancel(self, key: Hashable) -> bool:
        """Cancel the timer of ``key``; ``False`` when there was none."""
        ...

    def is_scheduled(self, key: Hashable) -> bool: ...


class AsyncioTimerService:
    """Timers on the running event loop (construct it inside the loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._handles: dict[Hashable, asyncio.TimerHandle] = {}

    def now(self) -> float:
        return self._loop.time()

    def schedule(self, key: Hashable, delay_s: float, callback: Callable[[], None]) -> None:
        self.cancel(key)

        def fire() -> None:
            self._handles.pop(key, None)
            callback()

        self._handles[key] = self._loop.call_later(max(0.0, delay_s), fire)

    def cancel(self, key: Hashable) -> bool:
        handle = self._handles.pop(key, None)
        if handle is None:
            return False
        handle.cancel()
        return True

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


class ManualTimerService:
    """Deterministic timers for tests: time moves only through :meth:`advance`."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._heap: list[tuple[float, int, Hashable]] = []
        self._timers: dict[Hashable, tuple[int, Callable[[], None]]] = {}
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def schedule(self, key: Hashable, delay_s: float, callback: Callable[[], None]) -> None:
        seq = next(self._seq)
        self._timers[key] = (seq, callback)
        heapq.heappush(self._heap, (self._now + max(0.0, delay_s), seq, key))

    def cancel(self, key: Hashable) -> bool:
        return self._timers.pop(key, None) is not None

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._timers

    def advance(self, seconds: float) -> int:
        """Move the clock and fire due timers in deadline order; returns how many fired."""
        target = self._now + seconds
        fired = 0
        while self._heap and self._heap[0][0] <= target:
            deadline, seq, key = heapq.heappop(self._heap)
            current = self._timers.get(key)
            if current is None or current[0] != seq:
                continue  # cancelled or rescheduled
            del self._timers[key]
            self._now = max(self._now, deadline)
            current[1]()
            fired += 1
        self._now = target
        return fired
