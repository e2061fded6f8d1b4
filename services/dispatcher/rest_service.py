"""The dispatcher's HTTP endpoint: settings, the cluster view over HA services, start and stop.

Every dispatcher serves (leader and standbys alike): a standby redirects to the leader's REST
URL, which it finds among the members announced in ZooKeeper (each dispatcher's ServiceInfo
carries its ``rest_url``), so a client that follows redirects keeps working across a failover
as long as it knows any dispatcher's URL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from sparkmill.common.config.kinds import port_range
from sparkmill.common.core.errors import RpcError
from sparkmill.common.core.zookeeper_state import ZooKeeperConnectionState
from sparkmill.common.ha.leader import LeaderInfo, LeaderRetrievalService
from sparkmill.common.ha.services import HighAvailabilityServices
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from sparkmill.common.v1.gateways import ResourceManagerClient
from sparkmill.services.dispatcher.dispatcher import Dispatcher
from sparkmill.services.dispatcher.http_server import HttpServer, StaticFiles, advertised_host
from sparkmill.services.dispatcher.rest_api import RestApi, RestAuthorizer, WebSettings

log = logging.getLogger(__name__)

WEB_ROOT = Path(__file__).parent / "web"
MEMBER_ROLES = ("dispatcher", "resource-manager", "job-master")
RM_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class RestSettings:
    enabled: bool
    bind_host: str
    advertised_host: str
    ports: tuple[int, int]
    grafana_url: str

    @classmethod
    def of(cls, settings: ClusterSettings) -> RestSettings:
        bind = settings.rest_bind_address or rpc_host(settings.dispatcher_address)
        return cls(
            enabled=settings.rest_enabled,
            bind_host=bind,
            advertised_host=advertised_host(bind, settings.rest_address),
            ports=port_range(settings.rest_port),
            grafana_url=settings.web_grafana_url,
        )


def rpc_host(address: str) -> str:
    """The host of a ZeroMQ address: ``tcp://10.0.0.5:6123`` -> ``10.0.0.5``."""
    host = address.split("://", 1)[-1].rpartition(":")[0] or "127.0.0.1"
    host = host.strip("[]")
    return "0.0.0.0" if host == "*" else host


class HaClusterView:
    """The REST API's :class:`~.rest_api.ClusterView` over the process's HA services."""

    def __init__(
        self, dispatcher: Dispatcher, ha: HighAvailabilityServices, clients: RpcClientPool
    ) -> None:
        self._dispatcher = dispatcher
        self._ha = ha
        self._clients = clients
        self._dispatcher_retrieval: LeaderRetrievalService = ha.dispatcher_retrieval()
        self._rm_retrieval: LeaderRetrievalService = ha.resource_manager_retrieval()

    async def start(self) -> None:
        await self._dispatcher_retrieval.start(_ignore)
        await self._rm_retrieval.start(_ignore)

    async def stop(self) -> None:
        await self._dispatcher_retrieval.stop()
        await self._rm_retrieval.stop()

    def is_leader(self) -> bool:
        return self._dispatcher.session_id is not None

    async def leader(self) -> tuple[str, str]:
        current = self._dispatcher_retrieval.current()
        if current is None:
            return "", ""
        for member in await self.members():
            if member.role == "dispatcher" and member.address == current.address:
                return member.rest_url, current.address
        return "", current.address

    async def resource_manager_status(self) -> resource_manager_pb2.ClusterStatus | None:
        leader: LeaderInfo | None = self._rm_retrieval.current()
        if leader is None:
            return None
        client = ResourceManagerClient(self._clients.get(leader.address))
        try:
            return await client.get_cluster_status(
                resource_manager_pb2.GetClusterStatusRequest(),
                timeout=RM_TIMEOUT_S,
                fencing_token=leader.session_id,
            )
        except RpcError as exc:
            log.debug("resource manager status unavailable: %s", exc)
            return None

    async def members(self) -> list[common_pb2.ServiceInfo]:
        found = await self._ha.members()
        infos = []
        for role in MEMBER_ROLES:
            for blob in found.get(role, []):
                info = common_pb2.ServiceInfo()
                info.ParseFromString(blob)
                infos.append(info)
        return infos

    def zookeeper_state(self) -> str:
        connection = getattr(self._ha, "connection", None)
        state = getattr(connection, "state", None)
        if isinstance(state, ZooKeeperConnectionState):
            return state.value
        return "standalone"


def _ignore(info: LeaderInfo | None) -> None:
    """Retrieval listener: the view reads ``current()`` when asked instead."""


class RestEndpoint:
    def __init__(self, server: HttpServer, view: HaClusterView, url: str) -> None:
        self.server = server
        self.view = view
        self.url = url

    async def stop(self) -> None:
        await self.server.stop()
        await self.view.stop()


async def start_rest_endpoint(
    dispatcher: Dispatcher,
    runtime: ServiceRuntime,
    ha: HighAvailabilityServices,
    clients: RpcClientPool,
    authorizer: RestAuthorizer | None = None,
) -> RestEndpoint | None:
    """Serve the REST API and dashboard (its ``url`` goes into the dispatcher's ServiceInfo).
    A port that cannot be
    bound is logged as an error and the dispatcher runs on without it (as metrics do)."""
    settings = RestSettings.of(dispatcher.settings)
    if not settings.enabled:
        return None
    static = await runtime.run_blocking(StaticFiles.load, WEB_ROOT)
    view = HaClusterView(dispatcher, ha, clients)
    web = WebSettings(grafana_url=settings.grafana_url)
    api = RestApi(dispatcher, view, static, web, authorizer)
    server = HttpServer(api.handle, settings.bind_host, settings.ports, admit=api.admit)
    try:
        port = await server.start()
    except OSError as exc:
        log.error(
            "dispatcher: cannot serve the REST API on %s:%s (rest.bind-address / rest.port): %s",
            settings.bind_host,
            "-".join(map(str, sorted(set(settings.ports)))),
            exc,
        )
        return None
    await view.start()
    url = f"http://{settings.advertised_host}:{port}"
    log.info("dispatcher REST API and dashboard at %s", url)
    return RestEndpoint(server, view, url)
