"""Slot sharing: which subtasks share one physical slot, and when that slot may go back.

Modelled on Flink's ``SlotSharingGroup`` / ``ExecutionSlotSharingGroup`` and
``SlotSharingExecutionSlotAllocator``. All vertices of a job share the group
``"default"`` unless the pipeline separates them with ``set_slot_sharing_group``. Within a
group, subtask *i* of every job vertex goes to execution slot sharing group *i* (the simple,
valid strategy; Flink's ``LocalInputPreferredSlotSharingStrategy`` additionally prefers
co-location with inputs, which for pointwise chains gives the same assignment). So a group
never holds two subtasks of the same job vertex, and each execution slot sharing group needs
ONE physical slot whose profile is the sum of its members' declared profiles. Unlike Flink,
where resources are declared per slot sharing group, sparkmill declares them per operator: a
member whose profile is unknown ("any slot will do") adds nothing, so one operator's declared
needs still shape (and can rule out) the shared slot; only a group of unknown profiles asks for
an unknown one.

:class:`SlotSharingManager` hands out logical slots of one shared physical slot per
execution slot sharing group; the physical slot goes back to the pool when its last logical
slot is returned (a restarted region returns its logical slots, the slot stays while other
members use it; back in the pool it is reused by the next request until its idle timeout).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import AllocationID, ExecutionAttemptID, JobVertexID, ResourceID
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.services.jobmaster.executiongraph.execution_topology import ExecutionVertexID
from sparkmill.services.jobmaster.slotpool.slot_pool import (
    PendingSlotRequest,
    PhysicalSlot,
    SlotPool,
)


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
        """Sum of the members' declared profiles; unknown only when none declares one."""
        declared = [p for p in self.profiles if not p.is_unknown]
        if not declared:
            return UNKNOWN_PROFILE
        total = ResourceProfile()
        for profile in declared:
            total = total + profile
        return total


class SlotSharingStrategy:
    """Maps every subtask of a job to its execution slot sharing group.

    A group is made the first time one of its members asks for it: a 10,000 x 10,000 job has
    10,000 groups of two, and making them all when the job starts would hold the JobMaster's
    loop for tens of milliseconds for groups that mostly come much later.
    """

    def __init__(self, vertices: Iterable[SharingVertex]) -> None:
        self._vertices: dict[JobVertexID, SharingVertex] = {}
        # The vertices of each slot sharing group, in job order (the order of a group's members).
        self._sharing: dict[str, list[SharingVertex]] = {}
        for vertex in vertices:
            self._vertices[vertex.id] = vertex
            self._sharing.setdefault(vertex.slot_sharing_group, []).append(vertex)
        self._groups: dict[ExecutionSlotSharingGroupID, ExecutionSlotSharingGroup] = {}

    def _group(self, name: str, index: int) -> ExecutionSlotSharingGroup:
        group_id = ExecutionSlotSharingGroupID(name, index)
        group = self._groups.get(group_id)
        if group is None:
            group = ExecutionSlotSharingGroup(group_id)
            undecided = False
            for vertex in self._sharing[name]:
                undecided = undecided or vertex.parallelism < 1
                if index < vertex.parallelism:
                    group.members.append(ExecutionVertexID(vertex.id, index))
                    group.profiles.append(vertex.resource_profile)
            if not undecided:  # a vertex decided later may still join the group
                self._groups[group_id] = group
        return group

    @property
    def groups(self) -> list[ExecutionSlotSharingGroup]:
        """Every group, in job order (this makes them all)."""
        found: dict[ExecutionSlotSharingGroupID, ExecutionSlotSharingGroup] = {}
        for name, vertices in self._sharing.items():
            for index in range(max(v.parallelism for v in vertices)):
                group = self._group(name, index)
                found[group.id] = group
        return list(found.values())

    def group_of(self, vertex_id: ExecutionVertexID) -> ExecutionSlotSharingGroup:
        vertex = self._vertices.get(vertex_id.job_vertex_id)
        index = vertex_id.subtask_index
        if vertex is None or not 0 <= index < vertex.parallelism:
            raise IllegalStateBug(f"{vertex_id} is not a subtask of this job")
        return self._group(vertex.slot_sharing_group, index)


class SharedSlot:
    """One physical slot (or the request for it) shared by an execution slot sharing group.

    Every member attempt holds one logical slot of it. As in Flink's ``SharedSlot``, the
    physical slot goes back to the pool (where it stays available for reuse until its idle
    timeout) when the last logical slot is returned; if it has not arrived yet, the request
    is withdrawn instead.
    """

    def __init__(self, group_id: ExecutionSlotSharingGroupID, request: PendingSlotRequest) -> None:
        self.group_id = group_id
        self.request = request
        self.logical_slots: set[ExecutionAttemptID] = set()

    @property
    def usable(self) -> bool:
        """False once the request failed or was withdrawn: new members need a new request."""
        future = self.request.future
        return not future.done() or (not future.cancelled() and future.exception() is None)

    @property
    def physical_slot(self) -> PhysicalSlot | None:
        future = self.request.future
        if future.done() and not future.cancelled() and future.exception() is None:
            return future.result()
        return None


class SlotSharingManager:
    """Hands out logical slots of shared physical slots.

    Flink's ``SlotSharingExecutionSlotAllocator``: one slot request per execution slot sharing
    group, whatever number of its members are being scheduled.
    """

    def __init__(self, slot_pool: SlotPool, strategy: SlotSharingStrategy) -> None:
        self._pool = slot_pool
        self._strategy = strategy
        self._shared: dict[ExecutionSlotSharingGroupID, SharedSlot] = {}
        self._holder: dict[ExecutionAttemptID, SharedSlot] = {}

    def allocate(
        self, attempt_id: ExecutionAttemptID, vertex_id: ExecutionVertexID
    ) -> PendingSlotRequest:
        """A logical slot for ``attempt_id``: shares the group's physical slot (or its request)."""
        if attempt_id in self._holder:
            raise IllegalStateBug(f"attempt {attempt_id} already holds a logical slot")
        group = self._strategy.group_of(vertex_id)
        shared = self._shared.get(group.id)
        slot = shared.physical_slot if shared is not None else None
        if slot is not None and self._pool.is_blocked(slot.task_executor.resource_id):
            shared = None  # a new member gets no slot on a blocked task executor
        if shared is None or not shared.usable:
            shared = SharedSlot(group.id, self._pool.request_slot(group.resource_profile))
            self._shared[group.id] = shared
        shared.logical_slots.add(attempt_id)
        self._holder[attempt_id] = shared
        return shared.request

    def allocate_exclusive(
        self,
        attempt_id: ExecutionAttemptID,
        vertex_id: ExecutionVertexID,
        excluded: frozenset[ResourceID],
    ) -> PendingSlotRequest:
        """A physical slot of its own for ``attempt_id`` (a speculative attempt), on none of
        the ``excluded`` task executors: sharing its group's slot would put it next to the
        attempt it races. Released like any other by :meth:`release`."""
        if attempt_id in self._holder:
            raise IllegalStateBug(f"attempt {attempt_id} already holds a logical slot")
        group = self._strategy.group_of(vertex_id)
        request = self._pool.request_slot(group.resource_profile, excluded)
        shared = SharedSlot(
            ExecutionSlotSharingGroupID(f"{group.id.group}-{attempt_id}", -1), request
        )
        shared.logical_slots.add(attempt_id)
        self._holder[attempt_id] = shared
        return request

    def release(self, attempt_id: ExecutionAttemptID) -> None:
        """Return ``attempt_id``'s logical slot (idempotent); the last one frees the slot."""
        shared = self._holder.pop(attempt_id, None)
        if shared is None:
            return
        shared.logical_slots.discard(attempt_id)
        if shared.logical_slots:
            return
        if self._shared.get(shared.group_id) is shared:
            del self._shared[shared.group_id]
        slot = shared.physical_slot
        if slot is not None:
            self._pool.release_slot(slot.allocation_id)
        elif not shared.request.future.done():
            self._pool.cancel_request(shared.request.allocation_id, asyncio.CancelledError())

    def slot_lost(self, allocation_id: AllocationID) -> None:
        """The physical slot vanished: forget it, so that new members request a fresh one."""
        for group_id, shared in list(self._shared.items()):
            slot = shared.physical_slot
            if slot is not None and slot.allocation_id == allocation_id:
                del self._shared[group_id]
                for attempt_id in shared.logical_slots:
                    self._holder.pop(attempt_id, None)
                shared.logical_slots.clear()

    def logical_slots(self, group_id: ExecutionSlotSharingGroupID) -> frozenset[ExecutionAttemptID]:
        shared = self._shared.get(group_id)
        return frozenset(shared.logical_slots) if shared is not None else frozenset()
