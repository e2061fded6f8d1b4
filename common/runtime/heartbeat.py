"""Heartbeats between services (Flink's ``HeartbeatManager`` / ``HeartbeatManagerSender``).

Two roles per connection:

* the **sender** (RM → TaskExecutor, RM → JobMaster, JobMaster → TaskExecutor) calls the
  target's heartbeat RPC every ``interval``; the reply carries the payload (e.g. a slot report)
  and proves the target is alive;
* the **receiver** only notes when the last heartbeat arrived.

Both sides declare a target dead when nothing was heard for ``timeout``. The sender also
declares it dead after ``rpc_failure_threshold`` consecutive failed heartbeat RPCs, which finds
a killed process in a few intervals instead of a whole timeout (Flink's
``heartbeat.rpc-failure-threshold``). A threshold of 0 disables that fast path.

A sender can also watch the target's connection (``monitor(..., watch=...)``, fed by
:meth:`RpcClient.watch_connection <sparkmill.common.rpc.client.RpcClient.watch_connection>`). A
closed TCP connection is only a hint - the heartbeat stays the proof: the sender probes at once,
and a target whose connection is still down when that probe has had ``disconnect_probe_s`` to
answer is declared dead. A killed process is found in well under a second that way; a live one
is reconnected by ZeroMQ within ~100 ms and simply answers (a frozen one too accepts the TCP
connection, so it is left to the failure threshold and the timeout).

Heartbeats go out at a fixed rate (one ``interval`` after the previous one *started*), so a
target whose heartbeat RPCs time out is written off after ``threshold`` intervals, not twice as
many.

All of this runs on the owning service's event loop; the timeout callback is called there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sparkmill.common.core.errors import RpcError

log = logging.getLogger(__name__)

TimeoutListener = Callable[[str, str], None]
"""Called as ``listener(target_id, reason)`` when a target is considered dead."""

ConnectionWatch = Callable[[Callable[[bool], None]], Callable[[], None]]
"""``watch(listener)`` calls ``listener(False/True)`` as the target's connection goes down/up
and returns a function that stops it."""

DEFAULT_DISCONNECT_PROBE_S = 0.5


@dataclass(slots=True)
class _Target:
    last_heard: float
    sender: Callable[[], Awaitable[None]] | None
    failures: int = 0
    task: asyncio.Task[None] | None = None
    timed_out: bool = False
    connected: bool = True  # as far as the connection watch knows
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    unwatch: Callable[[], None] | None = None


class HeartbeatManager:
    def __init__(
        self,
        name: str,
        *,
        interval_s: float,
        timeout_s: float,
        rpc_failure_threshold: int,
        on_timeout: TimeoutListener,
        disconnect_probe_s: float = DEFAULT_DISCONNECT_PROBE_S,
    ) -> None:
        if timeout_s <= interval_s:
            raise ValueError("heartbeat timeout must be larger than the interval")
        self.name = name
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.rpc_failure_threshold = rpc_failure_threshold
        self.disconnect_probe_s = min(disconnect_probe_s, interval_s)
        self._on_timeout = on_timeout
        self._targets: dict[str, _Target] = {}
        self._checker: asyncio.Task[None] | None = None
        self.timeouts_total = 0

    def _loop_time(self) -> float:
        return asyncio.get_running_loop().time()

    def start(self) -> None:
        if self._checker is None:
            self._checker = asyncio.create_task(self._check_loop(), name=f"{self.name}-hb-check")

    async def stop(self) -> None:
        tasks = [t.task for t in self._targets.values() if t.task is not None]
        if self._checker is not None:
            tasks.append(self._checker)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for target in self._targets.values():
            _unwatch(target)
        self._targets.clear()
        self._checker = None

    def monitor(
        self,
        target_id: str,
        sender: Callable[[], Awaitable[None]] | None = None,
        *,
        watch: ConnectionWatch | None = None,
    ) -> None:
        """Start watching ``target_id``; with ``sender``, this side sends the heartbeats, and
        with ``watch`` too, a closed connection makes it probe the target at once."""
        self.unmonitor(target_id)
        target = _Target(last_heard=self._loop_time(), sender=sender)
        if sender is not None and watch is not None:
            target.unwatch = watch(lambda up: self._connection_changed(target, up))
        if sender is not None:
            target.task = asyncio.create_task(
                self._send_loop(target_id, target), name=f"{self.name}-hb-{target_id[:8]}"
            )
        self._targets[target_id] = target

    def unmonitor(self, target_id: str) -> None:
        target = self._targets.pop(target_id, None)
        if target is not None:
            _unwatch(target)
            if target.task is not None:
                target.task.cancel()

    def _connection_changed(self, target: _Target, up: bool) -> None:
        target.connected = up
        if not up:
            target.wake.set()  # probe now: a killed process's connection closes at once

    def receive_heartbeat(self, target_id: str) -> bool:
        """Note a heartbeat from ``target_id``; ``False`` if it is not monitored."""
        target = self._targets.get(target_id)
        if target is None:
            return False
        target.last_heard = self._loop_time()
        return True

    def last_heard(self, target_id: str) -> float | None:
        target = self._targets.get(target_id)
        return None if target is None else target.last_heard

    async def _send_loop(self, target_id: str, target: _Target) -> None:
        assert target.sender is not None
        while True:
            started = self._loop_time()
            target.wake.clear()
            probing = not target.connected
            # The RPC's own timeout is one interval: a reply slower than that is as good as
            # none, and the next heartbeat goes out on time. A probe after a closed connection
            # gets less: a live target is reconnected and answers within it.
            timeout = self.disconnect_probe_s if probing else self.interval_s
            try:
                async with asyncio.timeout(timeout):
                    await target.sender()
            except asyncio.CancelledError:
                raise
            except (RpcError, TimeoutError) as exc:
                target.failures += 1
                log.debug(
                    "%s: heartbeat to %s failed (%d): %s",
                    self.name,
                    target_id[:8],
                    target.failures,
                    exc,
                )
                if probing and not target.connected:
                    self._expire(
                        target_id,
                        f"its connection closed and it did not answer within {timeout:g}s "
                        f"(last: {type(exc).__name__}: {exc})",
                    )
                    return
                threshold = self.rpc_failure_threshold
                if threshold and target.failures >= threshold:
                    self._expire(
                        target_id,
                        f"{target.failures} consecutive heartbeat RPCs failed"
                        f" (last: {type(exc).__name__}: {exc})",
                    )
                    return
            except Exception:
                log.exception("%s: heartbeat sender for %s crashed", self.name, target_id[:8])
                target.failures += 1
            else:
                target.failures = 0
                target.last_heard = self._loop_time()
            delay = started + self.interval_s - self._loop_time()
            if delay > 0 and not target.wake.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await target.wake.wait()

    async def _check_loop(self) -> None:
        period = min(self.interval_s, max(0.05, self.timeout_s / 10))
        while True:
            await asyncio.sleep(period)
            now = self._loop_time()
            for target_id, target in list(self._targets.items()):
                silent = now - target.last_heard
                if silent > self.timeout_s:
                    self._expire(
                        target_id,
                        f"no heartbeat for {silent:.1f}s "
                        f"(heartbeat.timeout is {self.timeout_s:g}s)",
                    )

    def _expire(self, target_id: str, reason: str) -> None:
        target = self._targets.pop(target_id, None)
        if target is None or target.timed_out:
            return
        target.timed_out = True
        _unwatch(target)
        if target.task is not None and target.task is not asyncio.current_task():
            target.task.cancel()
        self.timeouts_total += 1
        log.warning("%s: heartbeat target %s timed out: %s", self.name, target_id[:8], reason)
        try:
            self._on_timeout(target_id, reason)
        except Exception:
            log.exception("%s: heartbeat timeout listener failed", self.name)


def _unwatch(target: _Target) -> None:
    if target.unwatch is not None:
        target.unwatch()
        target.unwatch = None
