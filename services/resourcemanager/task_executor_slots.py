"""The resource manager's view of every registered task executor's slots (Flink's
``TaskManagerTracker`` and ``TaskManagerSlotInformation``): each slot's state, profile and
holder, the free slots indexed by profile, and how a free slot is chosen for a request.

These records are the :class:`~sparkmill.services.resourcemanager.slot_manager.SlotManager`'s
state; it alone changes them (on the resource manager's event loop), through its state
transitions, so its counts and free-slot index always agree with the slots.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from sparkmill.common.core.ids import AllocationID, InstanceID, JobID, ResourceID
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.slots import SlotID
from sparkmill.common.core.state_machine import TransitionTable
from sparkmill.services.resourcemanager.slot_requests import SlotRequest
from sparkmill.services.resourcemanager.task_executor_registration import TaskExecutorRegistration


class SlotState(enum.Enum):
    """The resource manager's view of one task executor slot."""

    FREE = "FREE"
    PENDING = "PENDING"  # a requestSlot call to the task executor is in flight
    ALLOCATED = "ALLOCATED"  # held by an allocation (possibly one we do not know: id None)


SLOT_STATE_TRANSITIONS: TransitionTable[SlotState] = TransitionTable(
    "slot manager slot",
    {
        SlotState.FREE: {SlotState.PENDING, SlotState.ALLOCATED},
        SlotState.PENDING: {SlotState.FREE, SlotState.ALLOCATED},
        SlotState.ALLOCATED: {SlotState.FREE},
    },
)


@dataclass(frozen=True, slots=True)
class SlotInfo:
    slot_id: SlotID
    state: SlotState
    resource_profile: ResourceProfile
    allocation_id: AllocationID | None
    job_id: JobID | None


@dataclass(eq=False, slots=True)
class PendingSlotRequest:
    """A slot request that is not served yet: waiting for a slot, or with an attempt in flight
    (Flink's ``PendingSlotRequest``)."""

    request: SlotRequest
    seq: int  # registration order: waiting requests are served in this order
    deadline: float
    slot: TrackedSlot | None = None  # the slot an attempt is in flight to
    live: bool = True  # False once cancelled or served by another slot


@dataclass(eq=False, slots=True)
class TrackedSlot:
    """One slot of a registered task executor, as the resource manager last knew it."""

    slot_id: SlotID
    instance_id: InstanceID
    profile: ResourceProfile
    state: SlotState = SlotState.FREE
    allocation_id: AllocationID | None = None
    job_id: JobID | None = None
    attempt: PendingSlotRequest | None = None  # set while PENDING
    origin: SlotRequest | None = None  # the request that got this slot, when we know it


@dataclass(eq=False, slots=True)
class TrackedTaskExecutor:
    """A registered task executor's slots, with its free ones indexed by profile."""

    instance_id: InstanceID
    registration: TaskExecutorRegistration
    slots: dict[int, TrackedSlot] = field(default_factory=dict)
    free: dict[ResourceProfile, dict[SlotID, TrackedSlot]] = field(default_factory=dict)
    used: int = 0  # slots not FREE

    @property
    def resource_id(self) -> ResourceID:
        return self.registration.resource_id

    def first_free(
        self, profiles: list[ResourceProfile], exclude: TrackedSlot | None
    ) -> TrackedSlot | None:
        for profile in profiles:
            for slot in self.free.get(profile, {}).values():
                if slot is not exclude:
                    return slot
        return None


def slot_size(profile: ResourceProfile) -> tuple[float, int]:
    return (profile.cpu_cores, profile.memory_mb)


def find_free_slot(
    task_executors: Iterable[TrackedTaskExecutor],
    free_profiles: Iterable[ResourceProfile],
    required: ResourceProfile,
    exclude: TrackedSlot | None,
    *,
    spread_out: bool,
) -> TrackedSlot | None:
    """A free slot for ``required``, preferring the smallest fitting slot profile. Spread
    out: the least loaded task executor first, then the smaller slot; packed: the smaller
    slot, then the earliest registered task executor. Ties go to registration order.
    O(distinct free profiles + task executors)."""
    profiles = sorted((p for p in free_profiles if p.is_matching(required)), key=slot_size)
    if not profiles:
        return None
    best: TrackedSlot | None = None
    best_key: tuple[float, ...] = ()
    for te in task_executors:
        slot = te.first_free(profiles, exclude)
        if slot is None:
            continue
        if spread_out:
            key: tuple[float, ...] = (te.used / len(te.slots), *slot_size(slot.profile))
        elif slot.profile == profiles[0]:
            return slot  # cannot do better than the smallest fitting profile
        else:
            key = slot_size(slot.profile)
        if best is None or key < best_key:
            best, best_key = slot, key
    return best


__all__ = [
    "SLOT_STATE_TRANSITIONS",
    "PendingSlotRequest",
    "SlotInfo",
    "SlotState",
    "TrackedSlot",
    "TrackedTaskExecutor",
    "find_free_slot",
    "slot_size",
]
