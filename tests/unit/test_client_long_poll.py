"""The client's long poll for a job's result follows a dispatcher failover instead of waiting
out the dead leader's deadline; with ZooKeeper the client watches the dispatcher leader once,
for all its calls."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from sparkmill.client import ClusterClient
from sparkmill.common.core.errors import UnavailableError
from sparkmill.common.ha.leader import LeaderInfo, LeaderListener, LeaderRetrievalService
from sparkmill.common.runtime.settings import ClusterSettings


class TestingLeaderRetrieval(LeaderRetrievalService):
    """Reports ``leaders`` to its listener, ``gap_s`` apart, starting with the first at once."""

    __test__ = False

    def __init__(self, leaders: list[LeaderInfo | None], gap_s: float = 0.05) -> None:
        self.leaders = leaders
        self.gap_s = gap_s
        self.started = self.stopped = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self, listener: LeaderListener) -> None:
        self.started += 1

        async def report() -> None:
            for info in self.leaders:
                listener(info)
                await asyncio.sleep(self.gap_s)

        self._task = asyncio.create_task(report())

    async def stop(self) -> None:
        self.stopped += 1
        if self._task is not None:
            self._task.cancel()

    def current(self) -> LeaderInfo | None:
        return None


class TestingHaServices:
    __test__ = False

    def __init__(self, retrieval: TestingLeaderRetrieval) -> None:
        self.retrieval = retrieval

    def dispatcher_retrieval(self) -> TestingLeaderRetrieval:
        return self.retrieval

    async def close(self) -> None:
        pass


@pytest.fixture
def client() -> Iterator[ClusterClient]:
    with ClusterClient(ClusterSettings()) as made:
        yield made


def _with_zookeeper(client: ClusterClient, retrieval: TestingLeaderRetrieval) -> None:
    client.settings = dataclasses.replace(client.settings, ha_mode="zookeeper")
    client._ha = TestingHaServices(retrieval)  # type: ignore[assignment]


async def _never() -> Any:
    await asyncio.sleep(3600)


async def _answer(value: str, after_s: float) -> str:
    await asyncio.sleep(after_s)
    return value


def test_a_poll_to_a_deposed_leader_is_given_up_when_another_leads(client: ClusterClient) -> None:
    old, new = LeaderInfo("tcp://a:1", "s-old"), LeaderInfo("tcp://b:1", "s-new")
    retrieval = TestingLeaderRetrieval([old, new])
    _with_zookeeper(client, retrieval)
    with pytest.raises(UnavailableError, match="leader changed"):
        client._run(asyncio.wait_for(client._unless_dispatcher_moves(_never(), "s-old"), 5))
    assert (retrieval.started, retrieval.stopped) == (1, 0)  # watched on, for the next call


def test_a_poll_is_given_up_when_the_leader_is_gone(client: ClusterClient) -> None:
    retrieval = TestingLeaderRetrieval([LeaderInfo("tcp://a:1", "s-old"), None])
    _with_zookeeper(client, retrieval)
    with pytest.raises(UnavailableError):
        client._run(asyncio.wait_for(client._unless_dispatcher_moves(_never(), "s-old"), 5))


def test_the_answer_of_a_leader_that_stays_is_returned(client: ClusterClient) -> None:
    retrieval = TestingLeaderRetrieval([LeaderInfo("tcp://a:1", "s-1")])
    _with_zookeeper(client, retrieval)
    assert client._run(client._unless_dispatcher_moves(_answer("done", 0.2), "s-1")) == "done"
    assert client._run(client._unless_dispatcher_moves(_answer("again", 0.1), "s-1")) == "again"
    assert (retrieval.started, retrieval.stopped) == (1, 0)


def test_without_zookeeper_nothing_is_watched(client: ClusterClient) -> None:
    retrieval = TestingLeaderRetrieval([None])
    client._ha = TestingHaServices(retrieval)  # type: ignore[assignment]
    assert client._run(client._unless_dispatcher_moves(_answer("done", 0.05), "s-1")) == "done"
    assert retrieval.started == 0


def test_the_leader_is_watched_once_for_every_call_and_until_the_client_closes() -> None:
    first, second = LeaderInfo("tcp://a:1", "s-1"), LeaderInfo("tcp://b:1", "s-2")
    retrieval = TestingLeaderRetrieval([first, second], gap_s=0.2)
    client = ClusterClient(ClusterSettings())
    _with_zookeeper(client, retrieval)
    try:
        assert client._run(client._leader("dispatcher", 5)) == first
        assert client._run(client._leader("dispatcher", 5)) == first  # no second retrieval
        client._run(asyncio.sleep(0.3))  # the watch reports the new leader meanwhile
        assert client._run(client._leader("dispatcher", 5)) == second
        assert (retrieval.started, retrieval.stopped) == (1, 0)
    finally:
        client.close()
    assert retrieval.stopped == 1


def test_no_leader_within_the_timeout_is_unavailable() -> None:
    client = ClusterClient(ClusterSettings())
    _with_zookeeper(client, TestingLeaderRetrieval([None]))
    try:
        with pytest.raises(UnavailableError, match="no dispatcher leader"):
            client._run(client._leader("dispatcher", 0.2))
    finally:
        client.close()
