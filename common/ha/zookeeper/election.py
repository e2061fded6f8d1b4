"""Leader election with a ZooKeeper leader latch, and leader retrieval with a data watch.

Layout under a role's path (e.g. ``<root>/leader/dispatcher``)::

    latch/n_0000000007      EPHEMERAL_SEQUENTIAL, one per contender; the lowest leads
    connection_info         EPHEMERAL, {"address": ..., "session_id": ...} of the leader
    epoch                   PERSISTENT, rewritten by every leader as it publishes itself

A contender that becomes first in the latch is granted leadership with a *fresh* leader session
id; it publishes its address with :meth:`confirm_leadership`, atomically checked against its own
latch node, so a contender that already lost the latch can never publish. The same transaction
rewrites ``epoch``: the zxid of that write (its ``mzxid``) is the leader's **epoch**. Zxids are
ZooKeeper's total order of writes across the whole ensemble, so every successor's epoch is
greater than its predecessor's whatever the hosts' clocks say, and a deposed contender cannot
obtain one at all (its transaction fails on the latch check).

Connection states. LOST: the session and its ephemeral nodes are gone, so leadership is revoked
at once and the contender contends again once reconnected. SUSPENDED: the connection dropped,
which is also what a client sees while it merely moves to another server of the ensemble (the
server it was connected to stopped). With ``tolerate-suspended-connections`` (the default) a
leader keeps leadership for a *bounded* grace, as Curator's ``ConnectionStateManager`` does when
it simulates session expiry: if the connection is back (CONNECTED, the same session) within the
grace nothing happened; otherwise leadership is revoked when the grace ends. The grace is
:attr:`ZooKeeperConnection.suspended_grace_s` (session timeout less kazoo's read timeout), so it
ends no later than the servers can have expired the session and handed the latch to a
successor: a partitioned leader stops acting before anyone else can start. Without the option,
SUSPENDED revokes at once (Flink's default). Leadership is only ever *granted* while connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from sparkmill.common.core.errors import NotLeaderError
from sparkmill.common.core.ids import new_leader_session_id, short
from sparkmill.common.core.zookeeper_state import ZooKeeperConnectionState
from sparkmill.common.ha.leader import (
    LeaderContender,
    LeaderElectionService,
    LeaderInfo,
    LeaderListener,
    LeaderRetrievalService,
)
from sparkmill.common.ha.zookeeper.connection import ZooKeeperConnection

log = logging.getLogger(__name__)


LATCH_PREFIX = "n_"
_LATCH_NODE = re.compile(LATCH_PREFIX + r"([0-9]{10})")  # kazoo's sequence: ten digits
_IGNORED: set[str] = set()


def latch_members(children: list[str]) -> list[str]:
    """The contenders' nodes among a latch's children, first in line first.

    Anything else under the latch (a node someone created by hand, or planted) is not a
    contender: it is ignored, so that it can neither stall nor crash an election.
    """
    members = []
    for child in children:
        match = _LATCH_NODE.fullmatch(child)
        if match is None:
            if child not in _IGNORED and len(_IGNORED) < 100:  # once per name, bounded
                _IGNORED.add(child)
                log.warning("leader latch: ignoring %r, not a contender's node", child[:80])
        else:
            members.append((int(match.group(1)), child))
    return [child for _, child in sorted(members)]


def parse_leader_info(data: bytes, name: str = "leader") -> LeaderInfo | None:
    """A leader's published address and session, or None (logged) when unreadable."""
    try:
        raw = json.loads(data)
        return LeaderInfo(str(raw["address"]), str(raw["session_id"]))
    except (ValueError, KeyError, TypeError):
        log.warning("%s: unreadable leader information %r", name, data[:200])
        return None


@dataclass(frozen=True, slots=True)
class _Publication:
    """A latch node created with its election, and the leader published with it (session id
    empty when nothing was published: no address was known)."""

    node: str
    session_id: str
    address: str
    epoch: int


def _leader_data(address: str, session_id: str) -> bytes:
    return json.dumps({"address": address, "session_id": session_id}).encode()


class ZooKeeperLeaderElectionService(LeaderElectionService):
    def __init__(
        self, zk: ZooKeeperConnection, path: str, *, tolerate_suspended: bool, name: str
    ) -> None:
        self.zk = zk
        self.path = path
        self.tolerate_suspended = tolerate_suspended
        self.name = name
        self._contender: LeaderContender | None = None
        self._node: str | None = None  # full path of our latch node
        self._session_id: str | None = None
        self._lock = asyncio.Lock()
        self._stopped = False
        self._tasks: set[asyncio.Task[None]] = set()
        # While a suspension is tolerated: the timer that revokes when the grace ends, and the
        # session it was tolerated for (a different session on reconnect means ours expired).
        self._grace: asyncio.TimerHandle | None = None
        self._suspended_session: int | None = None
        # Our latch node, when our first contention created the election with it
        # (_create_election): the node is then the latch's first, the epoch node exists and no
        # connection_info was ever published there. Each is used once, and only for that node.
        self._tried_creating = False
        self._first_in_new_latch: str | None = None
        self._unpublished_new_election: str | None = None
        # will_publish's address, and what the creating transaction published with it.
        self._address: str | None = None
        self._published_with_creation: _Publication | None = None

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run an election step in the background, kept referenced; a ZooKeeper error retries
        the check after a pause instead of silently leaving the contender without a watch."""

        async def guarded() -> None:
            try:
                await coro
            except KazooException as exc:
                if self._stopped:
                    return
                log.warning("%s: election step failed (%s); retrying", self.name, exc)
                await asyncio.sleep(1.0)
                self._spawn(self._contend())

        task = asyncio.get_running_loop().create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def will_publish(self, address: str) -> None:
        self._address = address

    @property
    def latch_path(self) -> str:
        return f"{self.path}/latch"

    @property
    def info_path(self) -> str:
        return f"{self.path}/connection_info"

    @property
    def epoch_path(self) -> str:
        return f"{self.path}/epoch"

    async def start(self, contender: LeaderContender) -> None:
        self._contender = contender
        self.zk.add_listener(self._on_state)
        self._spawn(self._contend())

    async def _contend(self) -> None:
        await self.zk.wait_connected(f"leader election for {self.name}")
        async with self._lock:
            if self._stopped:
                return
            client = self.zk.client
            assert client is not None
            if self._node is None and not self._tried_creating:
                self._tried_creating = True
                created = await self.zk.call(self._create_election, client)
                if created is not None:
                    self._node = self._first_in_new_latch = created.node
                    if created.session_id:
                        self._published_with_creation = created
                    else:
                        self._unpublished_new_election = created.node
            if self._node is None:
                await self._remove_leftovers_of_this_session(client)
                await self.zk.call(self.zk.ensure_path, self.latch_path)
                self._node = await self.zk.call(
                    client.create,
                    f"{self.latch_path}/{LATCH_PREFIX}",
                    b"",
                    ephemeral=True,
                    sequence=True,
                    acl=self.zk.acl(f"{self.latch_path}/{LATCH_PREFIX}"),
                )
        await self._check()

    def _create_election(self, client: Any) -> _Publication | None:
        """Blocking. Create the election (its node, ``latch`` and ``epoch``) and our latch node
        in one transaction, when it does not exist yet - every job's first JobMaster: one round
        trip instead of a walk over the ancestors, a create and a listing. Nobody can have
        contended before, so no node of this session is left behind in it, and ours is the
        latch's first: any later contender's sequence number is higher. So we lead from this
        transaction on, and with :meth:`will_publish`'s address it also publishes us under the
        session id we are then granted (as ``confirm_leadership`` would: connection_info and
        the epoch). None when the election exists already (or its parent does not, or anything
        else failed): the caller then takes the general path, which reports real errors."""
        latch_node = f"{self.latch_path}/{LATCH_PREFIX}"
        session_id = new_leader_session_id() if self._address is not None else ""
        transaction = client.transaction()
        transaction.create(self.path, b"", acl=self.zk.acl(self.path))
        transaction.create(self.latch_path, b"", acl=self.zk.acl(self.latch_path))
        transaction.create(self.epoch_path, b"", acl=self.zk.acl(self.epoch_path))
        transaction.create(
            latch_node, b"", ephemeral=True, sequence=True, acl=self.zk.acl(latch_node)
        )
        if self._address is not None:
            transaction.create(
                self.info_path,
                _leader_data(self._address, session_id),
                ephemeral=True,
                acl=self.zk.acl(self.info_path),
            )
            transaction.set_data(self.epoch_path, session_id.encode())
        results = transaction.commit()
        if any(isinstance(result, Exception) for result in results):
            return None
        epoch = int(results[-1].mzxid) if session_id else 0
        return _Publication(str(results[3]), session_id, self._address or "", epoch)

    async def _remove_leftovers_of_this_session(self, client: Any) -> None:
        """Delete latch nodes this ZooKeeper session still owns from an earlier contender of
        this process (one that stopped while disconnected could not delete its node, and a
        node that survives a short disconnection would stand before ours for good)."""
        session = client.client_id[0] if client.client_id else None
        if session is None:
            return
        try:
            children = await self.zk.call(client.get_children, self.latch_path)
        except NoNodeError:
            return
        for child in children:
            path = f"{self.latch_path}/{child}"
            try:
                _, stat = await self.zk.call(client.get, path)
                if stat.ephemeralOwner == session:
                    log.info("%s: removing %s, left behind by this session", self.name, child)
                    await self.zk.call(client.delete, path)
            except NoNodeError:
                continue

    async def _check(self) -> None:
        failed = await self._check_latch()
        if failed is None:
            return
        # A grant that failed half-way (e.g. the dispatcher's recovery lost its ZooKeeper
        # connection while reading the job graphs) must not leave the contender believing it
        # leads without having recovered or published: take it back and grant afresh.
        log.error(
            "%s: granting leadership failed (%s: %s); revoking it and contending again",
            self.name,
            type(failed).__name__,
            failed,
        )
        if self._contender is not None:
            await self._contender.revoke_leadership()
        await asyncio.sleep(1.0)
        if not self._stopped:
            self._spawn(self._contend())

    async def _check_latch(self) -> Exception | None:
        """One look at the latch; grants leadership when we are first. Returns the exception a
        grant failed with, if any (handled by the caller, outside the lock)."""
        async with self._lock:
            if self._stopped or self._node is None or not self.zk.connected:
                return None
            client = self.zk.client
            assert client is not None
            mine = self._node.rsplit("/", 1)[-1]
            if self._first_in_new_latch == self._node:
                self._first_in_new_latch = None  # we created the latch with our node in it
                children = [mine]
            else:
                try:
                    children = await self.zk.call(client.get_children, self.latch_path)
                except NoNodeError:
                    children = []
            ordered = latch_members(children)
            if mine not in ordered:
                # Our ephemeral node is gone (the session expired): contend anew.
                self._node = None
                self._spawn(self._contend())
                return None
            index = ordered.index(mine)
            if index == 0:
                if self._session_id is not None or not self._may_lead():
                    return None
                published = self._published_with_creation
                if published is None or published.node != self._node:
                    self._published_with_creation = published = None
                session_id = self._session_id = (
                    new_leader_session_id() if published is None else published.session_id
                )
                log.info("%s: leadership granted (session %s)", self.name, short(session_id))
                assert self._contender is not None
                try:
                    await self._contender.grant_leadership(session_id)
                except Exception as exc:
                    if self._session_id == session_id:
                        self._session_id = None
                        return exc
                return None
            predecessor = f"{self.latch_path}/{ordered[index - 1]}"
            exists = await self.zk.call(client.exists, predecessor, watch=self._on_predecessor)
            if exists is None:
                self._spawn(self._check())
            return None

    def _may_lead(self) -> bool:
        """Re-read after the awaits above: the connection may have been suspended meanwhile.
        A suspended contender is never granted: what it read may already be stale."""
        return self.zk.connected

    def _on_predecessor(self, event: WatchedEvent) -> None:  # kazoo thread
        if event.type == EventType.DELETED:
            self.zk.post(lambda: self._spawn(self._check()))

    def _on_state(self, state: ZooKeeperConnectionState) -> None:
        if state is ZooKeeperConnectionState.SUSPENDED:
            if self.tolerate_suspended:
                self._tolerate_suspension()
            else:
                self._spawn(self._revoke("ZooKeeper connection suspended"))
        elif state is ZooKeeperConnectionState.LOST:
            self._end_grace()
            self._node = None  # the session's ephemeral nodes are gone
            self._spawn(self._revoke("ZooKeeper session lost"))
        elif state is ZooKeeperConnectionState.CONNECTED:
            tolerated = self._grace is not None
            self._end_grace()
            if tolerated and self._suspended_session != self.zk.session_id:
                # kazoo reports LOST before a new session; if it did not, trust nothing.
                self._node = None
                self._spawn(self._revoke("the ZooKeeper session changed while suspended"))
            elif tolerated:
                log.info(
                    "%s: ZooKeeper connection back within the grace; leadership kept", self.name
                )
            self._spawn(self._contend())

    def _tolerate_suspension(self) -> None:
        if self._session_id is None or self._grace is not None:
            return  # nothing to keep (a pending grant waits for CONNECTED), or already counting
        grace = self.zk.suspended_grace_s
        self._suspended_session = self.zk.session_id
        self._grace = asyncio.get_running_loop().call_later(grace, self._on_grace_expired)
        log.warning(
            "%s: ZooKeeper connection suspended; keeping leadership for at most %.1f s "
            "(until the session could have expired)",
            self.name,
            grace,
        )

    def _on_grace_expired(self) -> None:
        self._grace = None  # has_leadership() says no from now on, before the revoke runs
        self._spawn(self._revoke("ZooKeeper connection suspended for longer than the grace"))

    def _end_grace(self) -> None:
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None

    async def _revoke(self, reason: str, level: int = logging.WARNING) -> None:
        # Under the lock: a check that is about to grant must not slip past a suspension.
        async with self._lock:
            if self._session_id is None:
                return
            log.log(level, "%s: leadership revoked: %s", self.name, reason)
            self._session_id = None
        if self._contender is not None:
            await self._contender.revoke_leadership()

    async def confirm_leadership(self, session_id: str, address: str) -> int | None:
        if session_id != self._session_id or self._node is None:
            return None
        client = self.zk.client
        assert client is not None
        data = _leader_data(address, session_id)
        node = self._node
        published, self._published_with_creation = self._published_with_creation, None
        if published is not None and published == _Publication(
            node, session_id, address, published.epoch
        ):
            # Written by the transaction that made us the leader. Losing the session since then
            # is being deposed just after confirming: the published node goes with it, and the
            # resource manager and task executors check every claim against what is published.
            log.info(
                "%s: published leader %s with the election (session %s, epoch %d)",
                self.name,
                address,
                short(session_id),
                published.epoch,
            )
            return published.epoch

        # In an election we created, the epoch node exists and no connection_info was ever
        # published: the first attempt needs neither the walk over the ancestors nor the look
        # for an old connection_info. Any failure makes the next attempt do both.
        careful = self._unpublished_new_election != node
        self._unpublished_new_election = None

        def publish() -> int | None:
            thorough = careful
            for _ in range(3):
                if thorough:
                    self.zk.ensure_path(self.epoch_path)
                transaction = client.transaction()
                transaction.check(node, 0)  # still ours: the latch node was never modified
                if thorough and client.exists(self.info_path) is not None:
                    transaction.delete(self.info_path)
                transaction.create(
                    self.info_path, data, ephemeral=True, acl=self.zk.acl(self.info_path)
                )
                transaction.set_data(self.epoch_path, session_id.encode())
                results = transaction.commit()
                if not any(isinstance(r, Exception) for r in results):
                    # The set_data's stat: its mzxid is this transaction's zxid.
                    return int(results[-1].mzxid)
                if any(isinstance(r, NoNodeError) for r in results[:1]):
                    return None  # our latch node is gone: we are not the leader any more
                thorough = True
            return None

        epoch = await self.zk.call(publish)
        if epoch is not None:
            log.info(
                "%s: published leader %s (session %s, epoch %d)",
                self.name,
                address,
                short(session_id),
                epoch,
            )
        return epoch

    def has_leadership(self, session_id: str) -> bool:
        return self._session_id == session_id and (self.zk.connected or self._grace is not None)

    def leadership_fence(self, session_id: str) -> str | None:
        # The latch node is ephemeral and never modified: it exists at version 0 exactly as long
        # as this contender's ZooKeeper session, and no successor leads before it is gone.
        node = self._node
        if not self.has_leadership(session_id) or node is None:
            raise NotLeaderError(f"{self.name}: leader session {short(session_id)} has ended")
        return node

    async def stop(self) -> None:
        self._stopped = True
        self.zk.remove_listener(self._on_state)
        self._end_grace()
        # Stopping is the owner's own decision (a job that ended, a process shutting down):
        # nothing an operator must look at, unlike losing leadership to ZooKeeper.
        await self._revoke("stopped", logging.INFO)
        node, self._node = self._node, None
        if node is not None and not await self._delete_latch_node(node):
            self._delete_once_reconnected(node)

    async def remove_election(self) -> None:
        """Delete the election's node with its latch, epoch and published leader in one
        transaction. It fails as a whole, leaving everything, when a contender's node is in the
        latch (it removes the election when it leaves) or when the nodes were made under an
        older access policy that did not let this role delete them."""
        client = self.zk.client
        if not self._stopped or client is None or not self.zk.connected:
            return
        path = self.path

        def remove() -> str | None:  # None: removed, "": gone already, else why they stay
            # One request as a rule: the published leader is usually there (a standby that
            # stands down may find it gone with its session: then once more without it).
            for with_info in (True, False):
                transaction = client.transaction()
                transaction.delete(self.latch_path)
                if with_info:
                    transaction.delete(self.info_path)
                transaction.delete(self.epoch_path)
                transaction.delete(path)
                results = transaction.commit()
                if not any(isinstance(r, Exception) for r in results):
                    return None
                if isinstance(results[0], NoNodeError):
                    return ""  # removed already
                if with_info and isinstance(results[1], NoNodeError):
                    continue
                causes = {type(r).__name__ for r in results if isinstance(r, Exception)}
                causes -= {"RolledBackError", "RuntimeInconsistency"}  # the other operations
                if "NotEmptyError" in causes:
                    return "a contender is still in its latch"
                if "NoAuthError" in causes:
                    return (
                        "ZooKeeper refused to delete them (this cluster's leader node was made "
                        "by an earlier sparkmill, whose ACL let no job master delete under it)"
                    )
                return ", ".join(sorted(causes)) or "rolled back"
            return None

        try:
            left = await self.zk.call(remove)
        except KazooException as exc:
            left = str(exc) or type(exc).__name__
        if left is None:
            log.info("%s: removed the election's nodes", self.name)
        elif left:
            log.info("%s: the election's nodes stay: %s", self.name, left)

    async def _delete_latch_node(self, node: str) -> bool:
        """Delete our latch node; False if ZooKeeper could not be reached to do it."""
        client = self.zk.client
        if client is None or not self.zk.connected:
            return False
        try:
            with contextlib.suppress(NoNodeError):
                await self.zk.call(client.delete, node)
        except KazooException as exc:
            log.info("%s: could not delete latch node %s yet: %s", self.name, node, exc)
            return False
        return True

    def _delete_once_reconnected(self, node: str) -> None:
        """A contender stopped while the connection was down (e.g. a JobMaster suspended while
        ZooKeeper had no quorum). Its session may well survive (a new ZooKeeper leader renews
        every session), and with it the latch node, which would then stand before every other
        contender of this election for as long as this process lives: delete it as soon as the
        connection is back. A LOST session took the node with it."""

        def on_state(state: ZooKeeperConnectionState) -> None:
            if state is ZooKeeperConnectionState.CONNECTED:
                self.zk.remove_listener(on_state)
                self._spawn_deletion(node)
            elif state is ZooKeeperConnectionState.LOST:
                self.zk.remove_listener(on_state)

        log.info("%s: latch node %s will be deleted once ZooKeeper is back", self.name, node)
        self.zk.add_listener(on_state)

    def _spawn_deletion(self, node: str) -> None:
        async def delete() -> None:
            if not await self._delete_latch_node(node):
                self._delete_once_reconnected(node)
            else:
                log.info("%s: deleted latch node %s left by a stopped contender", self.name, node)

        task = asyncio.get_running_loop().create_task(delete())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class ZooKeeperLeaderRetrievalService(LeaderRetrievalService):
    def __init__(self, zk: ZooKeeperConnection, path: str, name: str) -> None:
        self.zk = zk
        self.info_path = f"{path}/connection_info"
        self.name = name
        self._listener: LeaderListener | None = None
        self._current: LeaderInfo | None = None
        self._stopped = False
        self._watch_task: asyncio.Task[None] | None = None

    async def start(self, listener: LeaderListener) -> None:
        self._listener = listener
        await self.zk.ensure_started()
        self._watch_task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        await self.zk.wait_connected(f"leader retrieval of {self.name}")
        client = self.zk.client
        assert client is not None
        await self.zk.call(client.DataWatch, self.info_path, self._on_data)

    def _on_data(self, data: bytes | None, stat: Any) -> bool:  # kazoo thread
        if self._stopped:
            return False
        info = parse_leader_info(data, self.name) if data else None
        self.zk.post(lambda: self._notify(info))
        return True

    def _notify(self, info: LeaderInfo | None) -> None:
        if info == self._current or self._stopped:
            return
        self._current = info
        log.info(
            "%s leader: %s",
            self.name,
            f"{info.address} (session {short(info.session_id)})" if info else "none",
        )
        if self._listener is not None:
            result = self._listener(info)
            if result is not None:
                asyncio.get_running_loop().create_task(result)  # type: ignore[arg-type]

    async def stop(self) -> None:
        self._stopped = True
        # Still waiting for ZooKeeper (it may never come): a watch set later would be unused.
        task, self._watch_task = self._watch_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def current(self) -> LeaderInfo | None:
        return self._current
