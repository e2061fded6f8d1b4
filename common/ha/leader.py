"""Leader election and leader retrieval, behind one interface (Flink's HA services).

A *contender* (the dispatcher, the resource manager, a job's JobMaster) takes part in an
election; when granted leadership it receives a fresh **leader session id**, which is the fencing
token of every RPC it serves, and it publishes its address with that id (``confirm``). Clients,
task executors and job masters *retrieve* the current leader (address + session id) and are told
when it changes.

This module has the interfaces and the standalone *election* used with
``high-availability.mode: none``: the leader is whoever is configured at a static address, with
a random session id per leader (a fixed one would be a fencing token anyone could know, and a
restarted leader would obey its predecessor's callers). Members learn that id through the
authenticated ``GetLeaderSession`` call (:mod:`sparkmill.common.ha.standalone`). The ZooKeeper form
implements the same interfaces with kazoo.
"""

from __future__ import annotations

import abc
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from sparkmill.common.core.errors import NotLeaderError
from sparkmill.common.core.ids import short

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    address: str
    session_id: str


class LeaderContender(Protocol):
    async def grant_leadership(self, session_id: str) -> None:
        """Become leader with ``session_id``; call ``confirm_leadership`` once serving."""
        ...

    async def revoke_leadership(self) -> None:
        """Stop acting as leader now: refuse fenced requests, stop scheduling."""
        ...


LeaderListener = Callable[[LeaderInfo | None], Awaitable[None] | None]
"""Called on the service's loop with the new leader, or ``None`` while there is none."""


class LeaderElectionService(abc.ABC):
    @abc.abstractmethod
    async def start(self, contender: LeaderContender) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @abc.abstractmethod
    async def confirm_leadership(self, session_id: str, address: str) -> int | None:
        """Publish ``address`` as the leader's for ``session_id``; returns this leader's
        **epoch**, or ``None`` when ``session_id`` is stale (nothing is published then).

        Epochs are strictly increasing across the successive leaders of one election and come
        from the coordination service, never from a clock: a successor whose host's clock is
        behind still gets a greater epoch. The JobMaster orders sink commits and its progress
        log by it."""

    @abc.abstractmethod
    def has_leadership(self, session_id: str) -> bool: ...

    def will_publish(self, address: str) -> None:  # noqa: B027 - optional, a no-op by default
        """Before ``start``: the address this contender will confirm once granted. A service
        may then publish it with the creation of an election this contender is the first
        ever to enter (the ZooKeeper form: in the same transaction), so that the contender's
        ``confirm_leadership`` with this address needs no further write."""

    async def remove_election(self) -> None:  # noqa: B027 - optional, a no-op by default
        """After :meth:`stop`, for an election nobody will enter again (a job whose outcome is
        recorded): delete what the coordination service keeps of it, unless another contender
        is still in it (the last to leave removes it then). Never raises: what is left behind
        is only clutter, logged (Flink's ``HighAvailabilityServices.globalCleanupAsync``
        removes a finished job's leader nodes the same way)."""

    def leadership_fence(self, session_id: str) -> str | None:
        """What a write to the coordination service checks to succeed only under this
        leadership (the ZooKeeper form: the path of the leader's latch node), or ``None`` when
        there is nothing to check (no coordination service).

        A leader's process can go on serving for a moment after its session expired (it was
        paused, or its host partitioned) while a successor already recovered the shared state:
        a write it makes then must fail, or the successor never sees it. Raises
        :class:`~sparkmill.common.core.errors.NotLeaderError` when ``session_id`` is no longer
        this contender's leadership.
        """
        if not self.has_leadership(session_id):
            raise NotLeaderError(f"leader session {short(session_id)} is no longer the leader's")
        return None


class LeaderRetrievalService(abc.ABC):
    @abc.abstractmethod
    async def start(self, listener: LeaderListener) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @abc.abstractmethod
    def current(self) -> LeaderInfo | None: ...


_STANDALONE_EPOCHS = itertools.count(1)


class StandaloneLeaderElectionService(LeaderElectionService):
    """Leadership is granted at once and never revoked (there is nobody to compete with)."""

    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        self._contender: LeaderContender | None = None
        self.confirmed_address: str | None = None

    async def start(self, contender: LeaderContender) -> None:
        self._contender = contender
        await contender.grant_leadership(self._session_id)

    async def stop(self) -> None:
        if self._contender is not None:
            contender, self._contender = self._contender, None
            await contender.revoke_leadership()

    async def confirm_leadership(self, session_id: str, address: str) -> int | None:
        if session_id != self._session_id:
            return None
        self.confirmed_address = address
        # Nobody takes a job over without HA, so an order within this process is enough.
        return next(_STANDALONE_EPOCHS)

    def has_leadership(self, session_id: str) -> bool:
        return self._contender is not None and session_id == self._session_id
