"""The resource manager's answer to ``GetClusterStatus``: every registered task executor with
its slots, the slot counts by state and the waiting slot requests (what ``sparkmill cluster
status`` and the dashboard show; Flink's ``ResourceManager`` answers its ``ResourceOverview``
and ``TaskManagerInfo`` queries from the same bookkeeping)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sparkmill.common.core.ids import JobID, ResourceID
from sparkmill.common.core.proto_convert import profile_to_proto, slot_status_to_proto
from sparkmill.common.core.slots import SlotStatus
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from sparkmill.services.resourcemanager.active_workers import ActiveWorkers
from sparkmill.services.resourcemanager.slot_manager import SlotManager, SlotState
from sparkmill.services.resourcemanager.task_executor_registration import WorkerRegistration


def cluster_status(
    resource_manager: common_pb2.ServiceInfo,
    slots: SlotManager,
    registrations: Iterable[WorkerRegistration],
    job_ids: Iterable[JobID],
    last_heartbeat_at: Callable[[ResourceID], float] | None = None,
    active: ActiveWorkers | None = None,
) -> resource_manager_pb2.ClusterStatus:
    """``last_heartbeat_at``: when a task executor last answered a heartbeat (epoch seconds,
    0 if never), for the views' "time since last heartbeat"."""
    status = resource_manager_pb2.ClusterStatus(
        resource_manager=resource_manager,
        registered_jobs=sorted(job_ids),
        pending_slot_requests=slots.number_pending_requests(),
    )
    counts = slots.slot_counts()
    status.slots_free = counts.get(SlotState.FREE, 0)
    status.slots_pending = counts.get(SlotState.PENDING, 0)
    status.slots_allocated = counts.get(SlotState.ALLOCATED, 0)
    status.slots_total = status.slots_free + status.slots_pending + status.slots_allocated
    if active is not None:
        worker_counts = active.counts()
        status.workers.CopyFrom(
            resource_manager_pb2.WorkerStats(
                driver=active.driver.name,
                pending=worker_counts.pending,
                registered=worker_counts.registered,
                releasing=worker_counts.releasing,
                started_total=worker_counts.requested_total,
                failed_total=worker_counts.failed_total,
                released_total=worker_counts.released_total,
                max_slots=active.settings.max_slots,
                recent_failures=worker_counts.recent_failures,
                starts_paused=worker_counts.starts_paused,
            )
        )
    for worker in registrations:
        te = status.task_executors.add(
            resource_id=worker.resource_id,
            instance_id=worker.instance_id,
            address=worker.address,
            total_resources=profile_to_proto(worker.registration.total_resources),
            info=worker.registration.info,
            registered_at=worker.registered_at,
            last_heartbeat_at=(
                last_heartbeat_at(worker.resource_id) if last_heartbeat_at is not None else 0.0
            ),
        )
        if worker.slot_manager_registered:
            for info in slots.task_executor_slots(worker.instance_id):
                status_of_slot = SlotStatus(
                    info.slot_id.slot_index, info.resource_profile, info.allocation_id, info.job_id
                )
                te.slots.append(slot_status_to_proto(status_of_slot))
    return status


__all__ = ["cluster_status"]
