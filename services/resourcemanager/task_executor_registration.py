"""A registered task executor as the resource manager knows it (Flink's
``TaskExecutorRegistration`` and ``WorkerRegistration``).

A task executor registers once per connection with its address, slot count and resource
profiles (``RegisterTaskExecutorRequest``). The request is decoded into a
:class:`TaskExecutorRegistration` when it arrives, so a bad profile is refused at registration
and every later use (the first slot report, the diagnostic for a request no slot can serve, the
cluster status) reads typed values instead of decoding the wire message again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from sparkmill.common.core.errors import PermissionDeniedError, RpcError
from sparkmill.common.core.ids import InstanceID, JobID, ResourceID, short
from sparkmill.common.core.proto_convert import profile_from_proto
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.rpc.server import CallContext
from sparkmill.common.v1 import common_pb2, resource_manager_pb2, task_executor_pb2
from sparkmill.common.v1.gateways import TaskExecutorClient


@dataclass(frozen=True, slots=True)
class TaskExecutorRegistration:
    """What a task executor said about itself when it registered, decoded and checked."""

    resource_id: ResourceID
    address: str
    number_slots: int
    total_resources: ResourceProfile
    default_slot_profile: ResourceProfile
    info: common_pb2.ServiceInfo  # host, pid, version: shown as is in the cluster status

    @classmethod
    def from_proto(
        cls, request: resource_manager_pb2.RegisterTaskExecutorRequest
    ) -> TaskExecutorRegistration:
        """Decode ``request``; an invalid profile is an ``InvalidArgumentError`` naming it."""
        return cls(
            resource_id=ResourceID(request.resource_id),
            address=request.address,
            number_slots=request.number_slots,
            total_resources=profile_from_proto(request.total_resources, field="total_resources"),
            default_slot_profile=profile_from_proto(
                request.default_slot_profile, field="default_slot_profile"
            ),
            info=request.info,
        )


@dataclass
class WorkerRegistration:
    """The resource manager's record of one registered task executor (one instance id per
    registration: a task executor that registers again gets a new one)."""

    registration: TaskExecutorRegistration
    instance_id: InstanceID
    client: TaskExecutorClient
    registered_at: float = field(default_factory=time.time)
    # False until its first slot report registered its slots with the SlotManager.
    slot_manager_registered: bool = False
    peer: str = ""  # the authenticated key that registered it ("" with security off)

    @property
    def resource_id(self) -> ResourceID:
        return self.registration.resource_id

    @property
    def address(self) -> str:
        return self.registration.address

    async def tell_disconnect(self, cause: str) -> None:
        """Tell the task executor it was removed. It is probably dead; if not, it registers
        again when it notices the resource manager's silence, so a failed call is fine."""
        with contextlib.suppress(RpcError):
            await self.client.disconnect_resource_manager(
                task_executor_pb2.TaskExecutorDisconnectResourceManagerRequest(cause=cause),
                timeout=2.0,
            )


def no_slot_large_enough(
    job_id: JobID, profile: ResourceProfile, registered: Iterable[TaskExecutorRegistration]
) -> str:
    """A diagnostic when no registered task executor could ever serve ``profile`` ("" if one
    could, or if none is registered yet: they may still be starting).

    Waiting for the slot request timeout would only delay the inevitable: the request fails at
    once and the message says which slots are registered.
    """
    registrations = list(registered)
    if profile.is_unknown or not registrations:
        return ""
    offered: dict[str, int] = {}
    for registration in registrations:
        slot = registration.default_slot_profile
        if slot.is_matching(profile):
            return ""
        key = f"{slot} (of {registration.total_resources})"
        offered[key] = offered.get(key, 0) + registration.number_slots
    described = ", ".join(f"{n} x {p}" for p, n in sorted(offered.items()))
    return (
        f"slot request of job {short(job_id)} for {profile} can never be served: no "
        f"registered task executor offers slots that large ({len(registrations)} "
        f"task executors registered, slots: {described}); lower the operator's resource "
        f"profile or add task executors with more cpu/memory per slot "
        f"(taskmanager.cpu.cores, taskmanager.memory.process.size, "
        f"taskmanager.numberOfTaskSlots)"
    )


def check_owner(record: WorkerRegistration, context: CallContext, action: str) -> None:
    """A task executor's key acts for its own registration only: the key that registered a
    resource id is the only one that may report for it, free its slots or disconnect it (with
    one key per host, one compromised host cannot evict or impersonate another)."""
    if record.peer and record.peer != context.peer:
        raise PermissionDeniedError(
            f"task executor {record.resource_id} was registered by {record.peer}; "
            f"{context.peer or 'an unauthenticated caller'} may not {action}"
        )


__all__ = [
    "TaskExecutorRegistration",
    "WorkerRegistration",
    "check_owner",
    "no_slot_large_enough",
]
