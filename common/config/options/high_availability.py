"""High-availability options: the mode, the ZooKeeper quorum and session (Flink's
``HighAvailabilityOptions``).
"""

from __future__ import annotations

from sparkmill.common.config.kinds import (
    BOOL,
    DURATION,
    STRING,
)
from sparkmill.common.config.options._declare import MS, group, option

# --------------------------------------------------------------------------------------------
group("High availability", "Leader election, service discovery and recovery through ZooKeeper.")
HA_MODE = option(
    "high-availability.mode",
    STRING,
    "none",
    "'none': one dispatcher and resource manager at fixed addresses; 'zookeeper': leader "
    "election and service discovery through ZooKeeper (case-insensitive).",
    choices=("none", "zookeeper"),
)
HA_ZOOKEEPER_QUORUM = option(
    "high-availability.zookeeper.quorum",
    STRING,
    "",
    "Comma-separated host[:port] list of the ZooKeeper ensemble (port 2181 if omitted); "
    "required in zookeeper mode.",
)
HA_ZOOKEEPER_ROOT = option(
    "high-availability.zookeeper.path.root",
    STRING,
    "/sparkmill",
    "ZooKeeper node under which all clusters keep their data; must start with '/'.",
)
HA_CLUSTER_ID = option(
    "high-availability.cluster-id",
    STRING,
    "/default",
    "Separates the ZooKeeper data of clusters that share one root path.",
)
HA_STORAGE_DIR = option(
    "high-availability.storageDir",
    STRING,
    "",
    "Durable directory for job graphs and results that ZooKeeper only points to; required "
    "in zookeeper mode.",
)
HA_ZOOKEEPER_SESSION_TIMEOUT = option(
    "high-availability.zookeeper.client.session-timeout",
    DURATION,
    60.0,
    "ZooKeeper session timeout; a leader that loses its session loses leadership.",
    min=MS,
)
HA_ZOOKEEPER_CONNECTION_TIMEOUT = option(
    "high-availability.zookeeper.client.connection-timeout",
    DURATION,
    15.0,
    "How long to wait for the ZooKeeper connection when starting.",
    min=MS,
)
HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS = option(
    "high-availability.zookeeper.client.tolerate-suspended-connections",
    BOOL,
    True,
    "Keep leadership while the ZooKeeper connection is suspended, for at most the session "
    "timeout less the client's read timeout (2/3 of it): a client that moves to another "
    "server of the ensemble (its server stopped) interrupts nothing, and the grace ends "
    "before the servers can expire the session, so a partitioned leader stops before a "
    "successor can start. LOST always revokes at once. false: revoke on every suspension "
    "(Flink's default).",
)
