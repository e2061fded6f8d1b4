"""DeclaredRequirements: a JobMaster's declared needs become slot requests at the real
SlotManager, and only as many as are not already on their way."""

from __future__ import annotations

from collections.abc import Callable

from sparkmill.common.core.ids import AllocationID, JobID, new_job_id, new_resource_id
from sparkmill.common.core.resources import UNKNOWN_PROFILE, RequirementKey
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from sparkmill.services.resourcemanager.declaration import declaration_from_proto
from sparkmill.services.resourcemanager.declared_requirements import (
    DeclaredRequirements,
    _NeedTimes,
)
from sparkmill.services.resourcemanager.slot_manager import SlotState
from tests.unit.slot_manager_fakes import SMALL, Harness, registration

ANY = RequirementKey(UNKNOWN_PROFILE)


class DeclarationHarness(Harness):
    """The slot manager's harness with declared requirements wired as the resource manager
    wires them; deferred reconciliations run when the test says."""

    def __init__(self, on_request_served: Callable[[float], None] | None = None) -> None:
        super().__init__(on_request_served=on_request_served)
        self.deferred: list[Callable[[], None]] = []
        self.req = DeclaredRequirements(self.sm, self.deferred.append, self.timers.now)
        self.version = 0

    def declare(
        self,
        counts: dict[RequirementKey, int],
        received: list[AllocationID] | None = None,
        session: str = "s1",
    ) -> bool:
        self.version += 1
        return self.req.declare(
            self.job, session, "jm-address", self.version, counts, received or [], None
        )

    def run_deferred(self) -> None:
        todo, self.deferred[:] = list(self.deferred), []
        for action in todo:
            action()

    def confirm_all(self) -> list[AllocationID]:
        """Every allocation in flight answered yes by its task executor."""
        confirmed = []
        for _, slot_id, request in self.actions.allocations:
            if self.sm.on_allocation_result(request.allocation_id, slot_id, None):
                confirmed.append(request.allocation_id)
        return confirmed


def test_a_declaration_requests_what_free_slots_fit_and_counts_the_rest_as_unmet() -> None:
    h = DeclarationHarness()
    h.add_te(slots=2)
    assert h.declare({ANY: 5})
    assert len(h.actions.allocations) == 2  # two free slots asked for at once
    assert h.sm.number_pending_requests() == 0  # nothing waits in line: a count does
    assert h.req.unmet(h.job) == 3 and h.req.unmet() == 3
    # The same picture again changes nothing.
    assert h.declare({ANY: 5})
    assert len(h.actions.allocations) == 2 and h.req.unmet(h.job) == 3
    # A task executor registers: its slots serve the unmet need on a later turn.
    h.add_te(slots=2)
    assert len(h.actions.allocations) == 2
    h.run_deferred()
    assert len(h.actions.allocations) == 4 and h.req.unmet(h.job) == 1


def test_unmet_needs_are_served_in_the_order_they_arose_and_an_exclusion_blocks_no_one() -> None:
    h = DeclarationHarness()
    te = h.add_te(slots=1)
    first_job, second_job, third_job = h.job, JobID(new_job_id()), JobID(new_job_id())
    h.declare({ANY: 1})  # takes the only slot
    (held,) = h.confirm_all()
    h.job = second_job
    h.declare({RequirementKey(UNKNOWN_PROFILE, frozenset({te.resource_id})): 1})
    h.job = third_job
    h.declare({ANY: 1})
    h.job = JobID(new_job_id())
    h.declare({ANY: 1})
    assert h.req.unmet() == 3
    # The first job acknowledges its slot, then frees it: the second job cannot use it (it
    # excludes that task executor), so the third gets it.
    h.job = first_job
    h.declare({}, received=[held])
    assert h.sm.free_slot(h.actions.allocations[0][1], held)
    h.run_deferred()
    assert [request.job_id for _, _, request in h.actions.allocations] == [first_job, third_job]
    assert h.req.unmet(second_job) == 1 and h.req.unmet(third_job) == 0 and h.req.unmet() == 2


def test_a_lower_declaration_withdraws_the_newest_waiting_requests() -> None:
    h = DeclarationHarness()
    h.add_te(slots=1)
    h.declare({ANY: 4})
    first = h.actions.allocations[0][2].allocation_id
    h.declare({ANY: 1})
    assert h.sm.number_pending_requests() == 0
    assert h.req.requested(h.job) == [first]  # the one with a slot in flight stays
    h.declare({})
    assert h.req.requested(h.job) == []


def test_slots_on_their_way_count_until_the_job_master_acknowledges_them() -> None:
    h = DeclarationHarness()
    h.add_te(slots=2)
    h.declare({ANY: 2})
    confirmed = h.confirm_all()
    assert len(confirmed) == 2
    assert sorted(h.req.on_the_way(h.job)) == sorted(confirmed)
    # The offers have not reached the JobMaster yet: it still declares 2. Nothing new.
    h.declare({ANY: 2})
    assert h.sm.number_pending_requests() == 0 and len(h.actions.allocations) == 2
    # It took them: declares 0 and acknowledges both.
    h.declare({}, received=confirmed)
    assert h.req.on_the_way(h.job) == [] and h.req.requested(h.job) == []
    assert h.sm.slot_counts()[SlotState.ALLOCATED] == 2


def test_an_acknowledgement_overtaking_the_task_executors_yes_leaves_nothing_on_the_way() -> None:
    # The task executor offers the slot to the JobMaster as it answers the resource manager;
    # the JobMaster's declaration acknowledging it can arrive before that answer.
    h = DeclarationHarness()
    h.add_te(slots=2)
    h.declare({ANY: 3})
    (first, _), (second, _) = [(r.allocation_id, s) for _, s, r in h.actions.allocations]
    assert h.req.unmet(h.job) == 1
    # The JobMaster took both and waits for one more, before either yes reached us.
    h.declare({ANY: 1}, received=[first, second])
    assert h.req.requested(h.job) == [] and h.req.unmet(h.job) == 1
    assert h.confirm_all() == [first, second]  # the yes arrives: the slots are the job's
    assert h.req.on_the_way(h.job) == [] and h.req.unmet(h.job) == 1
    assert h.sm.slot_counts()[SlotState.ALLOCATED] == 2
    # What the job is shown waiting for is what its JobMaster waits for.
    h.run_deferred()
    assert h.req.unmet(h.job) == 1 and h.sm.number_pending_requests() == 0
    assert len(h.actions.allocations) == 2  # and nothing was asked for twice


def test_a_slot_freed_before_its_acknowledgement_is_asked_for_again() -> None:
    h = DeclarationHarness()
    te = h.add_te(slots=2)
    h.declare({ANY: 1})
    (allocation_id,) = h.confirm_all()
    slot_id = h.actions.allocations[0][1]
    # The offer failed (the TE could not reach the JobMaster) and the TE freed the slot.
    assert h.sm.free_slot(slot_id, allocation_id)
    assert h.req.on_the_way(h.job) == []
    assert len(h.actions.allocations) == 1  # reconciled only on a later turn
    h.run_deferred()
    assert len(h.actions.allocations) == 2
    assert h.actions.allocations[1][1].resource_id == te.resource_id


def test_a_slot_freed_after_the_acknowledgement_is_not_asked_for_again() -> None:
    h = DeclarationHarness()
    h.add_te(slots=2)
    h.declare({ANY: 1})
    (allocation_id,) = h.confirm_all()
    h.declare({}, received=[allocation_id])
    assert h.sm.free_slot(h.actions.allocations[0][1], allocation_id)
    h.run_deferred()
    assert len(h.actions.allocations) == 1 and h.sm.number_pending_requests() == 0


def test_exclusions_are_kept_per_requirement() -> None:
    h = DeclarationHarness()
    first = h.add_te(slots=1)
    second = h.add_te(slots=1)
    h.declare({RequirementKey(UNKNOWN_PROFILE, frozenset({first.resource_id})): 1})
    assert [slot.resource_id for _, slot, _ in h.actions.allocations] == [second.resource_id]


def test_a_stale_declaration_is_ignored_and_a_new_session_replaces_the_old_one() -> None:
    h = DeclarationHarness()
    h.add_te(slots=1)
    h.declare({ANY: 3})
    assert not h.req.declare(h.job, "s1", "jm-address", 1, {ANY: 9}, [], None)
    assert h.req.unmet(h.job) == 2 and len(h.req.requested(h.job)) == 1
    # A new JobMaster session of the job: the old session's request is withdrawn.
    assert h.req.declare(h.job, "s2", "jm-address", 1, {ANY: 1}, [], None)
    assert h.req.unmet(h.job) == 1 and h.req.requested(h.job) == []
    h.req.remove_job(h.job)
    assert h.req.unmet() == 0


def test_a_request_the_slot_manager_gave_up_on_is_forgotten_and_its_need_unmet() -> None:
    h = DeclarationHarness()
    h.add_te(slots=1)
    h.declare({ANY: 1})
    (allocation_id,) = h.req.requested(h.job)
    assert h.req.request_failed(allocation_id)
    h.run_deferred()
    assert h.req.requested(h.job) == [] and h.req.unmet() == 1
    assert not h.req.request_failed(allocation_id)


def test_a_declaration_with_a_profile_no_slot_could_serve_is_refused_entry_by_entry() -> None:
    h = DeclarationHarness()
    big = common_pb2.ResourceProfile(cpu_cores=64.0, memory_mb=1 << 20)
    request = resource_manager_pb2.DeclareRequiredResourcesRequest(
        job_id=h.job, job_master_session_id="s1", version=1
    )
    request.requirements.add(count=2)
    request.requirements.add(resource_profile=big, count=1)
    request.requirements.add(count=1, excluded_task_executors=[str(new_resource_id())])
    declared, received, reply = declaration_from_proto(
        request, [registration(new_resource_id(), 4, SMALL)]
    )
    assert [r.index for r in reply.refused] == [1]
    assert "can never be served" in reply.refused[0].error.message
    assert sum(declared.values()) == 3 and len(declared) == 2 and received == []


def test_the_wait_of_a_declared_need_counts_from_when_it_was_declared() -> None:
    waits: list[float] = []
    h = DeclarationHarness(on_request_served=waits.append)  # what the wait histogram is fed
    te = h.add_te(slots=1)
    h.declare({ANY: 2})  # one slot now, one unmet
    (first,) = h.confirm_all()
    assert waits == [0.0]
    h.timers.advance(7.0)
    h.declare({ANY: 1}, received=[first])
    # The first slot comes back free; the unmet need, 7 s old, takes it.
    assert h.sm.free_slot(h.actions.allocations[0][1], first)
    h.run_deferred()
    slot_id, request = h.actions.allocations[1][1], h.actions.allocations[1][2]
    assert slot_id.resource_id == te.resource_id
    assert h.sm.on_allocation_result(request.allocation_id, slot_id, None)
    assert waits == [0.0, 7.0]


def test_need_times_are_runs_newest_dropped_first_oldest_served_first() -> None:
    times = _NeedTimes()
    times.resize(1_000_000, 1.0)  # one run, however many slots
    times.resize(1_000_003, 2.0)
    assert (times.total, times.at(0), times.at(999_999), times.at(1_000_000)) == (
        1_000_003,
        1.0,
        1.0,
        2.0,
    )
    times.resize(999_999, 3.0)  # the newest go: the whole 2.0 run and one of the 1.0 run
    assert (times.total, times.at(999_998), times.at(999_999)) == (999_999, 1.0, None)
    times.resize(0, 4.0)
    times.resize(2, 5.0)
    times.pop_oldest()
    assert (times.total, times.at(0), times.at(1)) == (1, 5.0, None)
