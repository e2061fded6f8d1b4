"""From a configuration file to what a process runs with: settings and HA services."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.ha.services import HighAvailabilityServices, StandaloneHaServices
from sparkmill.common.runtime.settings import ClusterSettings

if TYPE_CHECKING:
    from sparkmill.common.rpc.client import RpcClient


def create_ha_services(
    settings: ClusterSettings,
    config: Any = None,
    rpc: Callable[[str], RpcClient] | None = None,
    role: str = "client",
) -> HighAvailabilityServices:
    """The HA services of a ``role`` process; ``rpc`` gives the (authenticated) client of an
    address, which standalone leader retrieval uses to ask a leader for its session id. The
    role picks the ZooKeeper identity (clients have none)."""
    mode = config.get(opt.HA_MODE) if isinstance(config, Configuration) else "none"
    if mode == "none":
        return StandaloneHaServices(settings, rpc)
    if mode != "zookeeper":
        raise ConfigurationError(opt.HA_MODE.key, f"unknown mode {mode!r}")
    from sparkmill.common.ha.zookeeper.ha_services import ZooKeeperHaServices

    return ZooKeeperHaServices(settings, config, role)
