"""The TaskSlotTable's view of the task executor that owns it.

The table calls back when a slot must be freed or a slot timeout fires; its ``free_slot`` is
not the task executor's RPC of that name, so the owner's actions are reached through this
adapter (Flink's ``TaskSlotTable`` holds a ``SlotActions`` of its owner the same way).
"""

from __future__ import annotations

from typing import Protocol

from sparkmill.common.core.ids import AllocationID


class SlotActionsOwner(Protocol):
    def free_slot_action(self, allocation_id: AllocationID) -> None: ...

    def timeout_slot_action(self, allocation_id: AllocationID, ticket: object) -> None: ...


class TableActions:
    def __init__(self, owner: SlotActionsOwner) -> None:
        self._owner = owner

    def free_slot(self, allocation_id: AllocationID) -> None:
        self._owner.free_slot_action(allocation_id)

    def timeout_slot(self, allocation_id: AllocationID, ticket: object) -> None:
        self._owner.timeout_slot_action(allocation_id, ticket)
