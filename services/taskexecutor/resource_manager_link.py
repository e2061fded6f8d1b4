"""A task executor's connection to the resource manager leader.

Flink's ``TaskExecutor`` keeps this in its ``ResourceManagerConnection`` (retrying registration
with back-off, then a slot report) and its registration timeout: a task executor that cannot
register within ``taskmanager.registration.timeout`` fails fatally, so that its supervisor
(systemd) starts it afresh. Every leader change starts a new connection; the old one's pending
registration is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from sparkmill.common.core.errors import NotLeaderError, RpcError
from sparkmill.common.core.ids import AllocationID, ResourceID, short
from sparkmill.common.ha.leader import LeaderInfo
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.heartbeat import HeartbeatManager
from sparkmill.common.runtime.retry import retry_registration
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from sparkmill.common.v1.gateways import ResourceManagerClient

log = logging.getLogger(__name__)

HEARTBEAT_TARGET = "rm"  # the resource manager's key in the task executor's heartbeat manager


@dataclass
class _Connection:
    leader: LeaderInfo
    client: ResourceManagerClient
    instance_id: str = ""
    registration: asyncio.Task[None] | None = None

    @property
    def established(self) -> bool:
        return bool(self.instance_id)


class ResourceManagerLink:
    """Registration at the current resource manager leader, kept up across leader changes."""

    def __init__(
        self,
        *,
        settings: ClusterSettings,
        runtime: ServiceRuntime,
        clients: RpcClientPool,
        heartbeats: HeartbeatManager,
        resource_id: ResourceID,
        registration_request: Callable[[], resource_manager_pb2.RegisterTaskExecutorRequest],
        slot_report: Callable[[], common_pb2.SlotReport],
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.clients = clients
        self.heartbeats = heartbeats
        self.resource_id = resource_id
        self._registration_request = registration_request
        self._slot_report = slot_report
        self.connection: _Connection | None = None
        # Flink's TaskExecutor#startRegistrationTimeout: armed while not registered.
        self._registration_timeout: asyncio.TimerHandle | None = None
        self._addresses_tried: list[str] = []

    def start(self) -> None:
        self._arm_registration_timeout()

    @property
    def is_registered(self) -> bool:
        return self.connection is not None and self.connection.established

    def session_id(self, *, registering: bool = False) -> str:
        """The fencing token the registered resource manager leader uses. ``registering``:
        also that of the leader a registration is under way with. That leader asks for a slot
        as soon as it has taken the registration, which can be before its answer (and the
        slot report after it) got here: refusing would cost the request a retry."""
        connection = self.connection
        if connection is None or not (connection.established or registering):
            raise NotLeaderError("this task executor is not registered at a resource manager")
        return connection.leader.session_id

    async def on_leader(self, leader: LeaderInfo | None) -> None:
        old = self.connection
        if old is not None:
            if old.registration is not None:
                old.registration.cancel()
            self.heartbeats.unmonitor(HEARTBEAT_TARGET)
        self.connection = None
        self._arm_registration_timeout()
        if leader is None:
            log.warning("no resource manager leader known; waiting")
            return
        if leader.address not in self._addresses_tried:
            self._addresses_tried.append(leader.address)
        client = ResourceManagerClient(
            self.clients.get(leader.address), fencing_token=leader.session_id
        )
        connection = _Connection(leader, client)
        self.connection = connection
        connection.registration = self.runtime.spawn(self._register(connection), "rm-registration")

    async def _register(self, connection: _Connection) -> None:
        request = self._registration_request()

        async def attempt(timeout: float) -> str:
            reply = await connection.client.register_task_executor(request, timeout=timeout)
            await connection.client.send_slot_report(
                resource_manager_pb2.SendSlotReportRequest(
                    instance_id=reply.instance_id, slot_report=self._slot_report()
                ),
                timeout=self.settings.rpc_timeout_s,
            )
            return reply.instance_id

        instance_id = await retry_registration(
            f"registration at resource manager {connection.leader.address}",
            attempt,
            self.settings.registration,
        )
        if self.connection is not connection:
            return
        connection.instance_id = instance_id
        self._disarm_registration_timeout()
        self.heartbeats.monitor(HEARTBEAT_TARGET)
        log.info(
            "registered at resource manager %s as instance %s",
            connection.leader.address,
            short(instance_id),
        )

    def reconnect(self, reason: str) -> None:
        if self.connection is None:
            return
        log.warning("reconnecting to the resource manager: %s", reason)
        self.runtime.spawn(self.on_leader(self.connection.leader), "rm-reconnect")

    def notify_slot_free(self, index: int, allocation_id: AllocationID) -> None:
        connection = self.connection
        if connection is None or not connection.established or index < 0:
            return  # the slot report of the next (re-)registration or heartbeat carries it

        async def notify() -> None:
            try:
                await connection.client.notify_slot_available(
                    resource_manager_pb2.NotifySlotAvailableRequest(
                        instance_id=connection.instance_id,
                        slot_index=index,
                        allocation_id=allocation_id,
                    )
                )
            except RpcError as exc:
                log.info("could not tell the RM slot %d is free: %s", index, exc)

        self.runtime.spawn(notify(), "notify-slot-free")

    async def close(self) -> None:
        """Say goodbye to the resource manager (best effort) and stop registering."""
        self._disarm_registration_timeout()
        connection = self.connection
        if connection is not None and connection.established:
            try:
                await connection.client.disconnect_task_executor(
                    resource_manager_pb2.DisconnectTaskExecutorRequest(
                        resource_id=self.resource_id, cause="task executor shut down"
                    ),
                    timeout=2.0,
                )
            except RpcError as exc:
                log.info("could not say goodbye to the resource manager: %s", exc)
        if connection is not None and connection.registration is not None:
            connection.registration.cancel()

    # -- registration timeout --------------------------------------------------------------------

    def _arm_registration_timeout(self) -> None:
        if self._registration_timeout is not None:
            return  # already counting since the connection was lost
        self._registration_timeout = asyncio.get_running_loop().call_later(
            self.settings.task_executor_registration_timeout_s, self._on_registration_timeout
        )

    def _disarm_registration_timeout(self) -> None:
        if self._registration_timeout is not None:
            self._registration_timeout.cancel()
            self._registration_timeout = None
        self._addresses_tried.clear()

    def _on_registration_timeout(self) -> None:
        """Unregistered for taskmanager.registration.timeout: exit, so a supervisor restarts
        the process with a fresh view (Flink's TaskExecutor fails fatally the same way)."""
        self._registration_timeout = None
        tried = ", ".join(self._addresses_tried) or "none: no resource manager leader was found"
        self.runtime.fail_fatally(
            "could not register at a resource manager within taskmanager.registration.timeout "
            f"({self.settings.task_executor_registration_timeout_s:g} s); "
            f"resource manager addresses tried: {tried}"
        )
