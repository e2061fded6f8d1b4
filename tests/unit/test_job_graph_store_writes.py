"""Storing and removing a job graph: one ZooKeeper transaction per submission once ``jobgraphs``
is known to exist (the walk over its ancestors again only when someone deleted it), and one per
removal unless another owner still holds a lock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError, RolledBackError

from sparkmill.common.core.ids import JobID, new_job_id
from sparkmill.common.ha.zookeeper.stores import ZooKeeperJobGraphStore
from sparkmill.common.v1 import common_pb2

ROOT = "/cluster/jobgraphs"


class TestingTransaction:
    __test__ = False

    def __init__(self, client: TestingStoreClient) -> None:
        self.client = client
        self.ops: list[tuple[str, str]] = []

    def check(self, path: str, version: int) -> None:
        raise AssertionError("no fence in these tests")

    def create(self, path: str, value: bytes = b"", **flags: Any) -> None:
        self.ops.append(("create", path))

    def delete(self, path: str) -> None:
        self.ops.append(("delete", path))

    def commit(self) -> list[Any]:
        self.client.transactions += 1
        nodes = set(self.client.nodes)
        for index, (kind, path) in enumerate(self.ops):
            error: Exception | None = None
            if kind == "create" and path in nodes:
                error = NodeExistsError()
            elif (path.rsplit("/", 1)[0] if kind == "create" else path) not in nodes:
                error = NoNodeError()  # a create's parent, or the node to delete, is missing
            elif kind == "delete" and any(n.startswith(f"{path}/") for n in nodes):
                error = NotEmptyError()
            if error is not None:
                rest = len(self.ops) - index - 1
                return [RolledBackError()] * index + [error] + [RolledBackError()] * rest
            if kind == "create":
                nodes.add(path)
            else:
                nodes.discard(path)
        self.client.nodes = nodes
        return [path for _, path in self.ops]


class TestingStoreClient:
    """ZooKeeper nodes as a set of paths; counts transactions and ancestor walks."""

    __test__ = False

    def __init__(self) -> None:
        self.nodes: set[str] = set()
        self.transactions = 0
        self.walks = 0

    def transaction(self) -> TestingTransaction:
        return TestingTransaction(self)

    def delete(self, path: str) -> None:
        if path not in self.nodes:
            raise NoNodeError()
        self.nodes.discard(path)

    def ensure_path(self, path: str) -> None:
        self.walks += 1
        parts = path.strip("/").split("/")
        self.nodes.update("/" + "/".join(parts[:depth]) for depth in range(1, len(parts) + 1))


def _graph() -> common_pb2.JobGraph:
    return common_pb2.JobGraph(job_id=new_job_id(), name="job")


def _store(client: TestingStoreClient, tmp_path: Path) -> ZooKeeperJobGraphStore:
    return ZooKeeperJobGraphStore(
        client,
        ROOT,
        tmp_path,
        "owner-1",
        ensure_path=client.ensure_path,
    )


def test_jobgraphs_is_walked_to_once_then_each_put_is_one_transaction(tmp_path: Path) -> None:
    client = TestingStoreClient()
    store = _store(client, tmp_path)
    graphs = [_graph() for _ in range(3)]
    for graph in graphs:
        store.put(graph)
    assert (client.walks, client.transactions) == (1, 3)
    for graph in graphs:
        node = f"{ROOT}/{graph.job_id}"
        assert {node, f"{node}/locks", f"{node}/locks/owner-1"} <= client.nodes
        assert (tmp_path / "job-graphs" / f"{graph.job_id}.pb").exists()


def test_a_deleted_jobgraphs_node_is_created_again(tmp_path: Path) -> None:
    client = TestingStoreClient()
    store = _store(client, tmp_path)
    store.put(_graph())
    client.nodes = {n for n in client.nodes if not n.startswith(ROOT)}  # deleted by hand
    graph = _graph()
    store.put(graph)
    assert client.walks == 2
    assert f"{ROOT}/{graph.job_id}/locks/owner-1" in client.nodes


def test_removing_a_graph_is_one_transaction(tmp_path: Path) -> None:
    client = TestingStoreClient()
    store = _store(client, tmp_path)
    graph = _graph()
    store.put(graph)
    client.transactions = 0
    store.remove(JobID(graph.job_id))
    assert client.transactions == 1
    assert not any(n.startswith(f"{ROOT}/{graph.job_id}") for n in client.nodes)
    assert not (tmp_path / "job-graphs" / f"{graph.job_id}.pb").exists()


def test_a_graph_another_owner_locks_stays_and_only_our_lock_goes(tmp_path: Path) -> None:
    client = TestingStoreClient()
    store = _store(client, tmp_path)
    graph = _graph()
    store.put(graph)
    node = f"{ROOT}/{graph.job_id}"
    client.nodes.add(f"{node}/locks/owner-2")  # a standby recovered it meanwhile
    store.remove(JobID(graph.job_id))
    assert f"{node}/locks/owner-1" not in client.nodes
    assert {node, f"{node}/locks/owner-2"} <= client.nodes
    assert (tmp_path / "job-graphs" / f"{graph.job_id}.pb").exists()
