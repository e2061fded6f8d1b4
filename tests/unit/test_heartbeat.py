"""HeartbeatManager: failure threshold at a fixed rate, and the closed-connection probe."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sparkmill.common.core.errors import UnavailableError
from sparkmill.common.runtime.heartbeat import HeartbeatManager


class TestingTarget:
    """A heartbeat target that answers, refuses, or never answers; with a connection watch."""

    __test__ = False

    def __init__(self) -> None:
        self.mode = "answer"  # "answer" | "refuse" | "hang"
        self.calls = 0
        self.listeners: list[Callable[[bool], None]] = []

    async def heartbeat(self) -> None:
        self.calls += 1
        if self.mode == "refuse":
            raise UnavailableError("connection refused")
        if self.mode == "hang":
            await asyncio.sleep(3600)

    def watch(self, listener: Callable[[bool], None]) -> Callable[[], None]:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def connection(self, up: bool) -> None:
        for listener in list(self.listeners):
            listener(up)


def run(scenario: Callable[[HeartbeatManager, TestingTarget, list[tuple[float, str]]], object]):
    async def main() -> list[tuple[float, str]]:
        lost: list[tuple[float, str]] = []
        loop = asyncio.get_running_loop()
        began = loop.time()
        manager = HeartbeatManager(
            "test",
            interval_s=0.2,
            timeout_s=5.0,
            rpc_failure_threshold=2,
            on_timeout=lambda target, reason: lost.append((loop.time() - began, reason)),
            disconnect_probe_s=0.05,
        )
        manager.start()
        target = TestingTarget()
        manager.monitor("t", target.heartbeat, watch=target.watch)
        try:
            await scenario(manager, target, lost)  # type: ignore[misc]
        finally:
            await manager.stop()
        assert not target.listeners, "the connection watch was not stopped"
        return lost

    return asyncio.run(main())


def test_a_closed_connection_that_stays_closed_is_found_by_one_short_probe() -> None:
    async def scenario(manager, target, lost) -> None:
        await asyncio.sleep(0.5)  # a few good heartbeats
        target.mode = "hang"
        target.connection(False)
        await asyncio.sleep(0.3)

    lost = run(scenario)
    assert len(lost) == 1
    at, reason = lost[0]
    assert "connection closed" in reason
    assert 0.5 <= at < 0.5 + 0.15  # the probe's 0.05 s, not the 2 x 0.2 s threshold


def test_a_connection_that_comes_back_at_once_is_not_a_loss() -> None:
    async def scenario(manager, target, lost) -> None:
        await asyncio.sleep(0.3)
        target.connection(False)
        target.connection(True)  # ZeroMQ reconnected: a live process
        await asyncio.sleep(0.6)

    assert run(scenario) == []


def test_failed_heartbeats_reach_the_threshold_at_the_heartbeat_rate() -> None:
    async def scenario(manager, target, lost) -> None:
        await asyncio.sleep(0.3)
        target.mode = "hang"  # a frozen process: its connection stays up
        await asyncio.sleep(0.9)

    lost = run(scenario)
    assert len(lost) == 1
    at, reason = lost[0]
    assert "2 consecutive heartbeat RPCs failed" in reason
    # Two timed-out RPCs of one interval each, back to back: at most ~3 intervals after the
    # freeze (0.3 s), where a pause after each failure would need ~4.
    assert at < 0.3 + 3 * 0.2 + 0.1, at
