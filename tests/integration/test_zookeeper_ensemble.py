"""Leadership across a real 3-server ZooKeeper ensemble on loopback.

Stopping the server a leader's client is connected to makes kazoo report SUSPENDED while it
moves to another server: the leader keeps leadership (same session, never revoked). Stopping
every server for longer than the session revokes leadership within the session timeout, because
kazoo itself never reports LOST while it reaches no server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from sparkmill.common.core.zookeeper_state import ZooKeeperConnectionState
from sparkmill.common.ha.zookeeper.connection import ZooKeeperConnection
from sparkmill.common.ha.zookeeper.election import ZooKeeperLeaderElectionService
from sparkmill.common.ha.zookeeper.server import (
    ZooKeeperEnsemble,
    ZooKeeperServer,
    zookeeper_available,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper is not installed"),
]

SESSION_TIMEOUT_S = 6.0


@pytest.fixture
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    servers = ZooKeeperEnsemble(tmp_path_factory.mktemp("ensemble"), size=3)
    servers.start()
    try:
        yield servers
    finally:
        servers.stop()


class Contender:
    def __init__(self) -> None:
        self.granted: asyncio.Queue[str] = asyncio.Queue()
        self.revoked_at: list[float] = []

    async def grant_leadership(self, session_id: str) -> None:
        self.granted.put_nowait(session_id)

    async def revoke_leadership(self) -> None:
        self.revoked_at.append(time.monotonic())


def _has_session(server: ZooKeeperServer, session_id: int) -> bool:
    """The server lists a connection of ``session_id`` (its ``cons`` command)."""
    return f"sid=0x{session_id:x}".encode() in server.four_letter_word("cons", timeout_s=2)


async def _lead(
    ensemble: ZooKeeperEnsemble,
) -> tuple[ZooKeeperConnection, ZooKeeperLeaderElectionService, Contender, str]:
    connection = ZooKeeperConnection(
        ensemble.address,
        "/sparkmill/ensemble",
        session_timeout_s=SESSION_TIMEOUT_S,
        connection_timeout_s=10.0,
    )
    await connection.ensure_started()
    election = ZooKeeperLeaderElectionService(
        connection, connection.path("leader", "job-1"), tolerate_suspended=True, name="jm"
    )
    contender = Contender()
    await election.start(contender)
    session = await asyncio.wait_for(contender.granted.get(), 30)
    assert await election.confirm_leadership(session, "tcp://a:1") is not None
    return connection, election, contender, session


def test_stopping_the_server_a_leader_is_connected_to_keeps_its_leadership(
    ensemble: ZooKeeperEnsemble,
) -> None:
    async def scenario() -> None:
        connection, election, contender, session = await _lead(ensemble)
        zk_session = connection.session_id
        assert zk_session is not None
        assert connection.negotiated_session_timeout_s == pytest.approx(SESSION_TIMEOUT_S)
        states: list[ZooKeeperConnectionState] = []
        connection.add_listener(states.append)
        ours = [s for s in ensemble.servers if await asyncio.to_thread(_has_session, s, zk_session)]
        assert len(ours) == 1, "the client is connected to exactly one server"
        await asyncio.to_thread(ours[0].stop)
        await asyncio.sleep(SESSION_TIMEOUT_S + 2)
        assert ZooKeeperConnectionState.SUSPENDED in states, "the client never noticed"
        assert connection.connected and connection.session_id == zk_session
        assert contender.revoked_at == []
        assert election.has_leadership(session)
        # Still the published leader: its latch node and connection_info live on.
        assert await election.confirm_leadership(session, "tcp://a:1") is not None
        await election.stop()
        await connection.close()

    asyncio.run(scenario())


def test_every_server_down_for_longer_than_the_session_revokes_within_the_timeout(
    ensemble: ZooKeeperEnsemble,
) -> None:
    async def scenario() -> None:
        connection, election, contender, session = await _lead(ensemble)
        stopped = time.monotonic()
        for server in ensemble.servers:
            await asyncio.to_thread(server.stop)
        await asyncio.sleep(SESSION_TIMEOUT_S + 2)
        assert contender.revoked_at, "leadership outlived the session"
        assert contender.revoked_at[0] - stopped <= SESSION_TIMEOUT_S + 1.0
        assert not election.has_leadership(session)
        # kazoo still says SUSPENDED: only the bound ended the leadership.
        assert connection.state is ZooKeeperConnectionState.SUSPENDED
        await election.stop()
        await connection.close()

    asyncio.run(scenario())


def test_a_leader_stopped_without_a_quorum_does_not_block_its_successor(
    ensemble: ZooKeeperEnsemble,
) -> None:
    # A JobMaster suspended while ZooKeeper had no quorum stops its election but cannot delete
    # its latch node; its session survives the outage (the new ZooKeeper leader renews every
    # session), and so would the node, before a JobMaster started elsewhere for the job.
    async def scenario() -> None:
        connection, election, contender, _ = await _lead(ensemble)
        zk_session = connection.session_id
        other = ZooKeeperConnection(
            ensemble.address,
            "/sparkmill/ensemble",
            session_timeout_s=SESSION_TIMEOUT_S,
            connection_timeout_s=10.0,
        )
        await other.ensure_started()
        successor = ZooKeeperLeaderElectionService(
            other, connection.path("leader", "job-1"), tolerate_suspended=True, name="jm-2"
        )
        waiting = Contender()
        await successor.start(waiting)
        await asyncio.sleep(1.0)
        assert waiting.granted.empty()
        for server in ensemble.servers[:2]:
            await asyncio.to_thread(server.stop)
        await asyncio.sleep(SESSION_TIMEOUT_S / 3 + 2)
        assert contender.revoked_at, "no quorum, yet the leader kept leading past its grace"
        await election.stop()  # what a suspended JobMaster does
        for server in ensemble.servers[:2]:
            await asyncio.to_thread(server.start)
        await asyncio.wait_for(waiting.granted.get(), 30)
        assert connection.session_id == zk_session, "the old session was expected to survive"
        await successor.stop()
        await other.close()
        await connection.close()

    asyncio.run(scenario())
