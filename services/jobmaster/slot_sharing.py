"""Slot sharing: which subtasks share one physical slot, and when that slot may go back.

Modelled on Flink's ``SlotSharingGroup`` / ``ExecutionSlotSharingGroup`` and
``SlotSharingExecutionSlotAllocator``. All vertices of a job share the group
``"default"`` unless the pipeline separates them with ``set_slot_sharing_group``. Within a
group, subtask *i* of every job vertex goes to execution slot sharing group *i* (the simple,
valid strategy; Flink's ``LocalInputPreferredSlotSharingStrategy`` additionally prefers
co-location with inputs, which for pointwise chains gives the same assignment). So a group
never holds two subtasks of the same job vertex, and each execution slot sharing group needs
ONE physical slot whose profile is the sum of its members' profiles. As in Flink, if any
member's profile is unknown the shared request is unknown too.

:class:`SharedSlot` tracks the logical slots handed out of one physical slot: the physical
slot may be returned only when no logical slot is in use and no member still needs it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from sparkmill.common.errors import IllegalStateBug
from sparkmill.common.ids import JobVertexID
from sparkmill.common.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.services.jobmaster.execution_topology import ExecutionVertexID


class SharingVertex(Protocol):
    """What the strategy needs of a job vertex (an ``ExecutionJobVertex`` satisfies it)."""

    @property
    def slot_sharing_group(self) -> str: ...

    @property
    def parallelism(self) -> int: ...

    @property
    def resource_profile(self) -> ResourceProfile: ...

    @property
    def id(self) -> JobVertexID: ...


@dataclass(frozen=True)
class ExecutionSlotSharingGroupID:
    """Slot sharing group name plus the index of the shared slot within it."""

    group: str
    index: int

    def __str__(self) -> str:
        return f"{self.group}#{self.index}"


@dataclass
class ExecutionSlotSharingGroup:
    """Subtasks that run together in one physical slot (at most one per job vertex)."""

    id: ExecutionSlotSharingGroupID
    members: list[ExecutionVertexID] = field(default_factory=list)
    profiles: list[ResourceProfile] = field(default_factory=list)

    @property
    def resource_profile(self) -> ResourceProfile:
        """Sum of the members' profiles; unknown as soon as one member is unknown (as Flink)."""
        if not self.profiles or any(p.is_unknown for p in self.profiles):
            return UNKNOWN_PROFILE
        total = ResourceProfile()
        for profile in self.profiles:
            total = total + profile
        return total


class SlotSharingStrategy:
    """Maps every subtask of a job to its execution slot sharing group."""

    def __init__(self, vertices: Iterable[SharingVertex]) -> None:
        self._groups: dict[ExecutionSlotSharingGroupID, ExecutionSlotSharingGroup] = {}
        self._group_of: dict[ExecutionVertexID, ExecutionSlotSharingGroup] = {}
        for vertex in vertices:
            for index in range(vertex.parallelism):
                group_id = ExecutionSlotSharingGroupID(vertex.slot_sharing_group, index)
                group = self._groups.get(group_id)
                if group is None:
                    group = ExecutionSlotSharingGroup(group_id)
                    self._groups[group_id] = group
                member = ExecutionVertexID(vertex.id, index)
                group.members.append(member)
                group.profiles.append(vertex.resource_profile)
                self._group_of[member] = group

    @property
    def groups(self) -> list[ExecutionSlotSharingGroup]:
        return list(self._groups.values())

    def group_of(self, vertex_id: ExecutionVertexID) -> ExecutionSlotSharingGroup:
        try:
            return self._group_of[vertex_id]
        except KeyError:
            raise IllegalStateBug(f"{vertex_id} is not a subtask of this job") from None


class SharedSlot:
    """Logical slots of one physical slot, shared by an execution slot sharing group.

    ``allocate`` hands a logical slot to a member; ``release`` returns it. The physical slot
    can go back to the pool (``can_release_physical``) only when no logical slot is in use and
    no member is still ``needed`` (e.g. a region that will be deployed later).
    """

    def __init__(self, group: ExecutionSlotSharingGroup) -> None:
        self.group = group
        self._in_use: set[ExecutionVertexID] = set()
        self._needed: set[ExecutionVertexID] = set(group.members)

    def allocate(self, member: ExecutionVertexID) -> bool:
        """Hand ``member`` a logical slot; False if it already holds one (expected refusal)."""
        if member not in self.group.members:
            raise IllegalStateBug(f"{member} is not a member of {self.group.id}")
        if member in self._in_use:
            return False
        self._in_use.add(member)
        self._needed.add(member)
        return True

    def release(self, member: ExecutionVertexID, *, still_needed: bool) -> None:
        """Return ``member``'s logical slot; ``still_needed`` if it will run again (failover)."""
        self._in_use.discard(member)
        if not still_needed:
            self._needed.discard(member)

    def fail_all(self) -> list[ExecutionVertexID]:
        """The physical slot is lost: every logical slot in use fails."""
        lost = sorted(self._in_use)
        self._in_use.clear()
        return lost

    @property
    def logical_slots_in_use(self) -> frozenset[ExecutionVertexID]:
        return frozenset(self._in_use)

    @property
    def can_release_physical(self) -> bool:
        return not self._in_use and not self._needed
