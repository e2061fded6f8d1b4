"""The harness of the resource manager's worker accounting (ActiveWorkers) in unit tests: a
testing driver that records what it is asked and lets the test answer in its place, a
hand-written slot demand, manual time, and the worker samples the metrics collector exposes."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import Metric

from sparkmill.common.core.ids import ResourceID
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.services.resourcemanager.active_workers import (
    ActiveWorkers,
    ActiveWorkerSettings,
)
from sparkmill.services.resourcemanager.metrics import ResourceManagerCollector
from sparkmill.services.resourcemanager.worker_driver import WorkerEvents, WorkerSpec

SPEC = WorkerSpec(slots=2, cpu_cores=2.0, memory_mb=1024)


class TestingWorkerDriver:
    """Records what it is asked; the test answers in its place (as a driver would, later)."""

    __test__ = False  # a test helper, not a test class

    def __init__(self) -> None:
        self.events: WorkerEvents | None = None
        self.requested: list[ResourceID] = []
        self.released: list[ResourceID] = []
        self.closed = False

    @property
    def name(self) -> str:
        return "testing"

    def start(self, events: WorkerEvents) -> None:
        self.events = events

    def request_worker(self, resource_id: ResourceID, spec: WorkerSpec) -> None:
        assert spec == SPEC
        self.requested.append(resource_id)

    def release_worker(self, resource_id: ResourceID) -> None:
        self.released.append(resource_id)

    async def close(self) -> None:
        self.closed = True


class TestingSlotDemand:
    """The resource manager's side of the accounting (its ``SlotDemand``), set by the test."""

    __test__ = False  # a test helper, not a test class

    def __init__(self) -> None:
        self.waiting = 0
        self.registered = 0
        self.idle: set[ResourceID] = set()
        self.closed: list[ResourceID] = []

    def waiting_slot_requests(self) -> int:
        return self.waiting

    def registered_slots(self) -> int:
        return self.registered

    def is_idle(self, resource_id: ResourceID) -> bool:
        return resource_id in self.idle

    def close_task_executor(self, resource_id: ResourceID, cause: str) -> None:
        self.closed.append(resource_id)


class Harness:
    """An ActiveWorkers with a testing driver, a testing slot demand and manual time."""

    def __init__(
        self, recovered: Sequence[ResourceID] | None = (), **settings: float | int | bool
    ) -> None:
        """``recovered``: what the driver reports to have found running at start (``None``:
        no report yet)."""
        self.driver = TestingWorkerDriver()
        self.timers = ManualTimerService()
        self.demand = TestingSlotDemand()
        self.workers = ActiveWorkers(
            self.driver,
            self.timers,
            self.demand,
            ActiveWorkerSettings(
                spec=SPEC,
                min_slots=int(settings.get("min_slots", 0)),
                max_slots=int(settings.get("max_slots", 100)),
                registration_timeout_s=float(settings.get("registration_timeout_s", 60.0)),
                start_retry_interval_s=float(settings.get("start_retry_interval_s", 3.0)),
                wait_result_consumed=bool(settings.get("wait_result_consumed", True)),
                max_start_failure_rate=float(settings.get("max_start_failure_rate", 10.0)),
                recovery_timeout_s=float(settings.get("recovery_timeout_s", 50.0)),
            ),
        )
        self.workers.start()
        if recovered is not None:
            self.workers.on_previous_workers_recovered(list(recovered))

    def ask(self, waiting: int) -> int:
        self.demand.waiting = waiting
        return self.workers.check_resource_needs()

    def register(self, resource_id: ResourceID) -> None:
        """The driver started the worker, and it registered its slots."""
        self.workers.on_worker_started(resource_id)
        self.demand.registered += SPEC.slots
        self.workers.on_worker_registered(resource_id)
        self.demand.waiting = max(0, self.demand.waiting - SPEC.slots)

    def registered_worker(self) -> ResourceID:
        self.ask(1)
        resource_id = self.driver.requested[-1]
        self.register(resource_id)
        return resource_id


def worker_samples(collector: ResourceManagerCollector) -> dict[tuple[str, str], float]:
    """The collector's worker samples by name and ``state`` label (``""`` when it has none)."""
    metrics: list[Metric] = list(collector.collect())
    return {
        (sample.name, sample.labels.get("state", "")): sample.value
        for metric in metrics
        for sample in metric.samples
        if "worker" in sample.name
    }
