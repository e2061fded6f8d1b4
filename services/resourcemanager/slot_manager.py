"""The resource manager's slot bookkeeping: which task executor slots exist, which are free,
which job holds which, and which slot requests are still waiting.

The :class:`SlotManager` is pure, single-threaded state owned by the resource manager's event
loop. It does no I/O: every outward effect goes through the injected :class:`ResourceActions`,
and every asynchronous answer comes back as a method call (:meth:`SlotManager.on_allocation_result`,
:meth:`SlotManager.free_slot`, :meth:`SlotManager.report_slot_status`). Timeouts run on an
injected :class:`~sparkmill.common.runtime.timers.TimerService`. Actions must not call back into
the slot manager synchronously; their results are delivered later, on the loop.

Life of a slot request (``register_slot_request``)::

    WAITING --(matching free slot)--> ALLOCATING --(task executor says yes)--> ALLOCATED
       ^                                   |
       +---(refused / timed out / TE lost)-+        WAITING --(deadline)--> failed

* ``slot_request_timeout_s`` bounds how long a request may go unserved, measured from its
  registration. It runs while the request waits; a request that has to wait again after a failed
  attempt gets what is left of it (a request past its deadline fails at the next timer tick).
* ``allocation_timeout_s`` bounds one attempt (the task executor's ``requestSlot``); when it
  passes, the attempt counts as failed and the request is retried.
* A refused attempt is retried at once on another free slot. When there is none, the refusing
  slot is tried again after :data:`REFUSED_SLOT_RETRY_DELAY_S`: a task executor refuses a slot
  request that overtakes the answer to its own registration, and a request left waiting next to
  a free slot would wait out its whole deadline (Flink's slot manager checks its requirements
  again after a failed allocation, too).
* A task executor whose slots are all free for ``task_manager_idle_timeout_s`` is reported
  through :meth:`ResourceActions.notify_idle_task_executor`; it is reported again only after it
  has been used and has become idle once more.

Lost allocations (slots allocated on a task executor that unregisters) are *returned* by
:meth:`SlotManager.unregister_task_executor`; the resource manager decides whom to tell.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Hashable, Iterable

from sparkmill.common.core.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    IllegalStateBug,
    NotFoundError,
    ResourceExhaustedError,
    RpcError,
)
from sparkmill.common.core.ids import AllocationID, InstanceID, JobID, ResourceID, short
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.slots import SlotID, SlotReport
from sparkmill.common.runtime.timers import TimerService
from sparkmill.services.resourcemanager.slot_requests import (
    AllocationInfo,
    AllocationStatus,
    ResourceActions,
    SlotRequest,
)
from sparkmill.services.resourcemanager.task_executor_registration import TaskExecutorRegistration
from sparkmill.services.resourcemanager.task_executor_slots import (
    SLOT_STATE_TRANSITIONS,
    PendingSlotRequest,
    SlotInfo,
    SlotState,
    TrackedSlot,
    TrackedTaskExecutor,
    find_free_slot,
    slot_size,
)

log = logging.getLogger(__name__)

# How long a slot that refused an allocation rests before waiting requests may try it again.
REFUSED_SLOT_RETRY_DELAY_S = 0.5


class SlotManager:
    def __init__(
        self,
        timer_service: TimerService,
        actions: ResourceActions,
        slot_request_timeout_s: float,
        task_manager_idle_timeout_s: float,
        spread_out: bool = True,
        allocation_timeout_s: float = 10.0,
        on_request_served: Callable[[float], None] | None = None,
    ) -> None:
        timeouts = (slot_request_timeout_s, task_manager_idle_timeout_s, allocation_timeout_s)
        if min(timeouts) <= 0:
            raise ValueError(
                "slot_request_timeout_s, task_manager_idle_timeout_s and allocation_timeout_s "
                f"must be positive, got {timeouts}"
            )
        self._timers = timer_service
        self._actions = actions
        self._request_timeout_s = slot_request_timeout_s
        self._idle_timeout_s = task_manager_idle_timeout_s
        self._allocation_timeout_s = allocation_timeout_s
        self._spread_out = spread_out
        self._on_request_served = on_request_served  # gets the seconds a served request waited
        self._timer_owner = object()  # keeps our timer keys apart on a shared timer service
        self._seq = itertools.count()
        self._tes: dict[InstanceID, TrackedTaskExecutor] = {}  # registration order
        self._by_resource: dict[ResourceID, InstanceID] = {}
        self._slots: dict[SlotID, TrackedSlot] = {}
        self._requests: dict[AllocationID, PendingSlotRequest] = {}  # live: waiting or allocating
        self._waiting: dict[AllocationID, PendingSlotRequest] = {}  # ordered by seq
        self._allocated: dict[AllocationID, TrackedSlot] = {}
        self._counts: dict[SlotState, int] = dict.fromkeys(SlotState, 0)
        self._free_by_profile: dict[ResourceProfile, int] = {}  # only counts > 0
        # Told when a request is served (its slot now holds its allocation id) and when a
        # slot's allocation ends (freed, lost, replaced): the declared requirements follow both.
        # Called in the middle of the bookkeeping: they must not call back into it.
        self.on_request_absorbed: Callable[[AllocationID], None] | None = None
        self.on_allocation_ended: Callable[[AllocationID], None] | None = None
        self.on_slot_free: Callable[[], None] | None = None

    # ---------------------------------------------------------------- task executors

    def register_task_executor(
        self,
        instance_id: InstanceID,
        registration: TaskExecutorRegistration,
        slot_report: SlotReport,
    ) -> bool:
        """Register a task executor and its slots; ``False`` if the instance is known already
        (its report is then reconciled like a heartbeat's). Slot statuses with an unknown
        profile get the registration's ``default_slot_profile``."""
        resource_id = registration.resource_id
        if instance_id in self._tes:
            self.report_slot_status(instance_id, slot_report)
            return False
        if resource_id in self._by_resource:
            raise IllegalStateBug(
                f"task executor {short(resource_id)} registers as {short(instance_id)} while "
                f"still registered as {short(self._by_resource[resource_id])}; the resource "
                "manager must unregister the old instance first"
            )
        te = TrackedTaskExecutor(instance_id, registration)
        self._tes[instance_id] = te
        self._by_resource[resource_id] = instance_id
        for status in slot_report.slots:
            if status.slot_index in te.slots:
                log.warning("duplicate slot %d in the report of %s", status.slot_index, instance_id)
                continue
            profile = status.resource_profile
            slot = TrackedSlot(
                SlotID(resource_id, status.slot_index),
                instance_id,
                registration.default_slot_profile if profile.is_unknown else profile,
            )
            te.slots[status.slot_index] = slot
            self._slots[slot.slot_id] = slot
            self._counts[SlotState.FREE] += 1
            self._add_free(te, slot)
        self._schedule_idle(te)
        for status in slot_report.slots:
            if status.allocation_id is not None:
                self._mark_reported_allocated(
                    te.slots[status.slot_index], status.allocation_id, status.job_id
                )
        log.info("registered task executor %s with %d slots", short(instance_id), len(te.slots))
        self._serve_waiting()
        return True

    def unregister_task_executor(
        self, instance_id: InstanceID, cause: Exception | str
    ) -> list[SlotRequest]:
        """Forget a task executor. Attempts in flight to it are retried elsewhere (or wait
        again). Returns the allocations it held, by slot index, so the resource manager can tell
        their job masters; for allocations learnt only from slot reports the profile is the
        slot's and ``job_master_address`` is ``""``. Allocations of unknown owner are left out."""
        te = self._tes.pop(instance_id, None)
        if te is None:
            return []
        del self._by_resource[te.resource_id]
        self._timers.cancel(self._key("idle", instance_id))
        lost: list[SlotRequest] = []
        retry: list[PendingSlotRequest] = []
        for index in sorted(te.slots):
            slot = te.slots[index]
            if slot.state is SlotState.PENDING and slot.attempt is not None:
                self._timers.cancel(self._key("attempt", slot.slot_id))
                request, slot.attempt = slot.attempt, None
                request.slot = None
                if request.live:
                    retry.append(request)
            elif slot.state is SlotState.ALLOCATED and slot.allocation_id is not None:
                if slot.origin is not None:
                    lost.append(slot.origin)
                elif slot.job_id is not None:
                    lost.append(SlotRequest(slot.job_id, slot.allocation_id, slot.profile, ""))
                self._unassign(slot)
            elif slot.state is SlotState.FREE:
                self._count_free_profile(slot.profile, -1)
            self._counts[slot.state] -= 1
            del self._slots[slot.slot_id]
        log.info("unregistered task executor %s (%s)", short(instance_id), cause)
        for request in retry:
            self._retry(request, exclude=None)
        return lost

    def report_slot_status(self, instance_id: InstanceID, slot_report: SlotReport) -> bool:
        """Reconcile with a task executor's report; ``False`` for an unknown instance.
        Slots with an attempt in flight are left alone: the attempt's answer decides them."""
        te = self._tes.get(instance_id)
        if te is None:
            return False
        freed = False
        for status in slot_report.slots:
            slot = te.slots.get(status.slot_index)
            if slot is None or slot.state is SlotState.PENDING:
                continue
            if status.allocation_id is None:
                if slot.state is SlotState.ALLOCATED:
                    log.info("slot %s is free according to its task executor", slot.slot_id)
                    self._unassign(slot)
                    self._set_state(slot, SlotState.FREE)
                    freed = True
            elif slot.state is SlotState.FREE or slot.allocation_id != status.allocation_id:
                self._mark_reported_allocated(slot, status.allocation_id, status.job_id)
        if freed:
            self._serve_waiting()
        return True

    # ---------------------------------------------------------------- slot requests

    def register_slot_request(self, request: SlotRequest) -> bool:
        """Serve or queue a request; ``False`` if its allocation id is known already."""
        allocation_id = request.allocation_id
        if allocation_id in self._requests or allocation_id in self._allocated:
            return False
        entry = PendingSlotRequest(
            request, next(self._seq), self._timers.now() + self._timeout_of(request)
        )
        self._requests[allocation_id] = entry
        if not self._try_place(entry, exclude=None):
            log.debug("slot request %s waits for a slot", short(allocation_id))
            self._enqueue(entry)
        return True

    def unregister_slot_request(self, allocation_id: AllocationID) -> bool:
        """Cancel a request that is not served yet; ``False`` if there is none. If an attempt
        is in flight, its slot follows the task executor's answer but the request is not
        retried: a slot the task executor did allocate stays ALLOCATED until the task executor
        reports it free (it does, once the job master rejects the unwanted slot)."""
        entry = self._requests.pop(allocation_id, None)
        if entry is None:
            return False
        entry.live = False
        if self._waiting.pop(allocation_id, None) is not None:
            self._timers.cancel(self._key("request", allocation_id))
        return True

    def on_allocation_result(
        self, allocation_id: AllocationID, slot_id: SlotID, error: RpcError | None
    ) -> bool:
        """The task executor's answer to ``allocate_slot``; ``False`` if it is stale (the
        attempt timed out, was superseded, or the task executor is gone). An
        :class:`~sparkmill.common.core.errors.AlreadyExistsError` means the slot is taken by another
        allocation: it becomes ALLOCATED to an unknown owner until a report says more."""
        slot = self._slots.get(slot_id)
        if slot is None or slot.attempt is None:
            return False
        if slot.attempt.request.allocation_id != allocation_id:
            return False
        self._timers.cancel(self._key("attempt", slot_id))
        self._finish_attempt(slot, error)
        return True

    def free_slot(self, slot_id: SlotID, allocation_id: AllocationID) -> bool:
        """The task executor freed ``slot_id`` (which held ``allocation_id``); waiting requests
        are then served in order. ``False`` if that does not match our view (stale news)."""
        slot = self._slots.get(slot_id)
        if slot is None or slot.state is not SlotState.ALLOCATED:
            return False
        if slot.allocation_id is not None and slot.allocation_id != allocation_id:
            return False
        self._unassign(slot)
        self._set_state(slot, SlotState.FREE)
        self._serve_waiting()
        return True

    def suspend(self) -> None:
        """Forget everything and cancel all timers (the resource manager lost leadership)."""
        for allocation_id in self._waiting:
            self._timers.cancel(self._key("request", allocation_id))
        for slot in self._slots.values():
            if slot.attempt is not None:
                self._timers.cancel(self._key("attempt", slot.slot_id))
        for instance_id in self._tes:
            self._timers.cancel(self._key("idle", instance_id))
        self._timers.cancel(self._key("serve-waiting", None))
        self._tes.clear()
        self._by_resource.clear()
        self._slots.clear()
        self._requests.clear()
        self._waiting.clear()
        self._allocated.clear()
        self._counts = dict.fromkeys(SlotState, 0)
        self._free_by_profile.clear()

    # ---------------------------------------------------------------- queries

    def number_registered_task_executors(self) -> int:
        return len(self._tes)

    def is_idle(self, instance_id: InstanceID) -> bool:
        """Whether the task executor is registered with none of its slots in use."""
        te = self._tes.get(instance_id)
        return te is not None and te.used == 0

    def slot_counts(self) -> dict[SlotState, int]:
        return dict(self._counts)

    def number_pending_requests(self) -> int:
        """Requests waiting for a slot (attempts in flight are ``slot_counts()[PENDING]``)."""
        return len(self._waiting)

    def has_free_slot(
        self, profile: ResourceProfile, excluded: frozenset[ResourceID] = frozenset()
    ) -> bool:
        """Whether a request for ``profile``, on none of the ``excluded`` task executors, would
        get a slot at once."""
        return self._find_slot(profile, None, excluded) is not None

    def pending_requests(self) -> list[SlotRequest]:
        """The waiting requests, in the order they will be served."""
        return [entry.request for entry in self._waiting.values()]

    def task_executor_slots(self, instance_id: InstanceID) -> list[SlotInfo]:
        te = self._tes.get(instance_id)
        if te is None:
            raise NotFoundError(f"task executor {short(instance_id)} is not registered")
        return [
            SlotInfo(s.slot_id, s.state, s.profile, s.allocation_id, s.job_id)
            for _, s in sorted(te.slots.items())
        ]

    def allocation_of(self, allocation_id: AllocationID) -> AllocationInfo | None:
        entry = self._requests.get(allocation_id)
        if entry is not None:
            job_id = entry.request.job_id
            if entry.slot is None:
                return AllocationInfo(allocation_id, job_id, AllocationStatus.WAITING, None)
            return AllocationInfo(
                allocation_id, job_id, AllocationStatus.ALLOCATING, entry.slot.slot_id
            )
        slot = self._allocated.get(allocation_id)
        if slot is None:
            return None
        return AllocationInfo(allocation_id, slot.job_id, AllocationStatus.ALLOCATED, slot.slot_id)

    # ---------------------------------------------------------------- internals: matching

    def _find_slot(
        self,
        required: ResourceProfile,
        exclude: TrackedSlot | None,
        excluded_task_executors: frozenset[ResourceID] = frozenset(),
    ) -> TrackedSlot | None:
        if self._counts[SlotState.FREE] == 0:
            return None
        task_executors: Iterable[TrackedTaskExecutor] = self._tes.values()
        if excluded_task_executors:
            task_executors = [
                te for te in task_executors if te.resource_id not in excluded_task_executors
            ]
        return find_free_slot(
            task_executors,
            self._free_by_profile,
            required,
            exclude,
            spread_out=self._spread_out,
        )

    def _try_place(self, entry: PendingSlotRequest, exclude: TrackedSlot | None) -> bool:
        slot = self._find_slot(entry.request.resource_profile, exclude, entry.request.excluded)
        if slot is None:
            return False
        self._start_attempt(entry, slot)
        return True

    def _serve_waiting(self, skip: PendingSlotRequest | None = None) -> None:
        for entry in list(self._waiting.values()):
            if self._counts[SlotState.FREE] == 0:
                return
            if entry is not skip:
                self._try_place(entry, exclude=None)

    def _start_attempt(self, entry: PendingSlotRequest, slot: TrackedSlot) -> None:
        allocation_id = entry.request.allocation_id
        if self._waiting.pop(allocation_id, None) is not None:
            self._timers.cancel(self._key("request", allocation_id))
        entry.slot = slot
        slot.attempt = entry
        self._set_state(slot, SlotState.PENDING)
        slot_id = slot.slot_id
        self._timers.schedule(
            self._key("attempt", slot_id),
            self._allocation_timeout_s,
            lambda: self._on_attempt_timeout(slot_id, entry),
        )
        log.debug("requesting slot %s for allocation %s", slot_id, short(allocation_id))
        self._actions.allocate_slot(slot.instance_id, slot_id, entry.request)

    def _finish_attempt(self, slot: TrackedSlot, error: RpcError | None) -> None:
        entry = slot.attempt
        if entry is None:
            raise IllegalStateBug(f"slot {slot.slot_id} has no attempt in flight")
        slot.attempt = None
        entry.slot = None
        request = entry.request
        if error is None:
            self._set_state(slot, SlotState.ALLOCATED)
            self._absorb(request.allocation_id)
            self._assign(slot, request.allocation_id, request.job_id, request)
            return
        log.info(
            "allocation %s on slot %s failed: %s", short(request.allocation_id), slot.slot_id, error
        )
        if isinstance(error, AlreadyExistsError):
            self._set_state(slot, SlotState.ALLOCATED)  # owner unknown until reported
            self._retry(entry, exclude=slot)
            return
        self._set_state(slot, SlotState.FREE)
        self._retry(entry, exclude=slot)
        self._serve_waiting(skip=entry)
        if entry.live and entry.slot is None:
            # Nothing else could take it: after a pause, the waiting requests (this one first,
            # by its place in line) may try every free slot again, the refusing one included.
            self._timers.schedule(
                self._key("serve-waiting", None), REFUSED_SLOT_RETRY_DELAY_S, self._serve_waiting
            )

    def _retry(self, entry: PendingSlotRequest, exclude: TrackedSlot | None) -> None:
        if entry.live and not self._try_place(entry, exclude):
            self._enqueue(entry)

    def _enqueue(self, entry: PendingSlotRequest) -> None:
        allocation_id = entry.request.allocation_id
        if self._waiting and next(reversed(self._waiting.values())).seq > entry.seq:
            ordered = sorted([*self._waiting.values(), entry], key=lambda e: e.seq)
            self._waiting = {e.request.allocation_id: e for e in ordered}
        else:
            self._waiting[allocation_id] = entry
        self._timers.schedule(
            self._key("request", allocation_id),
            max(0.0, entry.deadline - self._timers.now()),
            lambda: self._on_request_timeout(entry),
        )

    def _mark_reported_allocated(
        self, slot: TrackedSlot, allocation_id: AllocationID, job_id: JobID | None
    ) -> None:
        """A report says ``slot`` holds ``allocation_id``; a request for it is thereby served."""
        if slot.state is SlotState.FREE:
            self._set_state(slot, SlotState.ALLOCATED)
        else:
            self._unassign(slot)
        self._assign(slot, allocation_id, job_id, self._absorb(allocation_id))

    def _absorb(self, allocation_id: AllocationID) -> SlotRequest | None:
        """A slot now holds ``allocation_id``: its live request (if any) is served."""
        entry = self._requests.pop(allocation_id, None)
        if entry is None:
            return None
        entry.live = False
        if self._waiting.pop(allocation_id, None) is not None:
            self._timers.cancel(self._key("request", allocation_id))
        if self.on_request_absorbed is not None:
            self.on_request_absorbed(allocation_id)
        if self._on_request_served is not None:
            request = entry.request
            since = request.needed_since
            if since is None:
                since = entry.deadline - self._timeout_of(request)  # its registration
            self._on_request_served(self._timers.now() - since)
        return entry.request

    # ---------------------------------------------------------------- internals: timeouts

    def _on_request_timeout(self, entry: PendingSlotRequest) -> None:
        request = entry.request
        if self._waiting.get(request.allocation_id) is not entry:
            return
        del self._waiting[request.allocation_id]
        del self._requests[request.allocation_id]
        entry.live = False
        error = ResourceExhaustedError(self._exhausted_message(request))
        log.warning("%s", error)
        self._actions.notify_allocation_failure(request.job_id, request.allocation_id, error)

    def _timeout_of(self, request: SlotRequest) -> float:
        return request.timeout_s if request.timeout_s else self._request_timeout_s

    def _exhausted_message(self, request: SlotRequest) -> str:
        largest = max(self._free_by_profile, key=slot_size, default=None)
        total = sum(self._counts.values())
        return (
            f"no slot for allocation {request.allocation_id} of job {request.job_id} "
            f"(asked for {request.resource_profile}) within {self._timeout_of(request):g}s: "
            f"{len(self._tes)} task executor(s) registered, {total} slot(s) in total, "
            f"{self._counts[SlotState.FREE]} free, largest free slot "
            f"{largest if largest is not None else 'none'}, "
            f"{len(self._waiting)} other request(s) waiting. {self._actions.more_slots_advice()}"
        )

    def _on_attempt_timeout(self, slot_id: SlotID, entry: PendingSlotRequest) -> None:
        slot = self._slots.get(slot_id)
        if slot is None or slot.attempt is not entry:
            return
        self._finish_attempt(
            slot,
            DeadlineExceededError(
                f"task executor {short(slot.instance_id)} did not answer the request for slot "
                f"{slot_id} (allocation {short(entry.request.allocation_id)}) within "
                f"{self._allocation_timeout_s:g}s"
            ),
        )

    def _on_idle_timeout(self, te: TrackedTaskExecutor) -> None:
        if self._tes.get(te.instance_id) is te and te.used == 0:
            log.info("task executor %s is idle", short(te.instance_id))
            self._actions.notify_idle_task_executor(te.instance_id)

    # ---------------------------------------------------------------- internals: state

    def _key(self, kind: str, subject: Hashable) -> Hashable:
        return (self._timer_owner, kind, subject)

    def _schedule_idle(self, te: TrackedTaskExecutor) -> None:
        self._timers.schedule(
            self._key("idle", te.instance_id),
            self._idle_timeout_s,
            lambda: self._on_idle_timeout(te),
        )

    def _set_state(self, slot: TrackedSlot, target: SlotState) -> None:
        SLOT_STATE_TRANSITIONS.check(slot.state, target, str(slot.slot_id))
        te = self._tes[slot.instance_id]
        if slot.state is SlotState.FREE:
            del te.free[slot.profile][slot.slot_id]
            self._count_free_profile(slot.profile, -1)
            te.used += 1
            if te.used == 1:
                self._timers.cancel(self._key("idle", te.instance_id))
        elif target is SlotState.FREE:
            self._add_free(te, slot)
            te.used -= 1
            if te.used == 0:
                self._schedule_idle(te)
        self._counts[slot.state] -= 1
        self._counts[target] += 1
        slot.state = target

    def _add_free(self, te: TrackedTaskExecutor, slot: TrackedSlot) -> None:
        te.free.setdefault(slot.profile, {})[slot.slot_id] = slot
        self._count_free_profile(slot.profile, +1)
        if self.on_slot_free is not None:
            self.on_slot_free()

    def _count_free_profile(self, profile: ResourceProfile, delta: int) -> None:
        count = self._free_by_profile.get(profile, 0) + delta
        if count > 0:
            self._free_by_profile[profile] = count
        else:
            self._free_by_profile.pop(profile, None)

    def _assign(
        self,
        slot: TrackedSlot,
        allocation_id: AllocationID,
        job_id: JobID | None,
        origin: SlotRequest | None,
    ) -> None:
        slot.allocation_id, slot.job_id, slot.origin = allocation_id, job_id, origin
        self._allocated[allocation_id] = slot

    def _unassign(self, slot: TrackedSlot) -> None:
        ended = slot.allocation_id
        if ended is not None and self._allocated.get(ended) is slot:
            del self._allocated[ended]
        slot.allocation_id = slot.job_id = slot.origin = None
        if ended is not None and self.on_allocation_ended is not None:
            self.on_allocation_ended(ended)


# The request, state and action types are part of the slot manager's interface.
__all__ = [
    "SLOT_STATE_TRANSITIONS",
    "AllocationInfo",
    "AllocationStatus",
    "ResourceActions",
    "SlotInfo",
    "SlotManager",
    "SlotRequest",
    "SlotState",
]
