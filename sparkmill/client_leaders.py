"""The leaders a client talks to, watched for as long as the client lives (ZooKeeper HA).

A client call used to start a leader retrieval, wait for its first answer (a ZooKeeper read and
two thread hops) and stop it again; ``submit`` and ``wait`` did that three times per job, the
first on the way to the submission. With ZooKeeper a client now watches each leader it uses:
the first call starts the watch, later calls take the leader it last reported, and a change
reaches them when the watch fires (kazoo posts it to the client's loop, which runs it before
the next call's first step). A call that reaches a leader which has just lost its leadership is
refused by fencing and retried by the caller - as when the leader was read a moment before it
changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sparkmill.common.ha.leader import LeaderInfo, LeaderRetrievalService

LeaderChange = Callable[[LeaderInfo | None], None]


class WatchedLeader:
    """One role's leader as its retrieval last reported it; everything on the client's loop."""

    def __init__(self, retrieval: LeaderRetrievalService) -> None:
        self._retrieval = retrieval
        self._started = False
        self.reported = False  # the retrieval has reported at least once
        self.current: LeaderInfo | None = None
        self._changed = asyncio.Event()
        self._listeners: list[LeaderChange] = []

    async def start(self) -> None:
        if not self._started:
            self._started = True
            await self._retrieval.start(self._on_leader)

    async def leader(self) -> LeaderInfo:
        """The current leader, waiting for one while there is none (the caller bounds it)."""
        await self.start()
        while self.current is None:
            await self._changed.wait()
        return self.current

    def subscribe(self, listener: LeaderChange) -> Callable[[], None]:
        """Call ``listener`` with every change from now on; returns the unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _on_leader(self, info: LeaderInfo | None) -> None:
        self.reported = True
        self.current = info
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        for listener in list(self._listeners):
            listener(info)

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self._retrieval.stop()
