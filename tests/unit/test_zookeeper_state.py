"""The ZooKeeper connection state: its transition table, and the connection that follows kazoo."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from sparkmill.common.core.zookeeper_state import (
    ZOOKEEPER_CONNECTION_TRANSITIONS,
    ZooKeeperConnectionState,
)
from sparkmill.common.ha.zookeeper.connection import ZooKeeperConnection
from sparkmill.common.runtime.metrics import ZooKeeperStateHolder

Z = ZooKeeperConnectionState


def test_the_values_are_kazoos_state_strings() -> None:
    from kazoo.client import KazooState

    assert {
        Z(str(s)) for s in (KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.LOST)
    } == set(Z)


def test_allowed_and_refused_transitions() -> None:
    allowed = {
        (Z.LOST, Z.CONNECTED),
        (Z.CONNECTED, Z.SUSPENDED),
        (Z.CONNECTED, Z.LOST),
        (Z.SUSPENDED, Z.CONNECTED),
        (Z.SUSPENDED, Z.LOST),
    }
    for current, target in itertools.product(Z, Z):
        expected = (current, target) in allowed
        assert ZOOKEEPER_CONNECTION_TRANSITIONS.can_transition(current, target) == expected
    assert not any(ZOOKEEPER_CONNECTION_TRANSITIONS.is_terminal(s) for s in Z)
    assert [s for s in Z if not s.has_session] == [Z.LOST]


def test_the_connection_hands_listeners_the_enum_and_counts_losses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    holder = ZooKeeperStateHolder()
    monkeypatch.setattr("sparkmill.common.ha.zookeeper.connection.ZOOKEEPER", holder)
    seen: list[ZooKeeperConnectionState] = []

    async def main() -> ZooKeeperConnection:
        conn = ZooKeeperConnection("127.0.0.1:1", "/x", session_timeout_s=1, connection_timeout_s=1)
        conn._connected = asyncio.Event()
        conn.add_listener(seen.append)
        for kazoo_state in ("CONNECTED", "CONNECTED", "SUSPENDED", "CONNECTED", "LOST"):
            conn._apply_state(kazoo_state)
        return conn

    conn = asyncio.run(main())
    assert seen == [Z.CONNECTED, Z.SUSPENDED, Z.CONNECTED, Z.LOST]  # repeats are not changes
    assert conn.state is Z.LOST and not conn.connected
    assert holder.state is Z.LOST and holder.losses_total == 2
