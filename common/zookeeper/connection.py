"""One kazoo session per process, shared by every recipe of that process.

kazoo calls its listeners and watches on its own threads; nothing here blocks them: every
state change is posted to the owning event loop (``call_soon_threadsafe``) and handled there.
The session is started without waiting, so an unreachable ZooKeeper never blocks start-up:
kazoo keeps retrying, the recipes wait for :meth:`ZooKeeperConnection.wait_connected`, and a
warning says what is being waited for.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient

from sparkmill.common.errors import UnavailableError
from sparkmill.common.metrics import ZOOKEEPER
from sparkmill.common.zookeeper.acl import OPEN, ZooKeeperAuth
from sparkmill.common.zookeeper.state import (
    ZOOKEEPER_CONNECTION_TRANSITIONS,
    ZooKeeperConnectionState,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

StateListener = Callable[[ZooKeeperConnectionState], None]
"""Called on the event loop with every new connection state."""


class ZooKeeperConnection:
    def __init__(
        self,
        quorum: str,
        root: str,
        *,
        session_timeout_s: float,
        connection_timeout_s: float,
        auth: ZooKeeperAuth = OPEN,
    ) -> None:
        self.quorum = quorum
        self.auth = auth
        self.root = root.rstrip("/") or "/"
        self.session_timeout_s = session_timeout_s
        self.connection_timeout_s = connection_timeout_s
        self.client: KazooClient | None = None
        self.state = ZooKeeperConnectionState.LOST  # no session yet
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[StateListener] = []
        self._connected: asyncio.Event | None = None
        self._closing = False

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    async def ensure_started(self) -> None:
        if self.client is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._connected = asyncio.Event()
        ZOOKEEPER.enable()
        client = KazooClient(
            hosts=self.quorum,
            timeout=self.session_timeout_s,
            connection_retry={"max_tries": -1, "max_delay": 2.0},
            # Every node we create is ours alone when digest authentication is configured.
            auth_data=list(self.auth.auth_data) or None,
            default_acl=list(self.auth.default_acl),
        )
        client.add_listener(self._on_kazoo_state)
        self.client = client
        client.start_async()
        log.info("connecting to ZooKeeper at %s (root %s)", self.quorum, self.root)

    def _on_kazoo_state(self, state: str) -> None:  # kazoo thread: hand over, never block
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._apply_state, str(state))

    def _apply_state(self, kazoo_state: str) -> None:
        state = ZooKeeperConnectionState(kazoo_state)
        if state is self.state:
            return
        if not ZOOKEEPER_CONNECTION_TRANSITIONS.can_transition(self.state, state):
            # kazoo is the authority on its session; follow it, but say it was unexpected.
            log.warning("ZooKeeper connection: unexpected change %s -> %s", self.state, state)
        previous, self.state = self.state, state
        ZOOKEEPER.set(state)
        connected = state is ZooKeeperConnectionState.CONNECTED
        level = logging.INFO if connected or self._closing else logging.WARNING
        log.log(level, "ZooKeeper connection %s -> %s", previous.value, state.value)
        assert self._connected is not None
        if connected:
            self._connected.set()
        else:
            self._connected.clear()
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:
                log.exception("ZooKeeper state listener failed")

    def add_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: StateListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    @property
    def connected(self) -> bool:
        return self.state is ZooKeeperConnectionState.CONNECTED

    async def wait_connected(self, what: str) -> None:
        await self.ensure_started()
        assert self._connected is not None
        waited = 0.0
        while not self._connected.is_set():
            try:
                async with asyncio.timeout(self.connection_timeout_s):
                    await self._connected.wait()
            except TimeoutError:
                waited += self.connection_timeout_s
                log.warning(
                    "%s waits for ZooKeeper at %s (unreachable for %.0fs; check "
                    "high-availability.zookeeper.quorum and that the servers run)",
                    what,
                    self.quorum,
                    waited,
                )

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking kazoo call off the loop."""
        if self.client is None:
            raise UnavailableError("ZooKeeper connection not started")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))

    def post(self, callback: Callable[[], Any]) -> None:
        """From a kazoo thread: run ``callback`` on the loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback)

    async def close(self) -> None:
        self._closing = True
        client, self.client = self.client, None
        if client is None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, client.stop)
        await loop.run_in_executor(None, client.close)
