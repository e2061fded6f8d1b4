"""Standalone leader retrieval: the leader is at a fixed address; its session id is asked for.

Without ZooKeeper the dispatcher and the resource manager are at the addresses of the
configuration, but each leads with a *random* session id (a fencing token must not be
guessable, and a restarted leader must not accept its predecessor's messages). Members learn it
with the authenticated ``GetLeaderSession`` call (only admitted keys reach it when CurveZMQ is
on), asked at once and then every few seconds, so a restarted leader's new session is noticed
(Flink's standalone retrieval needs no such call because its fencing token is fixed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from sparkmill.common.core.errors import RpcError
from sparkmill.common.ha.leader import LeaderInfo, LeaderListener, LeaderRetrievalService
from sparkmill.common.rpc.client import RpcClient
from sparkmill.common.v1 import common_pb2
from sparkmill.common.v1.gateways import DispatcherClient, ResourceManagerClient

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 2.0
FIRST_POLLS_S = 0.2  # until the first answer: a client waits for it


class RpcLeaderRetrievalService(LeaderRetrievalService):
    def __init__(
        self,
        address: str,
        role: str,
        rpc: Callable[[str], RpcClient],
        *,
        poll_interval_s: float = POLL_INTERVAL_S,
    ) -> None:
        if role not in ("dispatcher", "resource-manager"):
            raise ValueError(f"no standalone leader retrieval for {role!r}")
        self._address = address
        self._role = role
        self._rpc = rpc
        self._poll_interval_s = poll_interval_s
        self._info: LeaderInfo | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, listener: LeaderListener) -> None:
        self._task = asyncio.create_task(self._poll(listener), name=f"{self._role}-retrieval")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def current(self) -> LeaderInfo | None:
        return self._info

    async def _ask(self, timeout: float) -> str:
        rpc = self._rpc(self._address)
        request = common_pb2.GetLeaderSessionRequest()
        if self._role == "dispatcher":
            reply = await DispatcherClient(rpc).get_leader_session(request, timeout=timeout)
        else:
            reply = await ResourceManagerClient(rpc).get_leader_session(request, timeout=timeout)
        return reply.session_id

    async def _poll(self, listener: LeaderListener) -> None:
        failures = 0
        while True:
            try:
                session_id = await self._ask(timeout=max(1.0, self._poll_interval_s))
            except RpcError as exc:  # unreachable, restarting or not leading: ask again
                failures += 1
                if failures in (1, 10, 100) or failures % 1000 == 0:
                    log.warning(
                        "the %s at %s has not told its leader session yet (%d attempts; is it "
                        "running, and does it admit this process's key?): %s",
                        self._role,
                        self._address,
                        failures,
                        exc,
                    )
                session_id = ""
            if session_id and (self._info is None or self._info.session_id != session_id):
                failures = 0
                self._info = LeaderInfo(self._address, session_id)
                result = listener(self._info)
                if result is not None:
                    await result
            await asyncio.sleep(self._poll_interval_s if self._info else FIRST_POLLS_S)
