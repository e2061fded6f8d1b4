"""How the resource manager starts and stops task executors itself (Flink's
``ResourceManagerDriver`` and ``ResourceEventHandler``), and a worker's lifecycle.

A *worker* is a task executor process the resource manager asked a driver for. The accounting
(how many to start, when to stop one) is :class:`~.active_workers.ActiveWorkers`; a driver only
knows how to start and stop a process on its kind of infrastructure:

* ``local`` (:mod:`.local_worker_driver`): child processes on the resource manager's host;
* ``systemd`` (:mod:`.systemd_worker_driver`): template units on a list of hosts, through
  ``systemctl`` over SSH.

Nothing in the accounting depends on which driver runs.

Workers outlive the resource manager that started them (Flink keeps its TaskManagers across a
JobManager failover the same way): when a resource manager gains leadership its driver looks for
the workers already running (the previous leader's) and reports them once, with
``on_previous_workers_recovered``; the accounting counts them as started, so the demand they
will serve again once they re-register does not start duplicates.

Like the slot manager's ``ResourceActions``, a driver's calls return at once and answer later,
on the resource manager's event loop, through the :class:`WorkerEvents` it was given: the
accounting stays single-threaded, pure state that unit tests drive by hand.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from sparkmill.common.core.ids import ResourceID
from sparkmill.common.core.state_machine import TransitionTable


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What one worker offers (Flink's ``WorkerResourceSpec``): its slots and the resources
    it announces (``taskmanager.numberOfTaskSlots``, ``taskmanager.cpu.cores``,
    ``taskmanager.memory.process.size``)."""

    slots: int
    cpu_cores: float
    memory_mb: int

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"a worker needs at least one slot, not {self.slots}")


class WorkerState(enum.Enum):
    """A worker's life as the resource manager sees it."""

    REQUESTED = "REQUESTED"  # the driver was asked to start it
    STARTED = "STARTED"  # its process runs; its slots are not registered yet
    REGISTERED = "REGISTERED"  # it registered and reported its slots
    RELEASING = "RELEASING"  # the driver was asked to stop it
    TERMINATED = "TERMINATED"  # gone (start failed, exited, or stopped)


WORKER_STATE_TRANSITIONS: TransitionTable[WorkerState] = TransitionTable(
    "worker",
    {
        WorkerState.REQUESTED: {
            WorkerState.STARTED,
            WorkerState.RELEASING,
            WorkerState.TERMINATED,
        },
        WorkerState.STARTED: {
            WorkerState.REGISTERED,
            WorkerState.RELEASING,
            WorkerState.TERMINATED,
        },
        WorkerState.REGISTERED: {WorkerState.RELEASING, WorkerState.TERMINATED},
        WorkerState.RELEASING: {WorkerState.TERMINATED},
        WorkerState.TERMINATED: set(),
    },
)


class WorkerEvents(Protocol):
    """What a driver reports, always on the resource manager's event loop and never from
    inside one of the driver's own calls (Flink's ``ResourceEventHandler``)."""

    def on_worker_started(self, resource_id: ResourceID) -> None:
        """The worker's process runs (it has yet to register)."""
        ...

    def on_worker_start_failed(self, resource_id: ResourceID, cause: str) -> None:
        """The driver could not start the worker."""
        ...

    def on_worker_start_refused(self, resource_id: ResourceID, cause: str) -> None:
        """The driver has no room for the worker now (every host it may use is full): not a
        failure of the installation, so it counts toward no failure rate; the resource
        manager asks again after a pause or when a worker ends."""
        ...

    def on_worker_terminated(self, resource_id: ResourceID, diagnostics: str) -> None:
        """The worker's process ended, whoever stopped it."""
        ...

    def on_previous_workers_recovered(self, resource_ids: list[ResourceID]) -> None:
        """The workers found running when the driver started (a previous leader's), reported
        exactly once after :meth:`WorkerDriver.start`, possibly empty (Flink's
        ``onPreviousAttemptWorkersRecovered``). Later ends of these are reported with
        ``on_worker_terminated`` like any other."""
        ...


class WorkerDriver(Protocol):
    """Starts and stops workers on one kind of infrastructure (Flink's
    ``ResourceManagerDriver``). The resource manager chooses each worker's resource id; the
    worker registers under it (``taskmanager.resource-id``)."""

    @property
    def name(self) -> str:
        """The ``resourcemanager.driver`` value it implements."""
        ...

    def start(self, events: WorkerEvents) -> None:
        """Begin (this resource manager leads): look for running workers and report them with
        ``on_previous_workers_recovered``; later answers go to ``events``."""
        ...

    def request_worker(self, resource_id: ResourceID, spec: WorkerSpec) -> None:
        """Start a worker; answer with ``on_worker_started`` or ``on_worker_start_failed``."""
        ...

    def release_worker(self, resource_id: ResourceID) -> None:
        """Stop a worker (gracefully, then by force after a bound); its end is reported with
        ``on_worker_terminated``."""
        ...

    async def close(self) -> None:
        """Stop reporting (leadership lost, or the resource manager stops). The workers keep
        running, for the next leader to adopt; stopping them all is the deployment's business
        (``local-cluster down``, ``systemctl stop sparkmill.target``). A worker whose resource
        manager never comes back ends itself after ``taskmanager.registration.timeout``."""
        ...


__all__ = [
    "WORKER_STATE_TRANSITIONS",
    "WorkerDriver",
    "WorkerEvents",
    "WorkerSpec",
    "WorkerState",
]
