"""Metrics and logging options (Flink's ``MetricOptions``), with the ``metrics.labels.`` prefix."""

from __future__ import annotations

from sparkmill.common.config.kinds import (
    BOOL,
    INT,
    STRING,
)
from sparkmill.common.config.options._declare import group, option
from sparkmill.common.config.schema import FreeFormPrefix

# --------------------------------------------------------------------------------------------
group(
    "Metrics",
    "The Prometheus endpoint. Extra labels come from the free-form metrics.labels.* keys.",
)

METRICS_ENABLED = option(
    "metrics.enabled",
    BOOL,
    True,
    "Serve Prometheus metrics over HTTP from every process.",
)
METRICS_BIND_HOST = option(
    "metrics.bind-host",
    STRING,
    "127.0.0.1",
    "Host or interface the metrics HTTP endpoint binds to ('0.0.0.0' for all).",
)
METRICS_ADDRESS = option(
    "metrics.address",
    STRING,
    "",
    "Host name or address put in the metrics URL this process publishes (its ServiceInfo, "
    "Prometheus discovery).",
    default_text="metrics.bind-host, or this host's name when that is a wildcard",
)
METRICS_PORT = option(
    "metrics.port",
    INT,
    0,
    "Port of the metrics HTTP endpoint; 0 picks a free port, which is written to the log.",
    min=0,
    max=65535,
)

# --------------------------------------------------------------------------------------------
group("Logging", "Process logging.")
LOG_LEVEL = option(
    "log.level",
    STRING,
    "INFO",
    "Level of the process's root logger (case-insensitive; WARN means WARNING).",
    choices=("DEBUG", "INFO", "WARNING", "ERROR"),
    aliases=(("WARN", "WARNING"),),
)

METRICS_LABELS = FreeFormPrefix(
    "metrics.labels.",
    "Constant labels added to every metric of the process, e.g. metrics.labels.region: eu.",
)
