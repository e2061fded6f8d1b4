"""What JobMasters declare they wait for, turned into slot allocations (Flink's declarative
slot protocol, FLIP-138).

A JobMaster no longer sends one request per subtask and one cancellation for every request that
slot reuse served meanwhile. It declares, per :class:`RequirementKey` (a resource profile and
the task executors that must not serve it), how many slots its pending requests wait for; each
declaration replaces the previous one. :class:`DeclaredRequirements` matches what is missing
against the free slots: for each free slot that fits, it registers a slot request at the
:class:`~sparkmill.services.resourcemanager.slot_manager.SlotManager`, which asks the task
executor at once, exactly as for a single request. What no free slot fits stays a count (the
job's *unmet* need): it is what a waiting job is shown, what the active resource manager starts
task executors for, and it is matched again whenever a slot becomes free, jobs in the order in
which their needs became unmet. A job waiting for 500 slots on a cluster of 12 is 12 requests
and a number, not 500 requests of which 488 are withdrawn one by one as slot reuse serves them.

Per job and key, three numbers are compared:

* **declared** - what the JobMaster's last declaration says its pending requests need;
* **requested** - slot requests this module registered at the slot manager that have an
  allocation in flight to a task executor (or wait again after a task executor refused one);
* **on the way** - slots allocated for the job (the task executor said yes) that the JobMaster
  has not acknowledged yet: the task executor is offering them. A declaration lists the
  allocation ids the JobMaster received since its last one (taken or rejected), which ends
  their time on the way; so does the slot being freed or lost first. An acknowledgement can
  overtake the task executor's yes (it offers the slot as it answers): the request is then
  withdrawn, so the slot never goes on its way behind the JobMaster's back.

Declared minus requested minus on the way is what is missing. A negative difference withdraws
the newest requests (an allocation in flight finishes, and the JobMaster rejects the slot if it
has no use for it: the task executor then frees it). A slot a job holds and uses is counted
nowhere here: the JobMaster declares only what it still waits for, and frees an idle slot
itself after ``slot.idle.timeout``. A declared need does not time out here either: the
JobMaster's own slot request timeout fails the request, and its next declaration drops it.

Everything runs on the resource manager's event loop. The slot manager calls back (a request
was served, a slot's allocation ended, a slot became free) in the middle of its own
bookkeeping, so those callbacks only note what happened, and matching runs on a later turn
(``defer``).
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkmill.common.core.ids import AllocationID, JobID, new_allocation_id, short
from sparkmill.common.core.resources import RequirementKey
from sparkmill.services.resourcemanager.slot_manager import SlotManager
from sparkmill.services.resourcemanager.slot_requests import SlotRequest

log = logging.getLogger(__name__)

# Entries of one declaration, the slots they ask for in all, and allocation ids it may
# acknowledge: what one JobMaster can make the resource manager hold stays bounded.
MAX_REQUIREMENTS = 1024
MAX_DECLARED_SLOTS = 1_000_000
MAX_RECEIVED = 100_000


class _NeedTimes:
    """When each declared slot not yet on its way began to be needed, oldest first, kept as
    runs of (time, count): memory grows with the declarations that raised the need, not with
    the number of slots they asked for."""

    def __init__(self) -> None:
        self._runs: deque[list[float]] = deque()  # [time, count]
        self.total = 0

    def resize(self, wanted: int, now: float) -> None:
        """As many as ``wanted``: new ones start ``now``; the newest go first."""
        while self.total > wanted:
            run = self._runs[-1]
            drop = min(int(run[1]), self.total - wanted)
            run[1] -= drop
            self.total -= drop
            if not run[1]:
                self._runs.pop()
        if self.total < wanted:
            self._runs.append([now, wanted - self.total])
            self.total = wanted

    def pop_oldest(self) -> None:
        if self._runs:
            run = self._runs[0]
            run[1] -= 1
            self.total -= 1
            if not run[1]:
                self._runs.popleft()

    def at(self, position: int) -> float | None:
        """The start time of the ``position``-th oldest (None past the end)."""
        for time, count in self._runs:
            if position < count:
                return time
            position -= int(count)
        return None


@dataclass(slots=True)
class _Job:
    session_id: str
    job_master_address: str
    version: int = -1
    timeout_s: float | None = None
    declared: dict[RequirementKey, int] = field(default_factory=dict)
    # Per key, in registration order: the newest are withdrawn first.
    requested: dict[RequirementKey, dict[AllocationID, None]] = field(default_factory=dict)
    on_the_way: dict[AllocationID, RequirementKey] = field(default_factory=dict)
    on_the_way_count: dict[RequirementKey, int] = field(default_factory=dict)
    key_of: dict[AllocationID, RequirementKey] = field(default_factory=dict)  # requested
    unmet: int = 0
    # Per key, when each slot declared and not yet on its way began to be needed, oldest
    # first: the requested ones, then the unmet ones (what the wait metric measures from).
    since: dict[RequirementKey, _NeedTimes] = field(default_factory=dict)

    def missing(self, key: RequirementKey) -> int:
        covered = len(self.requested.get(key, ())) + self.on_the_way_count.get(key, 0)
        return self.declared.get(key, 0) - covered

    def add_request(self, allocation_id: AllocationID, key: RequirementKey) -> None:
        self.requested.setdefault(key, {})[allocation_id] = None
        self.key_of[allocation_id] = key

    def drop_request(self, allocation_id: AllocationID) -> RequirementKey | None:
        key = self.key_of.pop(allocation_id, None)
        if key is not None:
            of_key = self.requested[key]
            del of_key[allocation_id]
            if not of_key:
                del self.requested[key]
        return key

    def add_on_the_way(self, allocation_id: AllocationID, key: RequirementKey) -> None:
        self.on_the_way[allocation_id] = key
        self.on_the_way_count[key] = self.on_the_way_count.get(key, 0) + 1

    def drop_on_the_way(self, allocation_id: AllocationID) -> bool:
        key = self.on_the_way.pop(allocation_id, None)
        if key is None:
            return False
        left = self.on_the_way_count[key] - 1
        if left:
            self.on_the_way_count[key] = left
        else:
            del self.on_the_way_count[key]
        return True


class DeclaredRequirements:
    """The declared requirements of every registered JobMaster; see the module docstring."""

    def __init__(
        self,
        slots: SlotManager,
        defer: Callable[[Callable[[], None]], object],
        now: Callable[[], float],
    ) -> None:
        """Follows ``slots`` (its callbacks are set here); ``defer`` runs a callable on a later
        turn of the loop; ``now`` is the slot manager's clock."""
        self._slots = slots
        self._defer = defer
        self._now = now
        slots.on_request_absorbed = self.allocated
        slots.on_allocation_ended = self.allocation_ended
        slots.on_slot_free = self.slots_freed
        self._jobs: dict[JobID, _Job] = {}
        self._owner: dict[AllocationID, JobID] = {}  # requested or on the way
        # Jobs with an unmet need, in the order their needs became unmet.
        self._unmet: dict[JobID, None] = {}
        self._match_scheduled = False

    # ------------------------------------------------------------------ the JobMaster's side

    def declare(
        self,
        job_id: JobID,
        session_id: str,
        job_master_address: str,
        version: int,
        declared: dict[RequirementKey, int],
        received: list[AllocationID],
        timeout_s: float | None,
    ) -> bool:
        """Take a JobMaster's declaration; ``False`` if an earlier-sent one (a lower version of
        the same session) arrived late and is ignored. A new session replaces the job's
        previous one and withdraws what that one asked for."""
        job = self._jobs.get(job_id)
        if job is not None and job.session_id != session_id:
            self.remove_job(job_id)
            job = None
        if job is None:
            job = self._jobs[job_id] = _Job(session_id, job_master_address)
        if version <= job.version:
            log.debug("job %s: declaration %d is stale", short(job_id), version)
            return False
        job.version = version
        job.job_master_address = job_master_address
        job.timeout_s = timeout_s
        job.declared = {key: count for key, count in declared.items() if count > 0}
        for allocation_id in received:
            if job.drop_on_the_way(allocation_id):
                del self._owner[allocation_id]
            else:
                self._acknowledged_early(job, allocation_id)
        self._match(job_id, job)
        return True

    def remove_job(self, job_id: JobID) -> None:
        """The job's JobMaster is gone: withdraw everything it asked for."""
        job = self._jobs.pop(job_id, None)
        self._unmet.pop(job_id, None)
        if job is None:
            return
        for allocation_id in list(job.key_of):
            self._slots.unregister_slot_request(allocation_id)
            self._owner.pop(allocation_id, None)
        for allocation_id in job.on_the_way:
            self._owner.pop(allocation_id, None)

    # ------------------------------------------------------------------ the slot manager's side

    def allocated(self, allocation_id: AllocationID) -> None:
        """One of our requests got its slot: it is on its way to the JobMaster."""
        job = self._job_of(allocation_id)
        if job is not None:
            key = job.drop_request(allocation_id)
            if key is not None:
                job.add_on_the_way(allocation_id, key)
                since = job.since.get(key)
                if since is not None:
                    since.pop_oldest()

    def allocation_ended(self, allocation_id: AllocationID) -> None:
        """A slot's allocation ended (freed or lost). If the JobMaster never acknowledged it, its
        need is open again."""
        job_id = self._owner.get(allocation_id)
        job = self._jobs.get(job_id) if job_id is not None else None
        if job_id is None or job is None or not job.drop_on_the_way(allocation_id):
            return
        del self._owner[allocation_id]
        self._unmet.setdefault(job_id)
        self._schedule_match()

    def request_failed(self, allocation_id: AllocationID) -> bool:
        """One of our requests went unserved past its deadline (the slot manager dropped it);
        ``False`` if it is not ours. Its need counts as unmet again."""
        job_id = self._owner.pop(allocation_id, None)
        job = self._jobs.get(job_id) if job_id is not None else None
        if job_id is None or job is None:
            return False
        job.drop_request(allocation_id)
        self._unmet.setdefault(job_id)
        self._schedule_match()
        return True

    def slots_freed(self) -> None:
        """A slot became free (or a task executor registered): unmet needs are matched again,
        on a later turn."""
        if self._unmet:
            self._schedule_match()

    def _schedule_match(self) -> None:
        if not self._match_scheduled:
            self._match_scheduled = True
            self._defer(self._match_unmet)

    # ------------------------------------------------------------------ queries

    def unmet(self, job_id: JobID | None = None) -> int:
        """Declared slots that no free slot fits yet: of one job, or of all."""
        if job_id is not None:
            job = self._jobs.get(job_id)
            return job.unmet if job is not None else 0
        return sum(self._jobs[j].unmet for j in self._unmet)

    def declared(self, job_id: JobID) -> dict[RequirementKey, int]:
        job = self._jobs.get(job_id)
        return dict(job.declared) if job is not None else {}

    def requested(self, job_id: JobID) -> list[AllocationID]:
        job = self._jobs.get(job_id)
        return list(job.key_of) if job is not None else []

    def on_the_way(self, job_id: JobID) -> list[AllocationID]:
        job = self._jobs.get(job_id)
        return list(job.on_the_way) if job is not None else []

    # ------------------------------------------------------------------ internals

    def _job_of(self, allocation_id: AllocationID) -> _Job | None:
        job_id = self._owner.get(allocation_id)
        return self._jobs.get(job_id) if job_id is not None else None

    def _match_unmet(self) -> None:
        self._match_scheduled = False
        for job_id in list(self._unmet):
            job = self._jobs.get(job_id)
            if job is None:
                self._unmet.pop(job_id, None)
            else:
                self._match(job_id, job)

    def _match(self, job_id: JobID, job: _Job) -> None:
        """Withdraw what is no longer needed, request a slot for each missing one that a free
        slot fits, and note the rest as unmet."""
        unmet = 0
        keys = {*job.declared, *job.requested, *job.since}
        for key in [*job.declared, *(k for k in keys if k not in job.declared)]:
            missing = job.missing(key)
            if missing < 0:
                self._withdraw(job, key, -missing)
            self._track_since(job, key)
            while missing > 0 and self._slots.has_free_slot(key.profile, key.excluded):
                self._request(job_id, job, key)
                missing -= 1
            unmet += max(missing, 0)
        job.unmet = unmet
        if unmet:
            self._unmet.setdefault(job_id)
        else:
            self._unmet.pop(job_id, None)

    def _track_since(self, job: _Job, key: RequirementKey) -> None:
        """One start time per slot declared and not on its way: new ones start now, and the
        newest go first when fewer are declared."""
        wanted = max(0, job.declared.get(key, 0) - job.on_the_way_count.get(key, 0))
        since = job.since.setdefault(key, _NeedTimes())
        since.resize(wanted, self._now())
        if not since.total:
            del job.since[key]

    def _acknowledged_early(self, job: _Job, allocation_id: AllocationID) -> None:
        """The JobMaster took a slot whose task executor's yes has not reached us: the task
        executor offers a slot as it answers, and the offer, then the declaration acknowledging
        it, can overtake that answer. Left requested, the slot would go on its way when the
        answer comes and stay there, hiding a need the JobMaster still has. Withdrawn instead:
        the slot follows the task executor's answer all the same, and is never asked for
        elsewhere (the JobMaster has it)."""
        key = job.drop_request(allocation_id)
        if key is None:
            return  # neither requested nor on its way: its allocation has ended already
        del self._owner[allocation_id]
        self._slots.unregister_slot_request(allocation_id)
        since = job.since.get(key)
        if since is not None:
            since.pop_oldest()

    def _request(self, job_id: JobID, job: _Job, key: RequirementKey) -> None:
        allocation_id = new_allocation_id()
        since = job.since.get(key)
        position = len(job.requested.get(key, ()))
        needed_since = since.at(position) if since is not None else None
        job.add_request(allocation_id, key)
        self._owner[allocation_id] = job_id
        self._slots.register_slot_request(
            SlotRequest(
                job_id=job_id,
                allocation_id=allocation_id,
                resource_profile=key.profile,
                job_master_address=job.job_master_address,
                timeout_s=job.timeout_s,
                excluded=key.excluded,
                needed_since=needed_since,
            )
        )

    def _withdraw(self, job: _Job, key: RequirementKey, count: int) -> None:
        of_key = job.requested.get(key, {})
        newest_first = list(itertools.islice(reversed(of_key), count))
        for allocation_id in newest_first:
            job.drop_request(allocation_id)
            del self._owner[allocation_id]
            self._slots.unregister_slot_request(allocation_id)


__all__ = ["MAX_DECLARED_SLOTS", "MAX_RECEIVED", "MAX_REQUIREMENTS", "DeclaredRequirements"]
