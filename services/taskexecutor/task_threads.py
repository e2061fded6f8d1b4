"""The threads task attempts run on, kept for the next attempt instead of one thread each.

Flink's ``Task`` starts a thread per attempt. Here starting one (and the handshake with the new
thread that ``Thread.start`` waits for on the event loop's thread) cost a short attempt more
than its work. An ended attempt's thread waits ``IDLE_TIMEOUT_S`` for the next one and then
exits; there is no bound on how many run at once (a task executor runs as many attempts as it
has slots, and an attempt blocked in pipeline code must never hold up another).

Threads are daemons, as task threads were: an attempt stuck in pipeline code does not keep the
process from exiting. Each attempt renames the thread it runs on (log lines name it).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 60.0

_Work = tuple[Callable[[], None], str]


class TaskThreads:
    def __init__(self, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self._idle_timeout_s = idle_timeout_s
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for work that nobody has handed work to yet
        self._work: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self.started = 0  # threads started so far (for tests and curiosity)

    def run(self, work: Callable[[], None], name: str) -> None:
        """Run ``work`` on a thread of its own: an idle one, or a new one."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._work.put((work, name))
                return
            self.started += 1
        threading.Thread(target=self._serve, args=((work, name),), name=name, daemon=True).start()

    def _serve(self, first: _Work) -> None:
        item: _Work | None = first
        while item is not None:
            work, name = item
            threading.current_thread().name = name
            try:
                work()
            except BaseException:  # the task reports its own failures; this is a bug
                log.exception("BUG: task thread %s raised", name)
            threading.current_thread().name = "task-idle"
            with self._lock:
                self._idle += 1
            item = self._next()

    def _next(self) -> _Work | None:
        try:
            return self._work.get(timeout=self._idle_timeout_s)
        except queue.Empty:
            pass
        with self._lock:
            # Work is only put while holding the lock, after taking an idle count: when the
            # queue is empty here, nobody counted on this thread any more.
            try:
                return self._work.get_nowait()
            except queue.Empty:
                self._idle -= 1
                return None


TASK_THREADS = TaskThreads()
"""The process's task threads (one pool per task executor process)."""
