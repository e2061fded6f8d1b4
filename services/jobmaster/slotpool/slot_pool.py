"""The job master's per-job slot bookkeeping.

The :class:`SlotPool` tracks three things for one job:

* **pending requests** - slots the scheduler asked for and has not received yet, in request
  order. Each is counted into the job's declared requirements at the resource manager (RM)
  under its resource profile and excluded task executors; the allocation id it gets here names
  it within the pool only.
* **allocated slots** - slots handed to the scheduler, i.e. in use by a task.
* **available slots** - slots the pool still holds but nobody uses (idle). They serve the next
  matching request at once and are given back to their task executor (TE) after
  ``idle_slot_timeout_s``.

Slots enter the pool only through :meth:`SlotPool.offer_slots`: the RM tells a TE to reserve a
slot for this job, and the TE offers it to the job master. Offers are matched like this:

1. an offer for a slot the pool already holds (same TE and slot index) is accepted again,
   without any change: re-offering is idempotent;
2. an offer whose allocation id equals a pending request's fulfils exactly that request (the
   per-request protocol of older versions, where the RM reserved a slot under the request's
   own id; with declared requirements the RM names its allocations itself);
3. any other offer fulfils the *oldest* pending request whose profile it can serve, and that
   request leaves the declared requirements (its need is met);
4. an offer that no pending request needs is **rejected**, so the TE frees it at once. The pool
   only keeps slots it asked for: holding an unrequested slot idle would only delay returning
   it to the cluster.

Within a profile, pending requests are always fulfilled oldest first - by offers and by slots
the scheduler returns through :meth:`SlotPool.release_slot` alike. The only exception is rule 2,
which hands a slot to the very request it was reserved for.

A request's ``allocation_id`` names it in the pool; the slot it finally gets carries the RM's
allocation id (rule 3, and slot reuse), so callers must release ``future.result().allocation_id``.

The pool belongs to the job master's event loop: it is not thread-safe, does no I/O itself and
talks to the outside world only through :class:`SlotPoolActions`. Actions are called after the
pool's own state is consistent, so they may call back into the pool; an action that raises is
logged and otherwise ignored, so that one broken gateway cannot corrupt the bookkeeping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import ParamSpec

from sparkmill.common.core.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    RpcError,
    UnavailableError,
)
from sparkmill.common.core.ids import AllocationID, JobID, ResourceID, new_allocation_id, short
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.runtime.timers import TimerService
from sparkmill.services.jobmaster.slotpool.slot_types import (
    PendingSlotRequest,
    PhysicalSlot,
    SlotOffer,
    SlotPoolActions,
    TaskExecutorInfo,
)

log = logging.getLogger(__name__)

_P = ParamSpec("_P")


class SlotPool:
    """Slot bookkeeping of one job; see the module docstring for the matching rules."""

    def __init__(
        self,
        job_id: JobID,
        timer_service: TimerService,
        actions: SlotPoolActions,
        slot_request_timeout_s: float,
        idle_slot_timeout_s: float,
        why_waiting: Callable[[], str] | None = None,
    ) -> None:
        """``why_waiting``: what the resource manager last said about the job's wait, for the
        message of a request that timed out."""
        if slot_request_timeout_s <= 0:
            raise ValueError(f"slot_request_timeout_s must be positive: {slot_request_timeout_s}")
        if idle_slot_timeout_s <= 0:
            raise ValueError(f"idle_slot_timeout_s must be positive: {idle_slot_timeout_s}")
        self._job_id = job_id
        self._timers = timer_service
        self._actions = actions
        self._request_timeout_s = slot_request_timeout_s
        self._idle_timeout_s = idle_slot_timeout_s
        self._why_waiting = why_waiting
        # Timer keys carry a private token: the timer service may be shared with other pools.
        self._token = object()
        # Insertion order is request order, hence deadline order: one timer, due when the
        # oldest request is (a timer per request cost a handle, a context and two closures
        # each, and a large job waits for thousands of slots at once).
        self._pending: dict[AllocationID, PendingSlotRequest] = {}
        self._timeouts_key = (self._token, "slot-request-timeouts")
        # Pending requests the currently connected RM has been sent.
        self._sent: set[AllocationID] = set()
        self._allocated: dict[AllocationID, PhysicalSlot] = {}
        # Insertion order is the order in which the slots became idle.
        self._available: dict[AllocationID, PhysicalSlot] = {}
        # Task executors that get no new slot of this job (Flink's blocklist).
        self._blocked: frozenset[ResourceID] = frozenset()
        self._rm_connected = False
        self._closed = False

    # ------------------------------------------------------------------ requests

    def request_slot(
        self, resource_profile: ResourceProfile, excluded: frozenset[ResourceID] = frozenset()
    ) -> PendingSlotRequest:
        """Ask for a slot that can serve ``resource_profile``, not on an ``excluded`` or
        blocked task executor.

        An available slot serves the request at once (the returned future is already done).
        Otherwise the request waits, is sent to the RM when one is connected, and fails with
        :class:`DeadlineExceededError` after ``slot_request_timeout_s``. After :meth:`close`
        the future fails with :class:`FailedPreconditionError`.
        """
        future: asyncio.Future[PhysicalSlot] = asyncio.get_running_loop().create_future()
        now = self._timers.now()
        if self._closed:
            future.set_exception(
                FailedPreconditionError(f"the slot pool of job {self._job_id} is closed")
            )
            return PendingSlotRequest(new_allocation_id(), resource_profile, now, future)

        idle = self._take_available_slot(resource_profile, excluded)
        if idle is not None:
            self._allocated[idle.allocation_id] = idle
            future.set_result(idle)
            log.debug(
                "job %s: reusing idle slot %s for %s",
                short(self._job_id),
                short(idle.allocation_id),
                resource_profile,
            )
            return PendingSlotRequest(idle.allocation_id, resource_profile, now, future)

        request = PendingSlotRequest(new_allocation_id(), resource_profile, now, future, excluded)
        allocation_id = request.allocation_id
        self._pending[allocation_id] = request
        if not self._timers.is_scheduled(self._timeouts_key):
            self._timers.schedule(self._timeouts_key, self._request_timeout_s, self._time_out)
        future.add_done_callback(lambda done: self._on_request_future_done(allocation_id, done))
        if self._rm_connected:
            self._send_to_resource_manager(request)
        return request

    def cancel_request(self, allocation_id: AllocationID, cause: BaseException) -> bool:
        """Withdraw a pending request: cancel it at the RM and fail its future with ``cause``.

        An :class:`asyncio.CancelledError` cause cancels the future instead. Returns ``False``
        when no such request is pending.
        """
        request = self._remove_pending(allocation_id, cancel_at_rm=True)
        if request is None:
            return False
        _fail(request.future, cause)
        return True

    def fail_allocation(self, allocation_id: AllocationID, cause: RpcError) -> bool:
        """The RM reports that it cannot serve a request: fail that request's future.

        Only pending requests are affected; for a slot already held use :meth:`fail_slot`.
        Returns ``False`` when no such request is pending.
        """
        request = self._remove_pending(allocation_id, cancel_at_rm=False)
        if request is None:
            return False
        log.info(
            "job %s: the resource manager failed slot request %s: %s",
            short(self._job_id),
            short(allocation_id),
            cause,
        )
        _fail(request.future, cause)
        return True

    def fail_oldest_request(self, cause: RpcError) -> AllocationID | None:
        """The RM could not serve one of the job's declared needs in time: fail the request
        that has waited longest with its diagnosis. Returns its allocation id (None if no
        request waits)."""
        oldest = next((r for r in self._pending.values() if not r.future.done()), None)
        if oldest is None:
            return None
        self.fail_allocation(oldest.allocation_id, cause)
        return oldest.allocation_id

    def is_blocked(self, resource_id: ResourceID) -> bool:
        return resource_id in self._blocked

    def block_task_executors(self, blocked: frozenset[ResourceID]) -> None:
        """Slots of the ``blocked`` task executors serve no request from now on (Flink's
        blocklist; the set replaces the last one) and their idle slots are freed."""
        self._blocked = frozenset(blocked)
        for slot in [s for s in self._available.values() if s.task_executor.resource_id in blocked]:
            self._on_idle_timeout(slot.allocation_id)

    # ------------------------------------------------------------------ resource manager

    def connect_to_resource_manager(self) -> None:
        """An RM connection is established: send every pending request not yet sent to it.

        When the RM leader changes, call :meth:`disconnect_resource_manager` first.
        """
        if self._closed:
            return
        self._rm_connected = True
        for request in list(self._pending.values()):
            if request.allocation_id not in self._sent and not request.future.done():
                self._send_to_resource_manager(request)

    def disconnect_resource_manager(self) -> None:
        """The RM connection is lost. Pending requests stay and are re-sent on reconnect."""
        self._rm_connected = False
        self._sent.clear()

    # ------------------------------------------------------------------ slots

    def offer_slots(
        self, task_executor: TaskExecutorInfo, offers: list[SlotOffer]
    ) -> list[SlotOffer]:
        """A task executor offers slots it reserved for this job; returns the accepted ones."""
        if self._closed:
            log.info(
                "job %s: rejecting %d slot offer(s) of %s: the slot pool is closed",
                short(self._job_id),
                len(offers),
                task_executor.address,
            )
            return []
        return [offer for offer in offers if self._offer_slot(task_executor, offer)]

    def release_slot(self, allocation_id: AllocationID, cause: BaseException | None = None) -> bool:
        """The scheduler returns an in-use slot (its task ended; ``cause`` is only logged).

        The slot serves the oldest pending request it matches (whose RM request is then
        cancelled), or else becomes available and is freed after ``idle_slot_timeout_s``.
        Returns ``False`` when the slot is not in use.
        """
        slot = self._allocated.pop(allocation_id, None)
        if slot is None:
            return False
        log.debug(
            "job %s: slot %s released%s",
            short(self._job_id),
            short(allocation_id),
            f" ({cause})" if cause is not None else "",
        )
        request = self._oldest_matching_request(slot.resource_profile, slot.task_executor)
        if request is not None:
            self._remove_pending(request.allocation_id, cancel_at_rm=True)
            self._grant(request, slot)
        else:
            self._make_available(slot)
            if self.is_blocked(slot.task_executor.resource_id):
                self._on_idle_timeout(allocation_id)  # freed at once: it would serve nothing
        return True

    def fail_slot(self, allocation_id: AllocationID, cause: BaseException) -> PhysicalSlot | None:
        """A held slot is gone (e.g. its TE freed it): drop it; if in use, report it lost.

        Returns the dropped slot, or ``None`` when the pool does not hold it.
        """
        slot = self._allocated.pop(allocation_id, None)
        if slot is not None:
            self._safely(self._actions.slot_lost, slot, cause)
            return slot
        slot = self._available.pop(allocation_id, None)
        if slot is not None:
            self._timers.cancel(self._idle_timer_key(allocation_id))
        return slot

    def release_task_executor(
        self, resource_id: ResourceID, cause: BaseException
    ) -> list[PhysicalSlot]:
        """A task executor is gone: drop all its slots and report the in-use ones lost.

        Returns the dropped slots, in-use ones first.
        """
        lost = [s for s in self._allocated.values() if s.task_executor.resource_id == resource_id]
        idle = [s for s in self._available.values() if s.task_executor.resource_id == resource_id]
        for slot in lost:
            del self._allocated[slot.allocation_id]
        for slot in idle:
            del self._available[slot.allocation_id]
            self._timers.cancel(self._idle_timer_key(slot.allocation_id))
        if lost or idle:
            log.info(
                "job %s: task executor %s released, dropping %d in-use and %d idle slot(s): %s",
                short(self._job_id),
                short(resource_id),
                len(lost),
                len(idle),
                cause,
            )
        for slot in lost:
            self._safely(self._actions.slot_lost, slot, cause)
        return lost + idle

    def close(self, cause: BaseException) -> None:
        """Shut the pool down: fail all pending requests, free all slots at their TEs.

        Pending futures fail with an :class:`UnavailableError` whose ``__cause__`` is ``cause``;
        pending RM requests are cancelled. In-use slots are freed too but not reported through
        ``slot_lost``: the job is going away. Later calls are refused or ignored.
        """
        if self._closed:
            return
        self._closed = True
        pending = list(self._pending.values())
        sent = set(self._sent) if self._rm_connected else set()
        slots = [*self._allocated.values(), *self._available.values()]
        self._timers.cancel(self._timeouts_key)
        for slot in self._available.values():
            self._timers.cancel(self._idle_timer_key(slot.allocation_id))
        self._pending.clear()
        self._sent.clear()
        self._allocated.clear()
        self._available.clear()
        self._rm_connected = False

        for request in pending:
            if request.allocation_id in sent:
                self._safely(
                    self._actions.cancel_slot_request_at_resource_manager, request.allocation_id
                )
            error = UnavailableError(f"the slot pool of job {self._job_id} was closed: {cause}")
            error.__cause__ = cause
            _fail(request.future, error)
        reason = f"the slot pool of job {self._job_id} was closed: {cause}"
        for slot in slots:
            self._safely(
                self._actions.free_slot_at_task_executor,
                slot.task_executor,
                slot.allocation_id,
                reason,
            )

    # ------------------------------------------------------------------ queries

    @property
    def job_id(self) -> JobID:
        return self._job_id

    @property
    def is_connected_to_resource_manager(self) -> bool:
        return self._rm_connected

    @property
    def is_closed(self) -> bool:
        return self._closed

    def available_slots(self) -> list[PhysicalSlot]:
        """Idle slots, longest idle first."""
        return list(self._available.values())

    def allocated_slots(self) -> list[PhysicalSlot]:
        """Slots in use by the scheduler."""
        return list(self._allocated.values())

    def pending_requests(self) -> list[PendingSlotRequest]:
        """Requests still waiting for a slot, oldest first."""
        return [r for r in self._pending.values() if not r.future.done()]

    def num_available_slots(self) -> int:
        return len(self._available)

    def num_allocated_slots(self) -> int:
        return len(self._allocated)

    def num_pending_requests(self) -> int:
        return len(self.pending_requests())

    def slot(self, allocation_id: AllocationID) -> PhysicalSlot | None:
        """The held slot (in use or available) with this allocation id."""
        return self._allocated.get(allocation_id) or self._available.get(allocation_id)

    def is_slot_available(self, allocation_id: AllocationID) -> bool:
        return allocation_id in self._available

    def slots_of_task_executor(self, resource_id: ResourceID) -> list[PhysicalSlot]:
        """All held slots (in use, then available) of one task executor."""
        return [
            slot
            for slot in (*self._allocated.values(), *self._available.values())
            if slot.task_executor.resource_id == resource_id
        ]

    # ------------------------------------------------------------------ internals

    def _offer_slot(self, task_executor: TaskExecutorInfo, offer: SlotOffer) -> bool:
        allocation_id = offer.allocation_id
        held = self.slot(allocation_id)
        if held is not None:
            same = (
                held.task_executor.resource_id == task_executor.resource_id
                and held.slot_index == offer.slot_index
            )
            if not same:
                log.warning(
                    "job %s: rejecting offer of slot %d of %s: allocation %s is already held "
                    "as slot %d of %s",
                    short(self._job_id),
                    offer.slot_index,
                    task_executor.address,
                    short(allocation_id),
                    held.slot_index,
                    held.task_executor.address,
                )
            return same

        slot = PhysicalSlot(allocation_id, task_executor, offer.slot_index, offer.resource_profile)
        request = self._pending.get(allocation_id)
        if request is not None:
            # The RM reserved this slot for this request; it needs no cancellation.
            self._remove_pending(allocation_id, cancel_at_rm=False)
            if not request.future.done():
                self._grant(request, slot)
                return True
        request = self._oldest_matching_request(offer.resource_profile, task_executor)
        if request is None:
            log.info(
                "job %s: rejecting offer of slot %d (%s, allocation %s) of %s: "
                "no pending request needs it",
                short(self._job_id),
                offer.slot_index,
                offer.resource_profile,
                short(allocation_id),
                task_executor.address,
            )
            return False
        self._remove_pending(request.allocation_id, cancel_at_rm=True)
        self._grant(request, slot)
        return True

    def _grant(self, request: PendingSlotRequest, slot: PhysicalSlot) -> None:
        self._allocated[slot.allocation_id] = slot
        request.future.set_result(slot)
        log.debug(
            "job %s: slot request %s fulfilled with slot %d (allocation %s) of %s",
            short(self._job_id),
            short(request.allocation_id),
            slot.slot_index,
            short(slot.allocation_id),
            slot.task_executor.address,
        )

    def _make_available(self, slot: PhysicalSlot) -> None:
        allocation_id = slot.allocation_id
        self._available[allocation_id] = slot
        self._timers.schedule(
            self._idle_timer_key(allocation_id),
            self._idle_timeout_s,
            lambda: self._on_idle_timeout(allocation_id),
        )

    def _take_available_slot(
        self, required: ResourceProfile, excluded: frozenset[ResourceID]
    ) -> PhysicalSlot | None:
        """Remove and return the best idle slot for ``required``: an exact profile first."""
        matching = [
            s
            for s in self._available.values()
            if s.resource_profile.is_matching(required)
            and self._may_serve(s.task_executor.resource_id, excluded)
        ]
        if not matching:
            return None
        exact = [s for s in matching if s.resource_profile == required]
        slot = (exact or matching)[0]
        del self._available[slot.allocation_id]
        self._timers.cancel(self._idle_timer_key(slot.allocation_id))
        return slot

    def _oldest_matching_request(
        self, offered: ResourceProfile, where: TaskExecutorInfo
    ) -> PendingSlotRequest | None:
        for request in self._pending.values():
            if (
                not request.future.done()
                and offered.is_matching(request.resource_profile)
                and self._may_serve(where.resource_id, request.excluded)
            ):
                return request
        return None

    def _may_serve(self, resource_id: ResourceID, excluded: frozenset[ResourceID]) -> bool:
        return resource_id not in excluded and resource_id not in self._blocked

    def _send_to_resource_manager(self, request: PendingSlotRequest) -> None:
        self._sent.add(request.allocation_id)
        self._safely(
            self._actions.request_slot_from_resource_manager,
            request.allocation_id,
            request.resource_profile,
            request.excluded | self._blocked,
        )

    def _remove_pending(
        self, allocation_id: AllocationID, *, cancel_at_rm: bool
    ) -> PendingSlotRequest | None:
        request = self._pending.pop(allocation_id, None)
        if request is None:
            return None
        was_sent = allocation_id in self._sent
        self._sent.discard(allocation_id)
        if cancel_at_rm and was_sent and self._rm_connected:
            self._safely(self._actions.cancel_slot_request_at_resource_manager, allocation_id)
        return request

    def _on_request_future_done(
        self, allocation_id: AllocationID, future: asyncio.Future[PhysicalSlot]
    ) -> None:
        # Only a caller's cancel() matters: the pool removes requests before resolving them.
        request = self._pending.get(allocation_id)
        if request is not None and request.future is future and future.cancelled():
            self._remove_pending(allocation_id, cancel_at_rm=True)

    def _time_out(self) -> None:
        """Fail every request older than the timeout, then wait for the next oldest."""
        now = self._timers.now()
        expired: list[AllocationID] = []
        next_due: float | None = None
        for allocation_id, request in self._pending.items():
            due = request.requested_at + self._request_timeout_s
            if due > now:
                next_due = due
                break
            expired.append(allocation_id)
        for allocation_id in expired:
            self._on_request_timeout(allocation_id)
        if next_due is not None and not self._closed:
            self._timers.schedule(self._timeouts_key, next_due - now, self._time_out)

    def _on_request_timeout(self, allocation_id: AllocationID) -> None:
        request = self._remove_pending(allocation_id, cancel_at_rm=True)
        if request is None or request.future.done():
            return
        waited = self._timers.now() - request.requested_at
        reason = "no resource manager is connected"
        if self._rm_connected:
            why = self._why_waiting() if self._why_waiting is not None else ""
            reason = "the resource manager did not provide one" + (f" ({why})" if why else "")
        error = DeadlineExceededError(
            f"could not obtain a slot with {request.resource_profile} for job {self._job_id} "
            f"within {waited:g}s: {reason}"
        )
        log.warning("job %s: %s", short(self._job_id), error)
        request.future.set_exception(error)

    def _on_idle_timeout(self, allocation_id: AllocationID) -> None:
        slot = self._available.pop(allocation_id, None)
        if slot is None:
            return
        log.debug(
            "job %s: freeing slot %s, idle for %gs",
            short(self._job_id),
            short(allocation_id),
            self._idle_timeout_s,
        )
        self._safely(
            self._actions.free_slot_at_task_executor,
            slot.task_executor,
            allocation_id,
            f"slot was idle for more than {self._idle_timeout_s:g}s",
        )

    def _idle_timer_key(self, allocation_id: AllocationID) -> tuple[object, str, str]:
        return (self._token, "idle-slot", allocation_id)

    def _safely(self, action: Callable[_P, None], /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            action(*args, **kwargs)
        except Exception:
            log.exception("job %s: slot pool action %r failed", short(self._job_id), action)


def _fail(future: asyncio.Future[PhysicalSlot], cause: BaseException) -> None:
    if future.done():
        return
    if isinstance(cause, asyncio.CancelledError):
        future.cancel()
    else:
        future.set_exception(cause)


# The pool's vocabulary lives in slot_types.py; importing it from here keeps working.
__all__ = [
    "PendingSlotRequest",
    "PhysicalSlot",
    "SlotOffer",
    "SlotPool",
    "SlotPoolActions",
    "TaskExecutorInfo",
]
