"""Metrics of the resource manager: task executors, slots by state, slot requests, leadership.

The gauges are read from the :class:`ResourceManager` when scraped, from the same
``SlotManager.slot_counts()`` that ``GetClusterStatus`` (``sparkmill cluster status``) reports,
so both always agree. Slot gauges exist only while this resource manager leads (a standby has
no slot view). The slot request wait time is observed by the SlotManager when a request is
served (from its registration to the allocation).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Histogram
from prometheus_client.core import Metric

from sparkmill.common.runtime.metrics import PREFIX, ProcessMetrics, counter, gauge
from sparkmill.services.resourcemanager.resource_manager import ResourceManager
from sparkmill.services.resourcemanager.slot_manager import SlotState

SLOT_REQUEST_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class ResourceManagerCollector:
    def __init__(self, rm: ResourceManager) -> None:
        self.rm = rm

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        rm = self.rm
        leader = gauge(
            "leader", "1 while this process leads its role (dispatcher, resource manager)."
        )
        leader.add_metric([], 1.0 if rm.session_id is not None else 0.0)
        executors = gauge(
            "resource_manager_task_executors", "Task executors registered at the resource manager."
        )
        executors.add_metric([], float(len(rm.task_executors)))
        job_masters = gauge(
            "resource_manager_job_masters", "JobMasters registered at the resource manager."
        )
        job_masters.add_metric([], float(len(rm.job_masters)))
        timeouts = counter(
            "heartbeat_timeouts",
            "Heartbeat targets declared dead (no heartbeat within heartbeat.timeout, or too many "
            "failed heartbeat RPCs), by the kind of peer watched.",
            ["peer"],
        )
        timeouts.add_metric(["task-executor"], rm.te_heartbeats.timeouts_total)
        timeouts.add_metric(["job-master"], rm.jm_heartbeats.timeouts_total)
        yield from (leader, executors, job_masters, timeouts)
        yield from _worker_metrics(rm)
        slots = rm.slot_manager
        if slots is None:
            return
        by_state = gauge(
            "resource_manager_slots",
            "Slots of the registered task executors by state: free, pending (a slot request to "
            "the task executor is in flight) or allocated.",
            ["state"],
        )
        counts = slots.slot_counts()
        for state in SlotState:
            by_state.add_metric([state.value.lower()], float(counts.get(state, 0)))
        pending = gauge(
            "resource_manager_pending_slot_requests",
            "Slots JobMasters wait for: slot requests waiting for a free slot, and declared "
            "needs no free slot fits.",
        )
        pending.add_metric([], float(rm.waiting_slot_requests()))
        yield from (by_state, pending)


def _worker_metrics(rm: ResourceManager) -> Iterator[Metric]:
    """The task executors the leader starts itself (resourcemanager.driver); none without a
    driver or while it does not lead."""
    workers = rm.active_workers
    if workers is None:
        return
    counts = workers.counts()
    by_state = gauge(
        "resource_manager_workers",
        "Task executors started by the resource manager's driver, by state: pending (requested "
        "or starting, not registered yet), registered, or releasing (being stopped).",
        ["state"],
    )
    by_state.add_metric(["pending"], float(counts.pending))
    by_state.add_metric(["registered"], float(counts.registered))
    by_state.add_metric(["releasing"], float(counts.releasing))
    yield by_state
    # The counters differ only in name, help and count.
    for name, documentation, value in (
        (
            "resource_manager_workers_started",
            "Task executors the resource manager asked its driver to start since it leads.",
            counts.requested_total,
        ),
        (
            "resource_manager_workers_failed",
            "Task executors that failed to start, did not register in time or ended unexpectedly.",
            counts.failed_total,
        ),
        (
            "resource_manager_workers_released",
            "Task executors the resource manager stopped because they were idle.",
            counts.released_total,
        ),
        (
            "resource_manager_workers_recovered",
            "Task executors of a previous leader that this one found running and adopted.",
            counts.recovered_total,
        ),
    ):
        total = counter(name, documentation)
        total.add_metric([], float(value))
        yield total
    paused = gauge(
        "resource_manager_worker_starts_paused",
        "1 while the start failures of the last minute have reached "
        "resourcemanager.start-worker.max-failure-rate and no task executor is started, else 0.",
    )
    paused.add_metric([], 1.0 if counts.starts_paused else 0.0)
    yield paused


def register(rm: ResourceManager, metrics: ProcessMetrics) -> None:
    metrics.register(ResourceManagerCollector(rm))
    wait = Histogram(
        PREFIX + "resource_manager_slot_request_wait_seconds",
        "Time from a JobMaster's need of a slot (its declaration) to the slot's allocation.",
        buckets=SLOT_REQUEST_WAIT_BUCKETS,
        registry=metrics.registry,
    )
    rm.slot_request_served = wait.observe
