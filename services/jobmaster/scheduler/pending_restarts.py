"""Restarts the scheduler has decided on but not carried out yet.

A restart waits first for every vertex it resets to be terminal (their attempts are being
cancelled), then for its back-off; only then are the vertices reset and scheduled again. While
one waits, its vertices are never reset by another restart, and a failure that a restart
strategy merges into it (:attr:`~sparkmill.services.jobmaster.scheduler.restart_strategy.
RestartStrategy.merges_concurrent_failures`) waits only for what is left of its back-off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionVertex


@dataclass(eq=False)
class PendingRestart:
    vertices: list[ExecutionVertex]
    backoff_s: float
    started: bool = False
    fires_at: float | None = None  # loop time, once its back-off runs


class PendingRestarts:
    def __init__(self) -> None:
        self._restarts: list[PendingRestart] = []

    def add(self, vertices: list[ExecutionVertex], backoff_s: float) -> None:
        self._restarts.append(PendingRestart(vertices, backoff_s))

    def vertex_ids(self) -> set[int]:
        """``id()`` of every vertex a pending restart will reset."""
        return {id(v) for restart in self._restarts for v in restart.vertices}

    def remaining_backoff(self) -> float | None:
        """The back-off still ahead of the latest pending restart (None: none is pending)."""
        if not self._restarts:
            return None
        now = asyncio.get_running_loop().time()
        return max(
            max(0.0, r.fires_at - now) if r.fires_at is not None else r.backoff_s
            for r in self._restarts
        )

    def start_ready(self, fire: Callable[[PendingRestart], None]) -> None:
        """Start the back-off of every restart whose vertices are all terminal now."""
        loop = asyncio.get_running_loop()
        for restart in list(self._restarts):
            if not restart.started and all(
                v.current_execution.state.is_terminal for v in restart.vertices
            ):
                restart.started = True
                restart.fires_at = loop.time() + restart.backoff_s
                loop.call_later(restart.backoff_s, fire, restart)

    def take(self, restart: PendingRestart) -> None:
        if restart in self._restarts:
            self._restarts.remove(restart)

    def clear(self) -> None:
        self._restarts.clear()


__all__ = ["PendingRestart", "PendingRestarts"]
