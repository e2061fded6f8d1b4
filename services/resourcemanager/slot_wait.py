"""Why a job's slot requests wait: what the resource manager tells each JobMaster with its
heartbeat, so that ``sparkmill jobs status`` says it while the job waits, not only when a
request times out.

Flink's declarative resource management shows a job that waits for resources as such, and its
``NoResourceAvailableException`` says why only at the timeout; here the reason travels with
every heartbeat (it changes as task executors start, fail or register).
"""

from __future__ import annotations

from sparkmill.common.core.ids import JobID
from sparkmill.services.resourcemanager.active_workers import ActiveWorkers
from sparkmill.services.resourcemanager.declared_requirements import DeclaredRequirements
from sparkmill.services.resourcemanager.slot_manager import SlotManager
from sparkmill.services.resourcemanager.task_executor_slots import SlotState


def slot_wait_reason(
    job_id: JobID,
    slots: SlotManager | None,
    workers: ActiveWorkers | None,
    declared: DeclaredRequirements | None = None,
) -> str:
    """``"waiting for N slot(s): why"`` for the job's waiting requests and its declared needs
    no free slot fits, or ``""``."""
    if slots is None:
        return ""
    waiting = sum(1 for request in slots.pending_requests() if request.job_id == job_id)
    if declared is not None:
        waiting += declared.unmet(job_id)
    if not waiting:
        return ""
    why = workers.wait_reason() if workers is not None else ""
    if not why:
        counts = slots.slot_counts()
        total = sum(counts.values())
        why = (
            f"no free slot fits: {slots.number_registered_task_executors()} task executor(s) "
            f"with {total} slot(s), {counts.get(SlotState.ALLOCATED, 0)} in use"
        )
        if workers is None:
            why += " (nothing starts task executors on demand: start more, or wait for "
            why += "other jobs to free slots)"
    return f"waiting for {waiting} slot(s): {why}"


__all__ = ["slot_wait_reason"]
