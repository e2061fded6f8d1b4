"""The actor runtime every sparkmill service runs on.

One asyncio event loop owns all of a service's state; nothing else mutates it. Blocking work
(PySpark, disk, ZooKeeper) goes through :meth:`ServiceRuntime.run_blocking`, which runs it on a
thread pool and resumes the caller *on the loop* with the result, so state is only ever touched
by the loop thread.

The runtime also

* keeps track of background tasks (:meth:`spawn`) and logs any that die with an exception,
  because a silently dead heartbeat task looks exactly like a dead peer;
* measures event-loop lag (how late a short sleep wakes up): a blocked loop is a missed
  heartbeat, so the worst lag is exported as a metric and logged when it is large;
* turns SIGTERM/SIGINT into an orderly stop (what systemd sends);
* keeps the garbage collector's pauses short (:attr:`ServiceRuntime.heap`, see ``heap.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sparkmill.common.runtime.heap import LongLivedHeap

T = TypeVar("T")

log = logging.getLogger(__name__)

LAG_PROBE_INTERVAL_S = 0.1
"""How often the lag probe wakes. A stall is seen as the probe's late wake-up, so one that
starts just after a wake-up is under-reported by up to this much. Waking every 20 ms instead
was measured to cost a service about 6 ms of CPU a second (an idle local cluster of five
processes: 0.021 -> 0.053 cores), which every process of a cluster pays all the time."""
LAG_WARN_S = 1.0


class ServiceRuntime:
    def __init__(self, name: str, *, blocking_threads: int = 8) -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(
            max_workers=blocking_threads, thread_name_prefix=f"{name}-blocking"
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stop_event: asyncio.Event | None = None
        self.loop_lag_max_s = 0.0  # worst lag since the last read of take_loop_lag()
        self.loop_lag_last_s = 0.0
        self.exit_code = 0  # set by fail_fatally
        # The process's frozen generation: what the collector's full collections skip.
        self.heap = LongLivedHeap()

    # -- background tasks ---------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        task = asyncio.create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("background task %s died: %r", task.get_name(), exc, exc_info=exc)

    async def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking ``fn`` off the loop; the caller resumes on the loop with its result."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    # -- loop lag -------------------------------------------------------------------------------

    async def _measure_loop_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(LAG_PROBE_INTERVAL_S)
            lag = max(0.0, loop.time() - before - LAG_PROBE_INTERVAL_S)
            self.loop_lag_last_s = lag
            self.loop_lag_max_s = max(self.loop_lag_max_s, lag)
            if lag > LAG_WARN_S:
                log.warning("%s: event loop was blocked for %.2fs", self.name, lag)

    def take_loop_lag(self) -> float:
        """The worst lag since the previous call (for a gauge scraped periodically)."""
        worst, self.loop_lag_max_s = self.loop_lag_max_s, self.loop_lag_last_s
        return worst

    # -- lifecycle ------------------------------------------------------------------------------

    def request_stop(self) -> None:
        if self._stop_event is not None:
            self._stop_event.set()

    def fail_fatally(self, reason: str, exit_code: int = 1) -> None:
        """Stop the process with ``exit_code`` (Flink's ``onFatalError``): a supervisor such as
        systemd restarts it. The first reason wins and is what the log shows last."""
        if self.exit_code == 0:
            log.error("%s: fatal: %s; stopping with exit code %d", self.name, reason, exit_code)
            self.exit_code = exit_code
        self.request_stop()

    async def serve(
        self,
        start: Callable[[], Coroutine[Any, Any, None]],
        stop: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        """Start the service, run until SIGTERM/SIGINT or :meth:`request_stop`, then stop it."""
        self._stop_event = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        self.spawn(self._measure_loop_lag(), "loop-lag")
        try:
            await start()
            await self._stop_event.wait()
            log.info("%s: stopping", self.name)
        finally:
            try:
                async with asyncio.timeout(30):
                    await stop()
            except TimeoutError:
                log.error("%s: stop did not finish within 30s", self.name)
            await self.close()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.heap.close()
