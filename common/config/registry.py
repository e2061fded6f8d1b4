"""The cross-key constraints of sparkmill's configuration and the registry built from them.

Single options are declared in :mod:`sparkmill.common.config.options`; the rules that relate
several keys (a heartbeat timeout above its interval, a ZooKeeper quorum when HA is on, ...)
live here, next to the :data:`REGISTRY` that every
:class:`~sparkmill.common.config.configuration.Configuration` validates against.
"""

from __future__ import annotations

from collections.abc import Callable

from sparkmill.common.config.kinds import port_range
from sparkmill.common.config.options import (
    GROUPS,
    HA_MODE,
    HA_STORAGE_DIR,
    HA_ZOOKEEPER_QUORUM,
    HA_ZOOKEEPER_ROOT,
    HEARTBEAT_INTERVAL,
    HEARTBEAT_RPC_FAILURE_THRESHOLD,
    HEARTBEAT_TIMEOUT,
    PREFIXES,
    REGISTRATION_INITIAL_TIMEOUT,
    REGISTRATION_MAX_TIMEOUT,
    REST_PORT,
    RESTART_STRATEGY_EXP_INITIAL_BACKOFF,
    RESTART_STRATEGY_EXP_MAX_BACKOFF,
    WEB_GRAFANA_URL,
)
from sparkmill.common.config.schema import ConfigOption, ConfigValues, Constraint, OptionRegistry

_CONSTRAINTS: list[Constraint] = []
_Check = Callable[[ConfigValues], tuple[str, str] | None]


def _constraint(description: str) -> Callable[[_Check], _Check]:
    def register(check: _Check) -> _Check:
        _CONSTRAINTS.append(Constraint(description, check))
        return check

    return register


def _ordered(high: ConfigOption[float], low: ConfigOption[float], *, strict: bool) -> None:
    relation = "greater than" if strict else "at least"

    def check(conf: ConfigValues) -> tuple[str, str] | None:
        a, b = conf.get(high), conf.get(low)
        if a > b or (a == b and not strict):
            return None
        return high.key, f"{high.format(a)} must be {relation} {low.key} ({low.format(b)})"

    _constraint(f"{high.key} must be {relation} {low.key}.")(check)


_ordered(HEARTBEAT_TIMEOUT, HEARTBEAT_INTERVAL, strict=True)
_ordered(REGISTRATION_MAX_TIMEOUT, REGISTRATION_INITIAL_TIMEOUT, strict=False)
_ordered(RESTART_STRATEGY_EXP_MAX_BACKOFF, RESTART_STRATEGY_EXP_INITIAL_BACKOFF, strict=False)


@_constraint("heartbeat.rpc-failure-threshold must be positive or -1.")
def _rpc_failure_threshold(conf: ConfigValues) -> tuple[str, str] | None:
    if conf.get(HEARTBEAT_RPC_FAILURE_THRESHOLD) != 0:
        return None
    return HEARTBEAT_RPC_FAILURE_THRESHOLD.key, "must be positive, or -1 to turn it off (got 0)"


@_constraint(
    "high-availability.mode zookeeper requires high-availability.zookeeper.quorum and "
    "high-availability.storageDir."
)
def _zookeeper_required(conf: ConfigValues) -> tuple[str, str] | None:
    if conf.get(HA_MODE) != "zookeeper":
        return None
    for option in (HA_ZOOKEEPER_QUORUM, HA_STORAGE_DIR):
        if not conf.get(option).strip():
            return option.key, f"must be set when {HA_MODE.key} is zookeeper"
    return None


@_constraint("high-availability.zookeeper.quorum, when set, is a comma-separated host[:port] list.")
def _zookeeper_quorum(conf: ConfigValues) -> tuple[str, str] | None:
    quorum = conf.get(HA_ZOOKEEPER_QUORUM)
    for entry in quorum.split(",") if quorum.strip() else ():
        host, colon, port = entry.strip().rpartition(":")
        host, port = (host, port) if colon else (port, "2181")
        if not host or " " in host or not port.isdigit() or not 0 < int(port) <= 65535:
            return HA_ZOOKEEPER_QUORUM.key, (
                f"{quorum!r} is not a ZooKeeper quorum (expected 'host[:port],host[:port],...'; "
                f"bad entry {entry.strip()!r})"
            )
    return None


@_constraint("high-availability.zookeeper.path.root starts with '/'.")
def _zookeeper_root(conf: ConfigValues) -> tuple[str, str] | None:
    root = conf.get(HA_ZOOKEEPER_ROOT)
    if root.startswith("/"):
        return None
    return HA_ZOOKEEPER_ROOT.key, f"{root!r} is not an absolute ZooKeeper path (start with '/')"


@_constraint("rest.port is a port, 0 or a port range.")
def _rest_port(conf: ConfigValues) -> tuple[str, str] | None:
    try:
        port_range(conf.get(REST_PORT))
    except ValueError as exc:
        return REST_PORT.key, str(exc)
    return None


@_constraint("web.grafana-url, when set, is an http(s) URL.")
def _grafana_url(conf: ConfigValues) -> tuple[str, str] | None:
    url = conf.get(WEB_GRAFANA_URL).strip()
    if not url or url.startswith(("http://", "https://")):
        return None
    return WEB_GRAFANA_URL.key, f"{url!r} is not an http:// or https:// URL"


REGISTRY = OptionRegistry(GROUPS, PREFIXES, _CONSTRAINTS)
"""The options, prefixes and constraints every
:class:`~sparkmill.common.config.configuration.Configuration` uses."""
