"""What the resource manager's worker accounting (:class:`~.active_workers.ActiveWorkers`) shares
with the resource manager: its settings, the slot demand it reads from the resource manager
(:class:`SlotDemand`, which the resource manager implements) and the counts it reports (to the
metrics and the cluster status). Kept apart from the accounting's rules so that those read on
their own; :mod:`.active_workers` exports these names too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sparkmill.common.core.ids import ResourceID
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.services.resourcemanager.worker_driver import WorkerSpec


@dataclass(frozen=True, slots=True)
class ActiveWorkerSettings:
    spec: WorkerSpec
    min_slots: int = 0
    max_slots: int = 2**31 - 1
    registration_timeout_s: float = 300.0
    start_retry_interval_s: float = 3.0
    wait_result_consumed: bool = True
    max_start_failure_rate: float = 10.0  # per minute
    recovery_timeout_s: float = 50.0

    @classmethod
    def of(cls, settings: ClusterSettings) -> ActiveWorkerSettings:
        """The cluster's settings: workers like the configured task executor."""
        return cls(
            spec=WorkerSpec(
                settings.number_of_slots,
                settings.task_executor_cpu_cores,
                settings.task_executor_memory_mb,
            ),
            min_slots=settings.min_slots,
            max_slots=settings.max_slots,
            registration_timeout_s=settings.worker_registration_timeout_s,
            start_retry_interval_s=settings.start_worker_retry_interval_s,
            wait_result_consumed=settings.release_wait_result_consumed,
            max_start_failure_rate=settings.start_worker_max_failure_rate,
            recovery_timeout_s=settings.previous_worker_recovery_timeout_s,
        )


class SlotDemand(Protocol):
    """What the accounting reads from (and asks of) the resource manager."""

    def waiting_slot_requests(self) -> int:
        """Slot requests that wait because no free slot serves them."""
        ...

    def registered_slots(self) -> int:
        """Slots of every task executor registered with the slot manager."""
        ...

    def is_idle(self, resource_id: ResourceID) -> bool:
        """Whether the task executor is registered with all its slots free."""
        ...

    def close_task_executor(self, resource_id: ResourceID, cause: str) -> None:
        """Forget the task executor's registration (no slot goes to it any more)."""
        ...


@dataclass(frozen=True, slots=True)
class WorkerCounts:
    pending: int  # requested or started, not registered
    registered: int
    releasing: int
    requested_total: int
    failed_total: int
    released_total: int
    recovered_total: int = 0  # a previous leader's, adopted
    recent_failures: int = 0  # within the last minute
    starts_paused: bool = False  # the failure rate reached its maximum


__all__ = ["ActiveWorkerSettings", "SlotDemand", "WorkerCounts"]
