"""A leading ResourceManager for unit tests, with no election and no task executor to call; and
a stand-in for what the metrics collector reads of one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.server import CallContext
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.common.v1 import common_pb2, envelope_pb2, resource_manager_pb2
from sparkmill.services.resourcemanager.active_workers import ActiveWorkers
from sparkmill.services.resourcemanager.declared_requirements import DeclaredRequirements
from sparkmill.services.resourcemanager.metrics import ResourceManagerCollector
from sparkmill.services.resourcemanager.resource_manager import ResourceManager
from sparkmill.services.resourcemanager.slot_manager import SlotManager, SlotState


class UnusedElection:
    """The test grants no leadership through an election: it is never called."""


def registration_request(
    resource_id: str = "worker-1",
) -> resource_manager_pb2.RegisterTaskExecutorRequest:
    return resource_manager_pb2.RegisterTaskExecutorRequest(
        resource_id=resource_id,
        address="tcp://127.0.0.1:1",
        total_resources=common_pb2.ResourceProfile(cpu_cores=8.0, memory_mb=8192),
        default_slot_profile=common_pb2.ResourceProfile(cpu_cores=2.0, memory_mb=2048),
        number_slots=4,
        info=common_pb2.ServiceInfo(role="task-executor", id=resource_id),
    )


def leading_resource_manager() -> ResourceManager:
    """A ResourceManager that leads with session ``leader-session`` (call inside a loop)."""
    rm = ResourceManager(
        ClusterSettings(),
        ServiceRuntime("rm-test"),
        cast(Any, UnusedElection()),
        RpcClientPool("test"),
        ServiceIdentity("resource-manager", "rm-1"),
    )
    rm.session_id = "leader-session"
    timers = ManualTimerService()
    rm.slot_manager = SlotManager(timers, rm, 30.0, 60.0)
    loop = asyncio.get_running_loop()
    rm.requirements = DeclaredRequirements(rm.slot_manager, loop.call_soon, timers.now)
    return rm


def call_context() -> CallContext:
    return CallContext(envelope_pb2.RequestHeader(), received_at=0.0, deadline=1.0)


@dataclass
class TestingHeartbeats:
    """What the collector reads of a HeartbeatManager."""

    __test__ = False  # a test helper, not a test class

    timeouts_total: int = 0


@dataclass
class TestingSlotView:
    """What the collector reads of a SlotManager: slots per state and pending requests."""

    __test__ = False  # a test helper, not a test class

    counts: dict[SlotState, int] = field(default_factory=dict)
    pending_requests: int = 0

    def slot_counts(self) -> dict[SlotState, int]:
        return dict(self.counts)

    def number_pending_requests(self) -> int:
        return self.pending_requests


@dataclass
class TestingResourceManagerState:
    """The fields of a ResourceManager its ResourceManagerCollector reads when scraped, set by
    the test: a leader (``session_id`` set) with no task executor, no JobMaster, no slot view,
    and the given worker accounting (``None``: resourcemanager.driver is none)."""

    __test__ = False  # a test helper, not a test class

    active_workers: ActiveWorkers | None
    session_id: str | None = "s"
    task_executors: dict[Any, Any] = field(default_factory=dict)
    job_masters: dict[Any, Any] = field(default_factory=dict)
    te_heartbeats: TestingHeartbeats = field(default_factory=TestingHeartbeats)
    jm_heartbeats: TestingHeartbeats = field(default_factory=TestingHeartbeats)
    slot_manager: SlotManager | TestingSlotView | None = None

    def waiting_slot_requests(self) -> int:
        """What the resource manager reports as waiting (no declared needs here)."""
        return self.slot_manager.number_pending_requests() if self.slot_manager else 0

    def collector(self) -> ResourceManagerCollector:
        """A collector that reads this state in place of a ResourceManager's."""
        return ResourceManagerCollector(cast(ResourceManager, self))
