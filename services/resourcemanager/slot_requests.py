"""The slot manager's vocabulary towards the rest of the resource manager: a JobMaster's
:class:`SlotRequest` (Flink's ``SlotRequest``), where an allocation stands
(:class:`AllocationInfo`), and the :class:`ResourceActions` through which the slot manager acts
(Flink's ``ResourceAllocator`` / ``ResourceEventListener``, implemented by the resource manager).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sparkmill.common.core.errors import InvalidArgumentError, RpcError
from sparkmill.common.core.ids import AllocationID, InstanceID, JobID, ResourceID, is_valid_name_id
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.slots import SlotID


@dataclass(frozen=True, slots=True)
class SlotRequest:
    """A job master's request for one slot (``ResourceManager.requestSlot``)."""

    job_id: JobID
    allocation_id: AllocationID
    resource_profile: ResourceProfile
    job_master_address: str
    # The job's own slot.request.timeout (a job may override the cluster's); None = cluster's.
    timeout_s: float | None = None
    # Task executors (resource ids) whose slots must not serve it (the job's blocklist).
    excluded: frozenset[ResourceID] = frozenset()
    # When the JobMaster's need began (the timer service's clock), if before the request was
    # registered: a declared need is registered only once a free slot fits it.
    needed_since: float | None = None


MAX_EXCLUDED_TASK_EXECUTORS = 1024


def excluded_task_executors(ids: Sequence[str]) -> frozenset[ResourceID]:
    """The task executors a slot request excludes, checked: valid resource ids, not too many."""
    if len(ids) > MAX_EXCLUDED_TASK_EXECUTORS:
        raise InvalidArgumentError(
            f"a slot request excludes {len(ids)} task executors; at most "
            f"{MAX_EXCLUDED_TASK_EXECUTORS} are allowed"
        )
    bad = [i for i in ids if not is_valid_name_id(i)]
    if bad:
        raise InvalidArgumentError(
            f"a slot request excludes {bad[0][:80]!r}, which is not a task executor resource id"
        )
    return frozenset(ResourceID(i) for i in ids)


class AllocationStatus(enum.Enum):
    WAITING = "WAITING"  # queued, no slot yet
    ALLOCATING = "ALLOCATING"  # requestSlot in flight to a slot
    ALLOCATED = "ALLOCATED"  # a slot is allocated to it


@dataclass(frozen=True, slots=True)
class AllocationInfo:
    allocation_id: AllocationID
    job_id: JobID | None
    status: AllocationStatus
    slot_id: SlotID | None


class ResourceActions(Protocol):
    """The slot manager's way out; implemented by the resource manager."""

    def allocate_slot(self, instance_id: InstanceID, slot_id: SlotID, request: SlotRequest) -> None:
        """Send ``requestSlot`` to the task executor; answer via ``on_allocation_result``."""
        ...

    def notify_allocation_failure(
        self, job_id: JobID, allocation_id: AllocationID, cause: RpcError
    ) -> None:
        """Tell the job master that its slot request failed for good."""
        ...

    def notify_idle_task_executor(self, instance_id: InstanceID) -> None:
        """The task executor has had no slot in use for the idle timeout."""
        ...

    def more_slots_advice(self) -> str:
        """What a job whose slot request timed out can do to get slots (the end of the
        failure's message)."""
        ...


START_MORE_TASK_EXECUTORS = (
    "Start more task executors, give them bigger slots, or lower the job's parallelism or slot "
    "profile"
)
"""The advice when nothing starts task executors on demand."""

__all__ = [
    "START_MORE_TASK_EXECUTORS",
    "AllocationInfo",
    "AllocationStatus",
    "ResourceActions",
    "SlotRequest",
]
