"""The slot pool's vocabulary: a slot offer, where a slot lives, a held slot, the scheduler's
handle on a request, and the calls the pool makes outward (:class:`SlotPoolActions`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from sparkmill.common.core.ids import AllocationID, ResourceID
from sparkmill.common.core.resources import ResourceProfile


@dataclass(frozen=True, slots=True)
class SlotOffer:
    """A slot a task executor reserved for the job and offers to its job master."""

    allocation_id: AllocationID
    slot_index: int
    resource_profile: ResourceProfile


@dataclass(frozen=True, slots=True)
class TaskExecutorInfo:
    """Where a slot lives: the task executor's id and RPC address."""

    resource_id: ResourceID
    address: str


@dataclass(slots=True)
class PhysicalSlot:
    """A slot held by the pool: one slot of one task executor, reserved for this job."""

    allocation_id: AllocationID
    task_executor: TaskExecutorInfo
    slot_index: int
    resource_profile: ResourceProfile


@dataclass(frozen=True, eq=False, slots=True)
class PendingSlotRequest:
    """The scheduler's handle on one slot request.

    ``allocation_id`` is the id the slot was requested under at the RM (or the reused slot's id
    when an available slot served the request at once). ``future`` resolves to the granted
    slot, or fails with the reason the request could not be served. Cancelling the future
    withdraws the request.
    """

    allocation_id: AllocationID
    resource_profile: ResourceProfile
    requested_at: float
    future: asyncio.Future[PhysicalSlot]
    # Task executors whose slots must not serve it (a speculative attempt avoids those of
    # its subtask's other attempts); the pool's blocklist applies to every request besides.
    excluded: frozenset[ResourceID] = frozenset()


class SlotPoolActions(Protocol):
    """The pool's outgoing calls; implementations send RPCs or notify the scheduler.

    They are fire-and-forget: they must not block and should not raise.
    """

    def request_slot_from_resource_manager(
        self,
        allocation_id: AllocationID,
        resource_profile: ResourceProfile,
        excluded: frozenset[ResourceID] = frozenset(),
    ) -> None:
        """Ask the RM to reserve a slot for this job under ``allocation_id``, on none of the
        ``excluded`` task executors."""
        ...

    def cancel_slot_request_at_resource_manager(self, allocation_id: AllocationID) -> None:
        """Withdraw a request sent earlier with ``request_slot_from_resource_manager``."""
        ...

    def free_slot_at_task_executor(
        self, task_executor: TaskExecutorInfo, allocation_id: AllocationID, cause: str
    ) -> None:
        """Give a slot the pool no longer wants back to its task executor."""
        ...

    def slot_lost(self, slot: PhysicalSlot, cause: BaseException) -> None:
        """An in-use slot is gone: the scheduler must fail the task running in it."""
        ...


__all__ = [
    "PendingSlotRequest",
    "PhysicalSlot",
    "SlotOffer",
    "SlotPoolActions",
    "TaskExecutorInfo",
]
