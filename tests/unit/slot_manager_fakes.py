"""Hand-written fakes for the SlotManager's unit tests: a recording :class:`ResourceActions`, and a
harness with a manual timer service that registers task executors and requests slots."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkmill.common.core.errors import RpcError
from sparkmill.common.core.ids import (
    AllocationID,
    InstanceID,
    JobID,
    ResourceID,
    new_allocation_id,
    new_instance_id,
    new_job_id,
    new_resource_id,
)
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.core.slots import SlotID, SlotReport, SlotStatus
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.common.v1 import common_pb2
from sparkmill.services.resourcemanager.slot_manager import SlotManager, SlotRequest, SlotState
from sparkmill.services.resourcemanager.slot_requests import START_MORE_TASK_EXECUTORS
from sparkmill.services.resourcemanager.task_executor_registration import TaskExecutorRegistration

SMALL = ResourceProfile(1.0, 1024)
BIG = ResourceProfile(4.0, 8192)
REQUEST_TIMEOUT = 30.0
IDLE_TIMEOUT = 60.0
ALLOCATION_TIMEOUT = 5.0


@dataclass
class RecordingActions:
    allocations: list[tuple[InstanceID, SlotID, SlotRequest]] = field(default_factory=list)
    failures: list[tuple[JobID, AllocationID, RpcError]] = field(default_factory=list)
    idle: list[InstanceID] = field(default_factory=list)

    def allocate_slot(self, instance_id: InstanceID, slot_id: SlotID, request: SlotRequest) -> None:
        self.allocations.append((instance_id, slot_id, request))

    def notify_allocation_failure(
        self, job_id: JobID, allocation_id: AllocationID, cause: RpcError
    ) -> None:
        self.failures.append((job_id, allocation_id, cause))

    def notify_idle_task_executor(self, instance_id: InstanceID) -> None:
        self.idle.append(instance_id)

    def more_slots_advice(self) -> str:
        return START_MORE_TASK_EXECUTORS

    def last_slot(self) -> SlotID:
        return self.allocations[-1][1]


def registration(
    resource_id: ResourceID, slots: int, profile: ResourceProfile
) -> TaskExecutorRegistration:
    """A task executor's decoded registration: ``slots`` slots of ``profile``."""
    return TaskExecutorRegistration(
        resource_id, "te-address", slots, profile.multiply(slots), profile, common_pb2.ServiceInfo()
    )


@dataclass
class TE:
    instance_id: InstanceID
    resource_id: ResourceID


class Harness:
    def __init__(
        self, spread_out: bool = True, on_request_served: Callable[[float], None] | None = None
    ) -> None:
        self.timers = ManualTimerService()
        self.actions = RecordingActions()
        self.sm = SlotManager(
            self.timers,
            self.actions,
            REQUEST_TIMEOUT,
            IDLE_TIMEOUT,
            spread_out=spread_out,
            allocation_timeout_s=ALLOCATION_TIMEOUT,
            on_request_served=on_request_served,
        )
        self.job = new_job_id()

    def add_te(
        self,
        slots: int = 4,
        profile: ResourceProfile = SMALL,
        allocated: dict[int, AllocationID] | None = None,
    ) -> TE:
        te = TE(new_instance_id(), new_resource_id())
        report = self.report(slots, profile, allocated or {})
        assert self.sm.register_task_executor(
            te.instance_id, registration(te.resource_id, slots, profile), report
        )
        return te

    def report(
        self, slots: int, profile: ResourceProfile, allocated: dict[int, AllocationID]
    ) -> SlotReport:
        return SlotReport(
            tuple(
                SlotStatus(i, profile, allocated.get(i), self.job if i in allocated else None)
                for i in range(slots)
            )
        )

    def request(self, profile: ResourceProfile = UNKNOWN_PROFILE) -> SlotRequest:
        request = SlotRequest(self.job, new_allocation_id(), profile, "jm-address")
        assert self.sm.register_slot_request(request)
        return request

    def allocate(self, profile: ResourceProfile = UNKNOWN_PROFILE) -> tuple[SlotRequest, SlotID]:
        """A request that is served and confirmed by the task executor."""
        request = self.request(profile)
        slot_id = self.actions.last_slot()
        assert self.actions.allocations[-1][2] == request
        assert self.sm.on_allocation_result(request.allocation_id, slot_id, None)
        return request, slot_id

    def states(self, te: TE) -> list[SlotState]:
        return [info.state for info in self.sm.task_executor_slots(te.instance_id)]

    def check_counts(self, tes: list[TE]) -> None:
        seen: Counter[SlotState] = Counter()
        for te in tes:
            seen.update(self.states(te))
        assert self.sm.slot_counts() == {state: seen[state] for state in SlotState}


def per_te(h: Harness) -> Counter[ResourceID]:
    return Counter(slot_id.resource_id for _, slot_id, _ in h.actions.allocations)
