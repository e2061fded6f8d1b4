"""One kazoo session per process, shared by every recipe of that process.

kazoo calls its listeners and watches on its own threads; nothing here blocks them: every
state change is posted to the owning event loop (``call_soon_threadsafe``) and handled there.
The session is started without waiting, so an unreachable ZooKeeper never blocks start-up:
kazoo keeps retrying, the recipes wait for :meth:`ZooKeeperConnection.wait_connected`, and a
warning says what is being waited for.

How long a suspended connection may be trusted (:attr:`ZooKeeperConnection.suspended_grace_s`):
kazoo pings every ``read timeout / 2`` and declares the connection dropped (SUSPENDED) when a
ping is not answered by the next one, i.e. about one read timeout (2/3 of the *negotiated*
session timeout, kazoo's ``ConnectionHandler._connect``) after the server last heard from it.
The server expires the session one session timeout after that, so the session certainly
exists until ``session timeout - read timeout`` after SUSPENDED; after that it may be gone
while kazoo, unable to reach any server, still says SUSPENDED (it only reports LOST once a
server tells it so).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.security import ACL

from sparkmill.common.core.errors import UnavailableError
from sparkmill.common.core.zookeeper_state import (
    ZOOKEEPER_CONNECTION_TRANSITIONS,
    ZooKeeperConnectionState,
)
from sparkmill.common.ha.zookeeper.acl import OPEN, ZooKeeperAuth, ensure_path
from sparkmill.common.runtime.metrics import ZOOKEEPER

T = TypeVar("T")
log = logging.getLogger(__name__)

# kazoo's read timeout as a fraction of the negotiated session timeout (kazoo's
# ConnectionHandler._connect: ``read_timeout = negotiated_session_timeout * 2.0 / 3.0``).
KAZOO_READ_TIMEOUT_FRACTION = 2.0 / 3.0

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
        # The server may grant a shorter (or longer) session than asked for; set on connect.
        self.negotiated_session_timeout_s: float | None = None
        # The id of the session last seen CONNECTED, kept while SUSPENDED (kazoo's client_id is
        # None while it is not connected); None after LOST.
        self.session_id: int | None = None
        self.state = ZooKeeperConnectionState.LOST  # no session yet
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[StateListener] = []
        self._connected: asyncio.Event | None = None
        self._closing = False

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def relative(self, path: str) -> str:
        """``path`` below the cluster's root ('' for the root itself and its ancestors)."""
        prefix = self.root.rstrip("/") + "/"
        return path[len(prefix) :] if path.startswith(prefix) else ""

    def acl(self, path: str) -> list[ACL]:
        """The ACL a node at ``path`` is created with (per role: by its path, docs/security.md)."""
        return self.auth.acl_for(self.relative(path))

    def ensure_path(self, path: str) -> None:
        """Blocking: ``path`` and its ancestors exist, each created with its own ACL."""
        assert self.client is not None
        ensure_path(self.client, self.root, path, self.auth)

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
            # A node created without an explicit ACL is this identity's alone; every recipe
            # passes the ACL of its path (ZooKeeperConnection.acl).
            auth_data=list(self.auth.auth_data) or None,
            default_acl=list(self.auth.default_acl),
        )
        client.add_listener(self._on_kazoo_state)
        self._record_negotiated_timeout(client)
        self.client = client
        client.start_async()
        log.info("connecting to ZooKeeper at %s (root %s)", self.quorum, self.root)

    def _record_negotiated_timeout(self, client: KazooClient) -> None:
        """Learn the session timeout the server granted: kazoo keeps it only inside its
        connection handler's ``_connect``, which returns the read timeout (2/3 of it, in ms).
        Without that hook (another kazoo) the requested timeout is used, and a warning says so."""
        handler = getattr(client, "_connection", None)
        connect = getattr(handler, "_connect", None)
        if connect is None:
            log.warning(
                "this kazoo hides the negotiated session timeout; assuming the requested %g s",
                self.session_timeout_s,
            )
            return

        def recording_connect(*args: Any, **kwargs: Any) -> Any:  # kazoo's connection thread
            result = connect(*args, **kwargs)
            read_timeout_ms = float(result[0])
            self.negotiated_session_timeout_s = (
                read_timeout_ms / 1000.0 / KAZOO_READ_TIMEOUT_FRACTION
            )
            return result

        handler._connect = recording_connect  # type: ignore[union-attr]

    @property
    def session_timeout_in_force_s(self) -> float:
        """The negotiated session timeout once connected, else the requested one."""
        negotiated = self.negotiated_session_timeout_s
        return self.session_timeout_s if negotiated is None else negotiated

    @property
    def suspended_grace_s(self) -> float:
        """How long after SUSPENDED the session certainly still exists on the servers (see the
        module's doc): the session timeout less kazoo's read timeout."""
        return self.session_timeout_in_force_s * (1.0 - KAZOO_READ_TIMEOUT_FRACTION)

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
            client_id = self.client.client_id if self.client is not None else None
            self.session_id = int(client_id[0]) if client_id else None
        elif state is ZooKeeperConnectionState.LOST:
            self.session_id = None
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
