"""Where an RPC server listens versus the address it publishes (Flink's ``rpc.bind-address``
versus ``rpc.address``).

A service on a multi-homed host, in a container or behind NAT binds one interface or all of
them (``0.0.0.0``), but others must be told an address that reaches it: that one goes into
ZooKeeper's leader information, registrations at the resource manager, the JobMaster address
given to task executors. A wildcard is never advertised: peers would dial their own host.
Flink resolves a missing ``taskmanager.host`` by probing which local address reaches the
JobManager; sparkmill asks for the address instead, because a guessed one (a host's FQDN
resolves to ``127.0.1.1`` on a default Debian install) fails far from its cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkmill.common.core.errors import ConfigurationError

WILDCARD_HOSTS = frozenset({"", "*", "0.0.0.0", "::"})


@dataclass(frozen=True, slots=True)
class RpcEndpoints:
    bind: str  # what the server binds, e.g. tcp://0.0.0.0:6123
    advertised: str  # what others are told, e.g. tcp://node-1.example:6123 (port 0: the bound)


def split_tcp(address: str) -> tuple[str, str]:
    """``tcp://host:port`` -> (host without IPv6 brackets, port)."""
    rest = address.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), port


def _tcp(host: str, port: str) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def rpc_endpoints(key: str, advertised: str, bind_host: str) -> RpcEndpoints:
    """The endpoints of the RPC server whose advertised address is option ``key``'s value.

    Raises :class:`ConfigurationError` (naming ``key``) when that address is a wildcard."""
    host, port = split_tcp(advertised)
    if host in WILDCARD_HOSTS:
        raise ConfigurationError(
            key,
            f"{advertised} cannot be advertised: others would dial a wildcard. Set {key} to the "
            "name or address others reach this host at, and rpc.bind-host: 0.0.0.0 to listen "
            "on every interface",
        )
    bind = bind_host.strip().strip("[]") or host
    return RpcEndpoints(_tcp("*" if bind == "*" else bind, port), _tcp(host, port))


def with_bound_port(advertised: str, bound: str) -> str:
    """``advertised`` with the port the server actually bound (resolving port 0)."""
    host, _ = split_tcp(advertised)
    return _tcp(host, split_tcp(bound)[1])
