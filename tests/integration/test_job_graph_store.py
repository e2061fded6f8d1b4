"""The ZooKeeper job graph store against a real ZooKeeper server.

Atomic creation (job node, locks container and this owner's lock in one transaction), removal
that cannot race a new lock, handles treated as untrusted, and one unreadable graph that does
not stop the others from recovering.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from sparkmill.common.core.errors import NotLeaderError
from sparkmill.common.core.ids import JobID, new_job_id
from sparkmill.common.ha.zookeeper.server import ZooKeeperServer, zookeeper_available
from sparkmill.common.ha.zookeeper.stores import ZooKeeperJobGraphStore
from sparkmill.common.v1 import common_pb2

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not zookeeper_available(), reason="Debian's zookeeper is not installed"),
]

ROOT = "/sparkmill/test/jobgraphs"


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    kazoo = KazooClient(hosts=zookeeper.address, timeout=10)
    kazoo.start(timeout=15)
    kazoo.delete("/sparkmill", recursive=True)
    try:
        yield kazoo
    finally:
        kazoo.stop()
        kazoo.close()


def store(client: KazooClient, storage: Path, owner: str) -> ZooKeeperJobGraphStore:
    return ZooKeeperJobGraphStore(client, ROOT, storage, owner)


def graph(name: str = "g") -> common_pb2.JobGraph:
    return common_pb2.JobGraph(job_id=new_job_id(), name=name)


def test_put_creates_the_node_and_the_lock_together(client: KazooClient, tmp_path: Path) -> None:
    job = graph()
    store(client, tmp_path, "d1").put(job)
    assert client.get_children(f"{ROOT}/{job.job_id}/locks") == ["d1"]
    handle, _ = client.get(f"{ROOT}/{job.job_id}")
    assert handle.decode() == str(tmp_path / "job-graphs" / f"{job.job_id}.pb")
    # Put again by the same owner (a retried submission) changes nothing.
    store(client, tmp_path, "d1").put(job)
    assert client.get_children(f"{ROOT}/{job.job_id}/locks") == ["d1"]


def test_a_graph_locked_by_another_owner_is_not_removed(
    client: KazooClient, tmp_path: Path
) -> None:
    job = graph()
    leader, standby = store(client, tmp_path, "d1"), store(client, tmp_path, "d2")
    leader.put(job)
    assert [g.job_id for g in standby.recover().graphs] == [job.job_id]  # standby locks it too
    leader.remove(JobID(job.job_id))
    assert client.exists(f"{ROOT}/{job.job_id}") is not None
    assert (tmp_path / "job-graphs" / f"{job.job_id}.pb").exists()
    standby.remove(JobID(job.job_id))
    assert client.exists(f"{ROOT}/{job.job_id}") is None
    assert not (tmp_path / "job-graphs" / f"{job.job_id}.pb").exists()


def test_a_rewritten_handle_is_never_read_nor_deleted(client: KazooClient, tmp_path: Path) -> None:
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    job = graph()
    leader = store(client, tmp_path, "d1")
    leader.put(job)
    client.set(f"{ROOT}/{job.job_id}", str(victim).encode())
    recovered = store(client, tmp_path, "d2").recover()
    assert recovered.graphs == []
    assert [lost.job_id for lost in recovered.unrecoverable] == [job.job_id]
    assert "changed outside sparkmill" in recovered.unrecoverable[0].reason
    leader.remove(JobID(job.job_id))
    assert victim.read_text() == "keep me"


def test_one_corrupt_graph_is_quarantined_and_the_others_recover(
    client: KazooClient, tmp_path: Path
) -> None:
    good, bad = graph("good"), graph("bad")
    leader = store(client, tmp_path, "d1")
    leader.put(good)
    leader.put(bad)
    (tmp_path / "job-graphs" / f"{bad.job_id}.pb").write_bytes(b"\xff\xff\xff\xff")
    recovered = store(client, tmp_path, "d2").recover()
    assert [g.name for g in recovered.graphs] == ["good"]
    assert [lost.job_id for lost in recovered.unrecoverable] == [bad.job_id]
    assert (tmp_path / "job-graphs" / "quarantine" / f"{bad.job_id}.pb").exists()


def test_a_node_that_is_not_a_job_id_is_reported_not_followed(
    client: KazooClient, tmp_path: Path
) -> None:
    client.create(f"{ROOT}/..%2Fetc", str(tmp_path / "x").encode(), makepath=True)
    recovered = store(client, tmp_path, "d1").recover()
    assert recovered.graphs == []
    assert "is not a job id" in recovered.unrecoverable[0].reason


def test_a_fenced_put_stores_only_while_the_leaders_latch_node_lives(
    zookeeper: ZooKeeperServer, client: KazooClient, tmp_path: Path
) -> None:
    # The leader's own session holds its latch node; the store writes through another client,
    # as the dispatcher's store and election share one session in production but need not.
    leader_session = KazooClient(hosts=zookeeper.address, timeout=10)
    leader_session.start(timeout=15)
    latch = leader_session.create(
        "/sparkmill/test/leader/latch/n_", ephemeral=True, sequence=True, makepath=True
    )
    fenced, late = graph("fenced"), graph("late")
    store(client, tmp_path, "d1").put(fenced, latch)
    assert client.exists(f"{ROOT}/{fenced.job_id}/locks/d1") is not None
    leader_session.stop()  # the session ends: the latch node goes, a successor may lead
    leader_session.close()
    with pytest.raises(NotLeaderError, match="was not stored"):
        store(client, tmp_path, "d1").put(late, latch)
    assert client.exists(f"{ROOT}/{late.job_id}") is None
    assert [g.name for g in store(client, tmp_path, "d2").recover().graphs] == ["fenced"]
