"""The accounting of the task executors the resource manager starts itself (Flink's
``ActiveResourceManager`` with the worker bookkeeping of its ``SlotManager``).

:class:`ActiveWorkers` is pure, single-threaded state owned by the resource manager's event loop,
like the :class:`~.slot_manager.SlotManager`: it does no I/O. It asks a
:class:`~.worker_driver.WorkerDriver` to start and stop workers, learns the answers through
:class:`~.worker_driver.WorkerEvents`, and reads the slot demand from the resource manager
(:class:`SlotDemand`). Its rules:

* **Start on demand.** Slot requests that wait for a slot, minus the slots of the workers
  still starting, are the slots missing; enough workers of :attr:`ActiveWorkerSettings.spec`
  are requested to cover them, and enough to keep ``slotmanager.number-of-slots.min`` slots.
* **Bounded.** The slots of registered task executors plus those of starting workers never
  exceed ``slotmanager.number-of-slots.max``: beyond it requests wait (and time out).
* **Registration timeout.** A worker not registered within
  ``resourcemanager.taskmanager-registration.timeout`` of its request is stopped; it counts as a
  failed start, and a replacement is requested if its slots are still missing.
* **Cool-down.** After a failed start (the driver could not start it, it ended before it
  registered, or it timed out) no worker is requested for
  ``resourcemanager.start-worker.retry-interval``: a broken installation must not become a fork
  loop. Flink pauses only once a failure rate is exceeded; one pause per failure is simpler and
  starts a healthy cluster just as fast.
* **Failure rate.** Once the failures of the last minute (failed starts, and workers that ended
  or were lost unexpectedly) reach ``resourcemanager.start-worker.max-failure-rate``, no worker
  is requested until the rate is below it again (:mod:`.start_failure_rate`): a task executor
  that exits at once is started at most that often a minute, not every retry interval.
* **Idle release.** A worker whose slots have all been free for
  ``resourcemanager.taskmanager-timeout`` (the slot manager says so) is stopped, unless it still
  holds results a connected job may read (its heartbeat's slot report says so, with
  ``resourcemanager.taskmanager-release.wait.result.consumed``) or its slots are needed to keep
  the minimum. It is released later, at a report that says it holds nothing any more.

* **Adoption after a failover.** When this resource manager gains leadership, the driver
  reports the workers it found running (a previous leader's). Until it has, no worker is
  requested (the demand may be theirs). Each one counts as started; one that does not register
  within ``resourcemanager.previous-worker.recovery.timeout`` is stopped (released, not a failed
  start: it may simply have been stopping). A recovered worker that registered before the
  driver's report came is adopted as registered. A report that comes after the bound (a host
  slow to answer) is still taken: its workers are adopted then, so that none of them stays
  registered but never released; what was started meanwhile goes when idle.

Task executors someone else started are never stopped: only this class's workers are. Closing
(leadership lost) stops nothing: the workers wait for the next leader.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable
from dataclasses import dataclass

from sparkmill.common.core.ids import ResourceID, new_resource_id, short
from sparkmill.common.runtime.timers import TimerService
from sparkmill.services.resourcemanager.active_worker_types import (
    ActiveWorkerSettings,
    SlotDemand,
    WorkerCounts,
)
from sparkmill.services.resourcemanager.start_failure_rate import StartFailureRate
from sparkmill.services.resourcemanager.worker_driver import (
    WORKER_STATE_TRANSITIONS,
    WorkerDriver,
    WorkerSpec,
    WorkerState,
)

log = logging.getLogger(__name__)

_STARTING = (WorkerState.REQUESTED, WorkerState.STARTED)


@dataclass(eq=False, slots=True)
class Worker:
    resource_id: ResourceID
    spec: WorkerSpec
    state: WorkerState = WorkerState.REQUESTED
    holds_results: bool = False  # from its last slot report
    idle: bool = False  # the slot manager said it is idle; not released yet
    recovered: bool = False  # a previous leader's, found running by the driver


class ActiveWorkers:
    def __init__(
        self,
        driver: WorkerDriver,
        timers: TimerService,
        demand: SlotDemand,
        settings: ActiveWorkerSettings,
    ) -> None:
        self.driver = driver
        self.settings = settings
        self._timers = timers
        self._demand = demand
        self._workers: dict[ResourceID, Worker] = {}
        self._timer_owner = object()
        self._cool_down_until = -math.inf
        self._closed = False
        self._at_max_logged = False
        self._failures = StartFailureRate(settings.max_start_failure_rate)
        self._paused_until: float | None = None  # a pause already logged and timed
        self._no_room = ""  # the driver's last "every host is full", until a start succeeds
        # Until the driver reported the previous leader's workers, no worker is requested.
        self._recovering = True
        # Registered task executors that are not (yet) workers, with whether their last slot
        # report said they hold results, and those of them the slot manager found idle: the
        # driver's report may name some of them, to adopt as they are (a worker holding results
        # must not be released at its adoption). At most one entry per registered executor.
        self._registered_unowned: dict[ResourceID, bool] = {}
        self._idle_unowned: set[ResourceID] = set()
        self.recovered_total = 0
        self.requested_total = 0
        self.failed_total = 0
        self.released_total = 0

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        # A driver that never reports what it recovered must not block the cluster for ever.
        self._timers.schedule(
            self._key("recovery", None),
            self.settings.recovery_timeout_s,
            lambda: self._end_recovery("the driver did not report the running workers in time"),
        )
        self.driver.start(self)

    async def close(self) -> None:
        """Forget the workers (the resource manager stops or lost its leadership); they keep
        running for the next leader to adopt."""
        self._closed = True
        for worker in self._workers.values():
            self._timers.cancel(self._key("registration", worker.resource_id))
        self._timers.cancel(self._key("cool-down", None))
        self._timers.cancel(self._key("failure-rate", None))
        self._timers.cancel(self._key("recovery", None))
        self._workers.clear()
        await self.driver.close()

    # ---------------------------------------------------------------- demand

    def check_resource_needs(self) -> int:
        """Request the workers the waiting slot requests and the minimum need, within the
        maximum and outside a cool-down; how many were requested."""
        if self._closed or self._recovering:
            return 0
        slots_per_worker = self.settings.spec.slots
        pending = sum(w.spec.slots for w in self._workers.values() if w.state in _STARTING)
        registered = self._demand.registered_slots()
        missing = max(
            self._demand.waiting_slot_requests() - pending,
            self.settings.min_slots - registered - pending,
            0,
        )
        if missing == 0:
            self._at_max_logged = False
            return 0
        wanted = math.ceil(missing / slots_per_worker)
        room = max(0, (self.settings.max_slots - registered - pending) // slots_per_worker)
        if wanted > room and not self._at_max_logged:
            log.warning(
                "%d slot(s) missing but only %d more worker(s) of %d slots fit under "
                "slotmanager.number-of-slots.max (%d): slot requests wait",
                missing,
                room,
                slots_per_worker,
                self.settings.max_slots,
            )
            self._at_max_logged = True
        count = min(wanted, room)
        if count and self._timers.now() < self._cool_down_until:
            return 0  # the cool-down's timer checks again
        if count and self._starts_paused():
            return 0  # the pause's timer checks again
        for _ in range(count):
            self._request_worker()
        return count

    def _request_worker(self) -> None:
        resource_id = new_resource_id()
        worker = Worker(resource_id, self.settings.spec)
        self._workers[resource_id] = worker
        self.requested_total += 1
        self._timers.schedule(
            self._key("registration", resource_id),
            self.settings.registration_timeout_s,
            lambda: self._on_registration_timeout(worker),
        )
        log.info(
            "requesting worker %s (%d slots) from the %s driver",
            short(resource_id),
            worker.spec.slots,
            self.driver.name,
        )
        self.driver.request_worker(resource_id, worker.spec)

    # ---------------------------------------------------------------- driver events

    def on_worker_started(self, resource_id: ResourceID) -> None:
        worker = self._workers.get(resource_id)
        if worker is not None and worker.state is WorkerState.REQUESTED:
            self._no_room = ""
            self._set_state(worker, WorkerState.STARTED)

    def on_worker_start_failed(self, resource_id: ResourceID, cause: str) -> None:
        worker = self._workers.get(resource_id)
        if worker is not None and worker.state is WorkerState.RELEASING:
            self._terminated(worker, failed=False)  # released while starting: it never ran
            return
        if worker is None or worker.state not in _STARTING:
            return
        log.warning("worker %s could not be started: %s", short(resource_id), cause)
        self._terminated(worker, failed=True)
        self.check_resource_needs()

    def on_worker_start_refused(self, resource_id: ResourceID, cause: str) -> None:
        worker = self._workers.get(resource_id)
        if worker is None or worker.state not in (*_STARTING, WorkerState.RELEASING):
            return
        if worker.state is not WorkerState.RELEASING:
            log.info("no room for worker %s: %s", short(resource_id), cause)
            self._no_room = cause
            # Not a failure (no failure rate), but no new request until a pause has passed
            # or a worker ended: asking again at once would be refused again at once.
            self._start_cool_down()
        self._terminated(worker, failed=False)

    def on_worker_terminated(self, resource_id: ResourceID, diagnostics: str) -> None:
        worker = self._workers.get(resource_id)
        if worker is None:
            return
        expected = worker.state is WorkerState.RELEASING
        self._no_room = ""  # its room is free again
        if not expected:
            log.warning("worker %s ended: %s", short(resource_id), diagnostics)
        self._demand.close_task_executor(resource_id, f"its process ended: {diagnostics}")
        # A previous leader's worker that ends before it registered again may have been
        # stopping already: not a failed start (no cool-down).
        adopting = worker.recovered and worker.state is WorkerState.STARTED
        self._terminated(worker, failed=not expected and not adopting)
        self.check_resource_needs()

    def on_previous_workers_recovered(self, resource_ids: list[ResourceID]) -> None:
        if self._closed:
            return
        late = not self._recovering
        adopted: list[Worker] = []
        for resource_id in resource_ids:
            if resource_id in self._workers:
                continue
            worker = Worker(resource_id, self.settings.spec, WorkerState.STARTED, recovered=True)
            self._workers[resource_id] = worker
            self.recovered_total += 1
            adopted.append(worker)
            if resource_id in self._registered_unowned:
                worker.holds_results = self._registered_unowned.pop(resource_id)
                self._set_state(worker, WorkerState.REGISTERED)
                worker.idle = resource_id in self._idle_unowned
                self._idle_unowned.discard(resource_id)
            else:
                self._schedule_recovery_timeout(worker)
        log.info(
            "adopted %d running worker(s) of a previous leader from the %s driver%s",
            len(adopted),
            self.driver.name,
            " (its report came after resourcemanager.previous-worker.recovery.timeout)"
            if late
            else "",
        )
        if not late:
            self._end_recovery("")
            return
        for worker in adopted:
            if worker.idle:
                self._try_release_idle(worker)

    def _end_recovery(self, problem: str) -> None:
        if not self._recovering or self._closed:
            return
        if problem:
            log.warning("starting workers without the previous leader's: %s", problem)
        self._recovering = False
        self._timers.cancel(self._key("recovery", None))
        self.check_resource_needs()
        for worker in list(self._workers.values()):
            if worker.recovered and worker.idle and worker.state is WorkerState.REGISTERED:
                self._try_release_idle(worker)

    # ---------------------------------------------------------------- resource manager events

    def is_worker(self, resource_id: ResourceID) -> bool:
        return resource_id in self._workers

    def on_worker_registered(self, resource_id: ResourceID) -> None:
        """The task executor registered its slots with the slot manager."""
        worker = self._workers.get(resource_id)
        if worker is None:
            self._registered_unowned.setdefault(resource_id, False)
        if worker is not None and worker.state is WorkerState.RELEASING:
            # Released before it registered (idle, or its registration timed out): its slots
            # must not be handed out while it is being stopped.
            self._demand.close_task_executor(resource_id, "released before it registered")
            return
        if worker is None or worker.state not in _STARTING:
            return
        if worker.state is WorkerState.REQUESTED:  # its start's answer is still on its way
            self._set_state(worker, WorkerState.STARTED)
        self._set_state(worker, WorkerState.REGISTERED)
        self._timers.cancel(self._key("registration", resource_id))

    def on_slot_report(self, resource_id: ResourceID, holds_results: bool) -> None:
        worker = self._workers.get(resource_id)
        if worker is None:
            if resource_id in self._registered_unowned:
                self._registered_unowned[resource_id] = holds_results
            return
        worker.holds_results = holds_results
        if worker.idle and worker.state is WorkerState.REGISTERED:
            self._try_release_idle(worker)

    def on_idle(self, resource_id: ResourceID) -> None:
        """The slot manager found the task executor idle for the task manager timeout."""
        worker = self._workers.get(resource_id)
        if worker is None and resource_id in self._registered_unowned:
            self._idle_unowned.add(resource_id)
        if worker is None or worker.state is not WorkerState.REGISTERED:
            return
        worker.idle = True
        self._try_release_idle(worker)

    def on_task_executor_closed(self, resource_id: ResourceID) -> None:
        """Its registration ended (lost, disconnected or replaced): not a candidate for
        adoption any more unless it registers again."""
        self._registered_unowned.pop(resource_id, None)
        self._idle_unowned.discard(resource_id)

    def on_task_executor_lost(self, resource_id: ResourceID, cause: str) -> None:
        """Its heartbeats stopped: the process may hang, so it is stopped (and replaced if its
        slots are still needed)."""
        worker = self._workers.get(resource_id)
        if worker is None or worker.state is not WorkerState.REGISTERED:
            return
        self._record_failure()
        self._release(worker, f"the task executor was lost: {cause}")
        self.check_resource_needs()

    # ---------------------------------------------------------------- queries

    def counts(self) -> WorkerCounts:
        states = [w.state for w in self._workers.values()]
        now = self._timers.now()
        return WorkerCounts(
            pending=sum(1 for s in states if s in _STARTING),
            registered=states.count(WorkerState.REGISTERED),
            releasing=states.count(WorkerState.RELEASING),
            requested_total=self.requested_total,
            failed_total=self.failed_total,
            released_total=self.released_total,
            recovered_total=self.recovered_total,
            recent_failures=self._failures.recent(now),
            starts_paused=self._failures.paused_until(now) is not None,
        )

    def more_slots_advice(self) -> str:
        """Why this accounting did not start the task executors a timed-out request needed."""
        counts = self.counts()
        slots = (counts.pending + counts.registered) * self.settings.spec.slots
        advice = (
            f"The resource manager starts task executors itself (resourcemanager.driver: "
            f"{self.driver.name}) up to slotmanager.number-of-slots.max = "
            f"{self.settings.max_slots} slot(s); its workers have {slots} now"
        )
        if self.failed_total:
            advice += (
                f", and {self.failed_total} start(s) failed (see the resource manager's log "
                "and the workers' logs)"
            )
        paused = self._failure_rate_pause()
        if paused:
            advice += f"; {paused}"
        return advice + (
            ". Raise the maximum, give the task executors bigger slots, or lower the job's "
            "parallelism or slot profile"
        )

    def wait_reason(self) -> str:
        """Why waiting slot requests have no slot yet (shown on the jobs while they wait)."""
        if self._recovering:
            return (
                f"the resource manager waits for its {self.driver.name} driver to report the "
                "task executors a previous leader started (at most "
                "resourcemanager.previous-worker.recovery.timeout) before it starts any"
            )
        paused = self._failure_rate_pause()
        if paused:
            return paused
        slots_per_worker = self.settings.spec.slots
        pending = sum(1 for w in self._workers.values() if w.state in _STARTING)
        slots = self._demand.registered_slots() + pending * slots_per_worker
        reasons = []
        if slots + slots_per_worker > self.settings.max_slots:
            reasons.append(
                f"the resource manager is at slotmanager.number-of-slots.max = "
                f"{self.settings.max_slots} (its task executors have {slots} slot(s), "
                f"{slots_per_worker} per task executor); raise the maximum or wait for other "
                "jobs to free slots"
            )
        if pending:
            reasons.append(
                f"{pending} task executor(s) are starting (resourcemanager.driver: "
                f"{self.driver.name})"
            )
        left = self._cool_down_until - self._timers.now()
        if self._no_room:
            reasons.append(self._no_room)
        elif left > 0:
            reasons.append(
                f"a task executor failed to start: the next one starts in {left:.0f}s "
                "(resourcemanager.start-worker.retry-interval)"
            )
        return "; ".join(reasons)

    def workers(self) -> dict[ResourceID, WorkerState]:
        return {rid: w.state for rid, w in self._workers.items()}

    # ---------------------------------------------------------------- internals

    def _on_registration_timeout(self, worker: Worker) -> None:
        if self._workers.get(worker.resource_id) is not worker or worker.state not in _STARTING:
            return
        cause = (
            "it did not register within resourcemanager.taskmanager-registration.timeout "
            f"({self.settings.registration_timeout_s:g}s)"
        )
        log.warning("stopping worker %s: %s", short(worker.resource_id), cause)
        self._record_failure()
        self._start_cool_down()
        self._release(worker, cause)
        self.check_resource_needs()

    def _schedule_recovery_timeout(self, worker: Worker) -> None:
        self._timers.schedule(
            self._key("registration", worker.resource_id),
            self.settings.recovery_timeout_s,
            lambda: self._on_recovery_timeout(worker),
        )

    def _on_recovery_timeout(self, worker: Worker) -> None:
        if self._workers.get(worker.resource_id) is not worker or worker.state not in _STARTING:
            return
        self.released_total += 1
        self._release(
            worker,
            "a previous leader's worker that did not register within "
            "resourcemanager.previous-worker.recovery.timeout "
            f"({self.settings.recovery_timeout_s:g}s)",
        )
        self.check_resource_needs()

    def _try_release_idle(self, worker: Worker) -> None:
        if not self._demand.is_idle(worker.resource_id):
            worker.idle = False  # used again: the slot manager reports its next idle time
            return
        if self.settings.wait_result_consumed and worker.holds_results:
            log.debug("idle worker %s still holds results", short(worker.resource_id))
            return
        if self._demand.registered_slots() - worker.spec.slots < self.settings.min_slots:
            return  # needed for slotmanager.number-of-slots.min
        self.released_total += 1
        self._release(worker, "it was idle for resourcemanager.taskmanager-timeout")

    def _release(self, worker: Worker, cause: str) -> None:
        log.info("releasing worker %s: %s", short(worker.resource_id), cause)
        self._timers.cancel(self._key("registration", worker.resource_id))
        self._set_state(worker, WorkerState.RELEASING)
        # Forgotten first, so that no slot is allocated on a task executor being stopped.
        self._demand.close_task_executor(worker.resource_id, f"released: {cause}")
        self.driver.release_worker(worker.resource_id)

    def _terminated(self, worker: Worker, *, failed: bool) -> None:
        if failed:
            self._record_failure()
            if worker.state in _STARTING:
                self._start_cool_down()
        self._timers.cancel(self._key("registration", worker.resource_id))
        self._set_state(worker, WorkerState.TERMINATED)
        del self._workers[worker.resource_id]

    def _record_failure(self) -> None:
        self.failed_total += 1
        self._failures.record(self._timers.now())

    def _starts_paused(self) -> bool:
        """Whether the failure rate stops new workers; the first time per pause, says so and
        sets a timer for its end."""
        now = self._timers.now()
        until = self._failures.paused_until(now)
        if until is None:
            return False
        if self._paused_until != until:
            self._paused_until = until
            log.warning(
                "no task executor is started for %.0fs: %d start(s) failed within a minute, "
                "resourcemanager.start-worker.max-failure-rate is %g per minute (the workers' "
                "logs say why they failed)",
                until - now,
                self._failures.recent(now),
                self._failures.max_per_minute,
            )
            self._timers.schedule(
                self._key("failure-rate", None), until - now, lambda: self._after_cool_down()
            )
        return True

    def _failure_rate_pause(self) -> str:
        now = self._timers.now()
        until = self._failures.paused_until(now)
        if until is None:
            return ""
        return (
            f"starting task executors is paused for {until - now:.0f}s: "
            f"{self._failures.recent(now)} start(s) failed within a minute, and "
            "resourcemanager.start-worker.max-failure-rate is "
            f"{self._failures.max_per_minute:g} per minute (see the workers' logs for why "
            "they failed)"
        )

    def _start_cool_down(self) -> None:
        interval = self.settings.start_retry_interval_s
        self._cool_down_until = self._timers.now() + interval
        self._timers.schedule(
            self._key("cool-down", None), interval, lambda: self._after_cool_down()
        )

    def _after_cool_down(self) -> None:
        self.check_resource_needs()

    def _set_state(self, worker: Worker, target: WorkerState) -> None:
        WORKER_STATE_TRANSITIONS.check(worker.state, target, short(worker.resource_id))
        worker.state = target

    def _key(self, kind: str, subject: Hashable) -> Hashable:
        return (self._timer_owner, kind, subject)


__all__ = ["ActiveWorkerSettings", "ActiveWorkers", "SlotDemand", "WorkerCounts"]
