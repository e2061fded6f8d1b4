"""Leader epochs from a real ZooKeeper: strictly increasing across successive leaders of one
election, whatever the hosts' clocks say, and never handed to a deposed contender.

The JobMaster orders sink commits and its progress logs by this epoch, so a successor whose
host's clock is behind its predecessor's must still get the greater one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from sparkmill.common.ha.zookeeper.connection import ZooKeeperConnection
from sparkmill.common.ha.zookeeper.election import ZooKeeperLeaderElectionService
from sparkmill.common.ha.zookeeper.server import ZooKeeperServer, zookeeper_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper is not installed"),
]


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Contender:
    """Records its grants and revocations; reads the clock when granted, as the JobMaster
    once did for its epoch."""

    def __init__(self) -> None:
        self.granted: asyncio.Queue[str] = asyncio.Queue()
        self.revoked = asyncio.Event()
        self.clock_at_grant = 0.0

    async def grant_leadership(self, session_id: str) -> None:
        self.clock_at_grant = time.time()
        self.granted.put_nowait(session_id)

    async def revoke_leadership(self) -> None:
        self.revoked.set()


def _expire(zookeeper: ZooKeeperServer, connection: ZooKeeperConnection) -> None:
    """Expire ``connection``'s session from outside (the partitioned host's view: its session
    is gone while the process lives on)."""
    assert connection.client is not None and connection.client.client_id is not None
    session_id, password = connection.client.client_id
    other = KazooClient(hosts=zookeeper.address, client_id=(session_id, password))
    other.start(timeout=15)
    other.stop()
    other.close()


async def _elections(
    zookeeper: ZooKeeperServer, root: str, job: str, count: int
) -> tuple[list[ZooKeeperConnection], list[ZooKeeperLeaderElectionService]]:
    """``count`` contenders of one job's election, each on a ZooKeeper session of its own."""
    connections = [
        ZooKeeperConnection(
            zookeeper.address, root, session_timeout_s=4.0, connection_timeout_s=10.0
        )
        for _ in range(count)
    ]
    for connection in connections:
        await connection.ensure_started()
    path = connections[0].path("leader", job)
    elections = [
        ZooKeeperLeaderElectionService(c, path, tolerate_suspended=False, name=f"jm-{i}")
        for i, c in enumerate(connections)
    ]
    return connections, elections


def test_a_successor_whose_clock_is_behind_still_gets_the_greater_epoch(
    zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        connections, elections = await _elections(zookeeper, "/sparkmill/epochs", "job-1", 2)
        first, second = Contender(), Contender()
        await elections[0].start(first)
        session_1 = await asyncio.wait_for(first.granted.get(), 20)
        epoch_1 = await elections[0].confirm_leadership(session_1, "tcp://host-a:1")
        await elections[1].start(second)

        # The second contender's host runs an hour behind.
        real_time = time.time
        monkeypatch.setattr(time, "time", lambda: real_time() - 3600.0)
        _expire(zookeeper, connections[0])
        await asyncio.wait_for(first.revoked.wait(), 30)
        session_2 = await asyncio.wait_for(second.granted.get(), 30)
        epoch_2 = await elections[1].confirm_leadership(session_2, "tcp://host-b:1")

        assert second.clock_at_grant < first.clock_at_grant  # a clock-based epoch would fall
        assert epoch_1 is not None and epoch_2 is not None
        assert epoch_2 > epoch_1 > 0
        # The deposed contender gets no epoch for its old session, not even once reconnected.
        assert await elections[0].confirm_leadership(session_1, "tcp://host-a:1") is None
        for election in elections:
            await election.stop()
        for connection in connections:
            await connection.close()

    asyncio.run(scenario())


def test_a_leader_whose_latch_node_is_gone_gets_no_epoch_before_it_notices(
    zookeeper: ZooKeeperServer,
) -> None:
    # The window of a partitioned leader: ZooKeeper has dropped its latch node, it has not
    # heard yet. Its publication (and so its epoch) is checked against that node in the same
    # transaction, so it cannot obtain one.
    async def scenario() -> None:
        connection = ZooKeeperConnection(
            zookeeper.address, "/sparkmill/epochs", session_timeout_s=4.0, connection_timeout_s=10.0
        )
        await connection.ensure_started()
        contender = Contender()
        path = connection.path("leader", "job-2")
        election = ZooKeeperLeaderElectionService(
            connection, path, tolerate_suspended=False, name="jm"
        )
        await election.start(contender)
        session = await asyncio.wait_for(contender.granted.get(), 20)
        assert connection.client is not None
        (latch_node,) = connection.client.get_children(f"{path}/latch")
        connection.client.delete(f"{path}/latch/{latch_node}")
        assert await election.confirm_leadership(session, "tcp://host-a:1") is None
        assert connection.client.exists(f"{path}/connection_info") is None
        await election.stop()
        await connection.close()

    asyncio.run(scenario())


def test_a_finished_jobs_election_is_removed_by_the_last_contender_to_leave(
    zookeeper: ZooKeeperServer,
) -> None:
    async def scenario() -> None:
        connections, elections = await _elections(zookeeper, "/sparkmill/removal", "job-3", 2)
        path = elections[0].path
        leader, standby = Contender(), Contender()
        elections[0].will_publish("tcp://host-a:1")
        await elections[0].start(leader)
        session = await asyncio.wait_for(leader.granted.get(), 20)
        assert await elections[0].confirm_leadership(session, "tcp://host-a:1") is not None
        await elections[1].start(standby)
        client = connections[0].client
        assert client is not None
        deadline = time.monotonic() + 20
        while len(client.get_children(f"{path}/latch")) < 2:
            assert time.monotonic() < deadline, "the standby never entered the latch"
            await asyncio.sleep(0.05)

        await elections[0].remove_election()  # still contending: not a finished job's
        assert client.exists(path) is not None
        await elections[0].stop()
        await elections[0].remove_election()  # the standby is still in the latch
        assert sorted(client.get_children(path)) == ["connection_info", "epoch", "latch"]
        await asyncio.wait_for(standby.granted.get(), 20)
        await elections[1].stop()
        await elections[1].remove_election()
        assert client.exists(path) is None
        await elections[1].remove_election()  # removed already: nothing to do, no error
        for connection in connections:
            await connection.close()

    asyncio.run(scenario())
