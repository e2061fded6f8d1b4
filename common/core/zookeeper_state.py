"""The state of this process's ZooKeeper connection: :class:`ZooKeeperConnectionState`.

It mirrors kazoo's ``KazooState`` (the values are kazoo's strings, so a kazoo state converts with
``ZooKeeperConnectionState(str(state))``; Flink's Curator calls the same states
``ConnectionState.CONNECTED/SUSPENDED/LOST``). Nothing here imports kazoo: the metrics of a
process without ZooKeeper use the enum too.

Transitions (kazoo reports them; :data:`ZOOKEEPER_CONNECTION_TRANSITIONS`)::

    LOST -> CONNECTED           a (new) session was established; LOST is also the start state
    CONNECTED -> SUSPENDED      the connection dropped; the session may still be alive
    SUSPENDED -> CONNECTED      reconnected within the session timeout: same session
    SUSPENDED / CONNECTED -> LOST   the session expired (or the client stopped): ephemeral
                                    nodes, and the leadership they stood for, are gone
"""

from __future__ import annotations

import enum

from sparkmill.common.core.state_machine import TransitionTable


class ZooKeeperConnectionState(enum.Enum):
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # the connection dropped; the session may still be alive
    LOST = "LOST"  # the session expired: ephemeral nodes (and leadership) are gone

    @property
    def has_session(self) -> bool:
        """The session (and its ephemeral nodes) may still exist."""
        return self is not ZooKeeperConnectionState.LOST


_Z = ZooKeeperConnectionState
ZOOKEEPER_CONNECTION_TRANSITIONS: TransitionTable[ZooKeeperConnectionState] = TransitionTable(
    "ZooKeeper connection state",
    {
        _Z.LOST: {_Z.CONNECTED},
        _Z.CONNECTED: {_Z.SUSPENDED, _Z.LOST},
        _Z.SUSPENDED: {_Z.CONNECTED, _Z.LOST},
    },
)

__all__ = ["ZOOKEEPER_CONNECTION_TRANSITIONS", "ZooKeeperConnectionState"]
