"""Slot identity and slot reports, shared by the task executor and the resource manager.

A task executor owns a fixed number of slots, numbered ``0..n-1``. It describes them in a
:class:`SlotReport` (on registration and with every heartbeat); the resource manager's slot
manager keeps its own view of the same slots and reconciles it with the reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkmill.common.core.ids import AllocationID, JobID, ResourceID, short
from sparkmill.common.core.resources import ResourceProfile


@dataclass(frozen=True, slots=True)
class SlotID:
    """A slot of one task executor process: which process, which slot number."""

    resource_id: ResourceID
    slot_index: int

    def __str__(self) -> str:
        return f"{short(self.resource_id)}#{self.slot_index}"


@dataclass(frozen=True, slots=True)
class SlotStatus:
    """One slot as the task executor sees it; ``allocation_id is None`` means the slot is free."""

    slot_index: int
    resource_profile: ResourceProfile
    allocation_id: AllocationID | None = None
    job_id: JobID | None = None

    @property
    def is_free(self) -> bool:
        return self.allocation_id is None


@dataclass(frozen=True, slots=True)
class SlotReport:
    """Every slot of one task executor, in slot-index order."""

    slots: tuple[SlotStatus, ...] = ()

    def __len__(self) -> int:
        return len(self.slots)
