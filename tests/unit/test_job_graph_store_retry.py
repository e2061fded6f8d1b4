"""The job graph store retries an operation whose request was lost with its connection (the
client was moving to another ZooKeeper server), and only that."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from sparkmill.common.ha.zookeeper.stores import ZooKeeperJobGraphStore


class TestingFlakyClient:
    """Lists no job graphs; the first ``failures`` requests fail with ``error``."""

    __test__ = False

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def get_children(self, path: str) -> list[str]:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return []


def test_a_request_lost_with_its_connection_is_retried(tmp_path: Path) -> None:
    client = TestingFlakyClient(failures=2, error=ConnectionLoss())
    store = ZooKeeperJobGraphStore(client, "/jobgraphs", tmp_path, "owner", retry_deadline_s=10)
    recovered = store.recover()
    assert recovered.graphs == [] and client.calls == 3


def test_an_expired_session_is_not_retried(tmp_path: Path) -> None:
    client = TestingFlakyClient(failures=1, error=SessionExpiredError())
    store = ZooKeeperJobGraphStore(client, "/jobgraphs", tmp_path, "owner", retry_deadline_s=10)
    with pytest.raises(SessionExpiredError):
        store.recover()
    assert client.calls == 1
