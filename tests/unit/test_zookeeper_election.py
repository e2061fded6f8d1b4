"""The ZooKeeper leader latch: a leader's bounded tolerance of a suspended connection, a
contender stopped while disconnected, a grant that fails half-way, and the first contender of a
new election (every job's first JobMaster), which creates it in one transaction.

The election runs on a hand-written fake connection (its latch lives in a dict) whose state the
test drives the way kazoo would: SUSPENDED while the client moves to another server, CONNECTED
when it is back with the same session, LOST when the session expired.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from kazoo.exceptions import (
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)

from sparkmill.common.core.zookeeper_state import ZooKeeperConnectionState
from sparkmill.common.ha.zookeeper.connection import (
    KAZOO_READ_TIMEOUT_FRACTION,
    ZooKeeperConnection,
)
from sparkmill.common.ha.zookeeper.election import ZooKeeperLeaderElectionService, latch_members

Z = ZooKeeperConnectionState
T = TypeVar("T")
GRACE_S = 0.2


@dataclass
class _Stat:
    ephemeralOwner: int  # kazoo's ZnodeStat field names
    mzxid: int = 0


class TestingTransaction:
    """kazoo's transaction for the calls the latch makes: creates, checks, set_data; applied
    whole or not at all, as ZooKeeper's multi-operation is."""

    __test__ = False

    def __init__(self, client: TestingKazooClient) -> None:
        self.client = client
        self.ops: list[tuple[str, str, dict[str, Any]]] = []

    def create(self, path: str, value: bytes = b"", **flags: Any) -> None:
        self.ops.append(("create", path, flags))

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", path, {}))

    def delete(self, path: str) -> None:
        self.ops.append(("delete", path, {}))

    def set_data(self, path: str, value: bytes) -> None:
        self.ops.append(("set_data", path, {}))

    def commit(self) -> list[Any]:
        client = self.client
        client.transactions.append([(kind, path) for kind, path, _ in self.ops])
        structure, nodes = set(client.structure), dict(client.nodes)
        results: list[Any] = []
        for kind, path, flags in self.ops:
            # A node a test put into a latch implies the latch and its election.
            exists = path in structure or any(n == path or n.startswith(f"{path}/") for n in nodes)
            if kind == "create" and flags.get("sequence"):
                node = f"{path}{next(client._sequence):010d}"
                nodes[node] = client.session
                results.append(node)
            elif kind == "create" and exists:
                return [NodeExistsError()] + [RolledBackError()] * (len(self.ops) - 1)
            elif kind == "create":
                structure.add(path)
                results.append(path)
            elif kind == "delete":
                structure.discard(path)
                nodes.pop(path, None)
                results.append(True)
            elif not exists:
                return [NoNodeError()] + [RolledBackError()] * (len(self.ops) - 1)
            else:
                results.append(_Stat(0, mzxid=len(client.transactions)))
        client.structure, client.nodes = structure, nodes
        return results


class TestingKazooClient:
    """The few kazoo calls the latch makes, on nodes kept in a dict."""

    __test__ = False

    def __init__(self) -> None:
        self.nodes: dict[str, int] = {}  # path -> owning session
        # Nodes without an owner: elections, their latch, epoch and connection_info.
        self.structure: set[str] = set()
        self.session = 1
        self._sequence = itertools.count()
        self.transactions: list[list[tuple[str, str]]] = []
        self.listings = 0  # get_children calls

    def transaction(self) -> TestingTransaction:
        return TestingTransaction(self)

    @property
    def client_id(self) -> tuple[int, bytes]:
        return (self.session, b"")

    def create(self, path: str, value: bytes, **flags: Any) -> str:
        assert flags.get("sequence") and flags.get("ephemeral")
        node = f"{path}{next(self._sequence):010d}"
        self.nodes[node] = self.session
        return node

    def _children(self, parent: str) -> list[str]:
        return [p.rsplit("/", 1)[-1] for p in self.nodes if p.rsplit("/", 1)[0] == parent]

    def get_children(self, parent: str) -> list[str]:
        self.listings += 1
        return self._children(parent)

    def get(self, path: str) -> tuple[bytes, _Stat]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return b"", _Stat(self.nodes[path])

    def exists(self, path: str, watch: Callable[..., None] | None = None) -> _Stat | None:
        if path in self.structure:
            return _Stat(0)
        return _Stat(self.nodes[path]) if path in self.nodes else None

    def delete(self, path: str) -> None:
        self.nodes.pop(path, None)

    def expire(self, session: int) -> None:
        """The servers expire ``session``: its ephemeral nodes go."""
        self.nodes = {p: s for p, s in self.nodes.items() if s != session}


class TestingZooKeeperConnection(ZooKeeperConnection):
    """Connected at once; kazoo's calls run inline; the test drives the state."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__(
            "fake:2181", "/test", session_timeout_s=3 * GRACE_S, connection_timeout_s=1
        )
        self.kazoo = TestingKazooClient()
        self.client = self.kazoo
        self.state = Z.CONNECTED
        self.session_id = self.kazoo.session

    async def ensure_started(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._connected is None:
            self._connected = asyncio.Event()
            self._connected.set()

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(*args, **kwargs)

    def ensure_path(self, path: str) -> None:
        """The fake keeps latch children only: their parents need not exist."""

    def drive(self, state: ZooKeeperConnectionState) -> None:
        self._apply_state(state.value)


class Contender:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.granted = asyncio.Event()

    async def grant_leadership(self, session_id: str) -> None:
        self.events.append("granted")
        self.granted.set()

    async def revoke_leadership(self) -> None:
        self.events.append("revoked")


async def _leader(
    *, tolerate: bool = True
) -> tuple[TestingZooKeeperConnection, ZooKeeperLeaderElectionService, Contender, str]:
    zk = TestingZooKeeperConnection()
    await zk.ensure_started()
    election = ZooKeeperLeaderElectionService(
        zk, "/test/leader/role", tolerate_suspended=tolerate, name="role"
    )
    contender = Contender()
    await election.start(contender)
    await asyncio.wait_for(contender.granted.wait(), 5)
    session = election._session_id
    assert session is not None and election.has_leadership(session)
    return zk, election, contender, session


async def _job_election(
    publish: str = "",
) -> tuple[TestingZooKeeperConnection, ZooKeeperLeaderElectionService, Contender]:
    """A new job's election with one contender, started and granted (``publish``: the address
    announced with it, as a job's first JobMaster does)."""
    zk = TestingZooKeeperConnection()
    await zk.ensure_started()
    election = ZooKeeperLeaderElectionService(zk, ELECTION, tolerate_suspended=True, name="job")
    if publish:
        election.will_publish(publish)
    contender = Contender()
    await election.start(contender)
    await asyncio.wait_for(contender.granted.wait(), 5)
    return zk, election, contender


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_the_grace_is_the_session_timeout_less_kazoos_read_timeout() -> None:
    zk = ZooKeeperConnection("x:1", "/x", session_timeout_s=6.0, connection_timeout_s=1)
    assert zk.suspended_grace_s == 6.0 * (1 - KAZOO_READ_TIMEOUT_FRACTION)
    zk.negotiated_session_timeout_s = 3.0  # the server granted less than asked: that counts
    assert abs(zk.suspended_grace_s - 1.0) < 1e-9


def test_suspended_for_longer_than_the_grace_revokes_when_it_ends() -> None:
    async def scenario() -> None:
        zk, election, contender, session = await _leader()
        zk.drive(Z.SUSPENDED)
        await asyncio.sleep(GRACE_S / 2)
        assert election.has_leadership(session) and contender.events == ["granted"]
        await asyncio.sleep(GRACE_S / 2 + 0.1)
        await _settle()
        assert contender.events == ["granted", "revoked"]
        assert not election.has_leadership(session)
        # Back with the same session: its latch node is still first, so it leads anew.
        contender.granted.clear()
        zk.drive(Z.CONNECTED)
        await asyncio.wait_for(contender.granted.wait(), 5)
        assert election._session_id not in (None, session)
        await election.stop()

    asyncio.run(scenario())


def test_reconnected_within_the_grace_keeps_leadership() -> None:
    async def scenario() -> None:
        zk, election, contender, session = await _leader()
        zk.drive(Z.SUSPENDED)
        await asyncio.sleep(GRACE_S / 2)
        zk.drive(Z.CONNECTED)  # the client found another server: same session
        await asyncio.sleep(2 * GRACE_S)
        await _settle()
        assert contender.events == ["granted"]
        assert election.has_leadership(session)
        await election.stop()

    asyncio.run(scenario())


def test_lost_revokes_at_once_even_within_the_grace() -> None:
    async def scenario() -> None:
        zk, election, contender, session = await _leader()
        zk.drive(Z.SUSPENDED)
        zk.kazoo.expire(zk.kazoo.session)
        zk.drive(Z.LOST)
        assert not election.has_leadership(session)
        await _settle()
        assert contender.events == ["granted", "revoked"]
        await asyncio.sleep(2 * GRACE_S)  # the cancelled grace revokes nothing more
        assert contender.events == ["granted", "revoked"]
        await election.stop()

    asyncio.run(scenario())


def test_a_new_session_on_reconnect_is_not_taken_for_the_old_one() -> None:
    async def scenario() -> None:
        zk, election, contender, session = await _leader()
        zk.drive(Z.SUSPENDED)
        zk.kazoo.expire(zk.kazoo.session)
        zk.kazoo.session = 2  # kazoo said CONNECTED without LOST first: trust nothing
        zk.drive(Z.CONNECTED)
        await _settle()
        assert contender.events[:2] == ["granted", "revoked"]
        assert not election.has_leadership(session)
        await election.stop()

    asyncio.run(scenario())


def test_without_tolerance_suspended_revokes_at_once() -> None:
    async def scenario() -> None:
        zk, election, contender, session = await _leader(tolerate=False)
        zk.drive(Z.SUSPENDED)
        assert not election.has_leadership(session)
        await _settle()
        assert contender.events == ["granted", "revoked"]
        await election.stop()

    asyncio.run(scenario())


def test_a_suspended_contender_is_not_granted() -> None:
    async def scenario() -> None:
        zk = TestingZooKeeperConnection()
        await zk.ensure_started()
        zk.kazoo.nodes["/test/leader/role/latch/n_0000000099"] = 7  # another leads for now
        zk.kazoo._sequence = itertools.count(100)
        election = ZooKeeperLeaderElectionService(
            zk, "/test/leader/role", tolerate_suspended=True, name="role"
        )
        contender = Contender()
        await election.start(contender)
        await _settle()
        zk.drive(Z.SUSPENDED)
        zk.kazoo.expire(7)  # the leader's node goes while we cannot see it
        await election._check()
        assert contender.events == []
        zk.drive(Z.CONNECTED)
        await asyncio.wait_for(contender.granted.wait(), 5)
        await election.stop()

    asyncio.run(scenario())


def test_a_contender_stopped_while_suspended_deletes_its_latch_node_once_reconnected() -> None:
    # Else the node (its session survives a quorum loss) would stand before every successor.
    async def scenario() -> None:
        zk, election, contender, _session = await _leader()
        zk.drive(Z.SUSPENDED)
        await election.stop()
        assert contender.events == ["granted", "revoked"]
        assert len(zk.kazoo.nodes) == 1, "nothing can be deleted while suspended"
        zk.drive(Z.CONNECTED)
        await _settle()
        assert zk.kazoo.nodes == {}

    asyncio.run(scenario())


class FailingOnceContender(Contender):
    """Its first grant fails, as a dispatcher's recovery does when its store read loses the
    connection."""

    async def grant_leadership(self, session_id: str) -> None:
        if "failed" not in self.events:
            self.events.append("failed")
            raise ConnectionError("the job graph store could not be read")
        await super().grant_leadership(session_id)


def test_a_grant_that_fails_is_revoked_and_granted_again() -> None:
    async def scenario() -> None:
        zk = TestingZooKeeperConnection()
        await zk.ensure_started()
        election = ZooKeeperLeaderElectionService(
            zk, "/test/leader/role", tolerate_suspended=True, name="role"
        )
        contender = FailingOnceContender()
        await election.start(contender)
        await asyncio.wait_for(contender.granted.wait(), 5)
        assert contender.events == ["failed", "revoked", "granted"]
        assert election._session_id is not None
        assert election.has_leadership(election._session_id)
        await election.stop()

    asyncio.run(scenario())


def test_foreign_children_under_the_latch_neither_crash_nor_stall_the_election() -> None:
    async def scenario() -> list[str]:
        zk = TestingZooKeeperConnection()
        await zk.ensure_started()
        latch = "/test/leader/job-x/latch"
        for planted in ("poison", "n_", "n_12", "n_abcdefghij", "x_0000000000"):
            zk.kazoo.nodes[f"{latch}/{planted}"] = 99  # someone else's session
        election = ZooKeeperLeaderElectionService(
            zk, "/test/leader/job-x", tolerate_suspended=True, name="job-x"
        )
        contender = Contender()
        await election.start(contender)
        await asyncio.wait_for(contender.granted.wait(), 5)
        await election.stop()
        return contender.events

    assert asyncio.run(scenario())[0] == "granted"


def test_latch_members_are_the_contenders_nodes_in_sequence_order() -> None:
    children = ["n_0000000010", "poison", "n_0000000002", "n_0000000100"]
    assert latch_members(children) == ["n_0000000002", "n_0000000010", "n_0000000100"]


ELECTION = "/test/leader/job-1"


def test_the_first_contender_creates_the_election_in_one_transaction_and_leads() -> None:
    async def scenario() -> None:
        zk, election, _contender = await _job_election()
        kazoo = zk.kazoo
        assert kazoo.transactions == [
            [
                ("create", ELECTION),
                ("create", f"{ELECTION}/latch"),
                ("create", f"{ELECTION}/epoch"),
                ("create", f"{ELECTION}/latch/n_"),
            ]
        ]
        assert kazoo.listings == 0  # its node is the new latch's only one: no listing
        session = election._session_id
        assert session is not None
        epoch = await election.confirm_leadership(session, "tcp://127.0.0.1:1")
        assert epoch == 2
        # No walk over the ancestors, no look for an old connection_info: nothing to delete.
        assert kazoo.transactions[-1] == [
            ("check", election._node or ""),
            ("create", f"{ELECTION}/connection_info"),
            ("set_data", f"{ELECTION}/epoch"),
        ]
        await election.stop()

    asyncio.run(scenario())


def test_a_contender_of_an_existing_election_lists_the_latch_and_replaces_the_old_info() -> None:
    async def scenario() -> None:
        zk = TestingZooKeeperConnection()
        await zk.ensure_started()
        first = ZooKeeperLeaderElectionService(zk, ELECTION, tolerate_suspended=True, name="a")
        leader = Contender()
        await first.start(leader)
        await asyncio.wait_for(leader.granted.wait(), 5)
        leader_session = first._session_id
        assert leader_session is not None
        assert await first.confirm_leadership(leader_session, "tcp://127.0.0.1:1") is not None

        zk.kazoo.session = 2  # as if another process: none of the first's nodes is its own
        second = ZooKeeperLeaderElectionService(zk, ELECTION, tolerate_suspended=True, name="b")
        standby = Contender()
        await second.start(standby)
        await _settle()
        assert standby.events == []  # the election existed: it waits behind the leader
        assert zk.kazoo.listings >= 1
        await first.stop()
        await second._check()  # what its watch on the deleted predecessor does (no watches here)
        await asyncio.wait_for(standby.granted.wait(), 5)
        session = second._session_id
        assert session is not None
        assert await second.confirm_leadership(session, "tcp://127.0.0.1:2") is not None
        # The first leader's connection_info is still there (ephemeral, its session lives):
        # a successor looks for it and replaces it in its transaction.
        assert ("delete", f"{ELECTION}/connection_info") in zk.kazoo.transactions[-1]
        await second.stop()

    asyncio.run(scenario())


def test_after_losing_its_session_the_creator_of_an_election_lists_the_latch_again() -> None:
    async def scenario() -> None:
        zk, election, contender = await _job_election()
        contender.granted.clear()
        zk.kazoo.nodes[f"{ELECTION}/latch/n_0000000000"] = 9  # planted: sorts first
        zk.drive(Z.LOST)
        zk.kazoo.expire(1)
        zk.kazoo.session = 2
        zk.session_id = 2
        zk.drive(Z.CONNECTED)
        await _settle()
        # Its new node is not the latch's first: it lists the latch and does not lead.
        assert zk.kazoo.listings >= 1
        assert contender.events == ["granted", "revoked"]
        await election.stop()

    asyncio.run(scenario())


def test_the_first_contender_is_published_by_the_transaction_creating_the_election() -> None:
    async def scenario() -> None:
        zk, election, _contender = await _job_election(publish="tcp://127.0.0.1:1")
        kazoo = zk.kazoo
        assert kazoo.transactions == [
            [
                ("create", ELECTION),
                ("create", f"{ELECTION}/latch"),
                ("create", f"{ELECTION}/epoch"),
                ("create", f"{ELECTION}/latch/n_"),
                ("create", f"{ELECTION}/connection_info"),
                ("set_data", f"{ELECTION}/epoch"),
            ]
        ]
        session = election._session_id
        assert session is not None
        # Confirming what was published costs nothing more; the epoch is that transaction's.
        assert await election.confirm_leadership(session, "tcp://127.0.0.1:1") == 1
        assert len(kazoo.transactions) == 1
        await election.stop()

    asyncio.run(scenario())


def test_confirming_another_address_than_the_one_published_with_the_election_replaces_it() -> None:
    async def scenario() -> None:
        zk, election, _contender = await _job_election(publish="tcp://127.0.0.1:1")
        session = election._session_id
        assert session is not None
        assert await election.confirm_leadership(session, "tcp://127.0.0.1:2") == 2
        assert zk.kazoo.transactions[-1] == [
            ("check", election._node or ""),
            ("delete", f"{ELECTION}/connection_info"),
            ("create", f"{ELECTION}/connection_info"),
            ("set_data", f"{ELECTION}/epoch"),
        ]
        await election.stop()

    asyncio.run(scenario())


class _RefusingTransaction(TestingTransaction):
    """ZooKeeper refuses the removal's last operation (the job's node) with ``error``."""

    def __init__(self, client: TestingKazooClient, error: Exception) -> None:
        super().__init__(client)
        self.error = error

    def commit(self) -> list[Any]:
        return [RolledBackError()] * (len(self.ops) - 1) + [self.error]


def test_a_stopped_elections_removal_says_why_its_nodes_stay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        for error, why in (
            (NotEmptyError(), "a contender is still in its latch"),
            (NoAuthError(), "made by an earlier sparkmill"),
        ):
            zk, election, _ = await _job_election(publish="tcp://jm:1")
            await election.remove_election()  # still contending: nothing happens
            assert zk.kazoo.transactions[-1][0][0] == "create"
            await election.stop()
            zk.kazoo.transaction = functools.partial(  # type: ignore[method-assign]
                _RefusingTransaction, zk.kazoo, error
            )
            caplog.clear()
            with caplog.at_level(logging.INFO):
                await election.remove_election()
            assert "the election's nodes stay: " in caplog.text and why in caplog.text
        zk, election, _ = await _job_election(publish="tcp://jm:1")
        await election.stop()
        caplog.clear()
        with caplog.at_level(logging.INFO):
            await election.remove_election()
        assert zk.kazoo.transactions[-1] == [
            ("delete", f"{ELECTION}/latch"),
            ("delete", f"{ELECTION}/connection_info"),
            ("delete", f"{ELECTION}/epoch"),
            ("delete", ELECTION),
        ]
        assert "removed the election's nodes" in caplog.text

    asyncio.run(scenario())
