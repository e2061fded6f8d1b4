"""The dispatcher's per-job placement: the transition table (allowed and refused) and guards."""

from __future__ import annotations

import itertools

import pytest

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import JobID
from sparkmill.common.core.states import JobStatus
from sparkmill.common.v1 import common_pb2
from sparkmill.services.dispatcher.job_placement import (
    JOB_PLACEMENT_TRANSITIONS,
    JobPlacement,
    JobRecord,
    JobTable,
    can_be_released,
    can_start,
    is_waiting_for_claim,
)

P = JobPlacement
T = JOB_PLACEMENT_TRANSITIONS

ALLOWED = {
    (P.RECOVERED, P.WAITING),  # the grace period is over
    (P.RECOVERED, P.ASSIGNED),  # the process that led it registers again
    (P.RECOVERED, P.ENDED),
    (P.WAITING, P.STARTING),
    (P.WAITING, P.ASSIGNED),  # a standby JobMaster that got leadership reports first
    (P.WAITING, P.ENDED),
    (P.STARTING, P.ASSIGNED),
    (P.STARTING, P.WAITING),  # StartJob refused, or the process was lost meanwhile
    (P.STARTING, P.ENDED),
    (P.ASSIGNED, P.ASSIGNED),  # a report names the hosting process again
    (P.ASSIGNED, P.WAITING),  # JobMaster suspended, or its process lost
    (P.ASSIGNED, P.ENDED),
}


def test_the_table_allows_exactly_the_documented_transitions() -> None:
    for current, target in itertools.product(P, P):
        assert T.can_transition(current, target) == ((current, target) in ALLOWED), (
            current,
            target,
        )


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (P.ENDED, P.WAITING),  # an ended job is never started again
        (P.ENDED, P.ASSIGNED),
        (P.RECOVERED, P.STARTING),  # a recovered job is not started before the grace period
        (P.WAITING, P.RECOVERED),
        (P.STARTING, P.STARTING),
        (P.WAITING, P.WAITING),
    ],
)
def test_refused_transitions_are_bugs(current: JobPlacement, target: JobPlacement) -> None:
    assert not T.can_transition(current, target)
    with pytest.raises(IllegalStateBug, match="job placement"):
        T.check(current, target, "job 1234")


def test_ended_is_the_only_terminal_placement() -> None:
    assert [p for p in P if T.is_terminal(p)] == [P.ENDED]


def test_a_job_lives_from_submission_to_its_end_through_a_lost_process() -> None:
    path = [P.WAITING, P.STARTING, P.ASSIGNED, P.WAITING, P.STARTING, P.ASSIGNED, P.ENDED]
    for current, target in itertools.pairwise(path):
        T.check(current, target)


def test_guards() -> None:
    assert [p for p in P if can_start(p)] == [P.WAITING]
    assert [p for p in P if can_be_released(p)] == [P.STARTING, P.ASSIGNED]
    assert [p for p in P if is_waiting_for_claim(p)] == [P.RECOVERED]
    # Every guard agrees with the table: what it lets through is a legal move.
    assert all(T.can_transition(p, P.STARTING) for p in P if can_start(p))
    assert all(T.can_transition(p, P.WAITING) for p in P if can_be_released(p))
    assert all(T.can_transition(p, P.WAITING) for p in P if is_waiting_for_claim(p))


def record(n: int, placement: JobPlacement = P.WAITING) -> JobRecord:
    job_id = JobID(f"{n:032x}")
    return JobRecord(job_id, f"job {n}", common_pb2.JobGraph(), float(n), placement=placement)


def test_the_job_table_knows_its_waiting_jobs_without_a_scan_oldest_first() -> None:
    jobs = JobTable()
    for n in range(1000):  # ended jobs, kept for their results
        jobs[record(n).job_id] = record(n, P.ENDED)
    late, early, recovered = record(2000), record(1500), record(1700, P.RECOVERED)
    for job in (late, early, recovered):
        jobs[job.job_id] = job
    assert jobs.waiting() == [early, late]
    assert len(jobs._waiting) == 2  # the index holds only what may wait

    early.move_to(P.STARTING)
    recovered.move_to(P.WAITING)  # its grace period is over
    assert jobs.waiting() == [recovered, late]

    # A started job whose process is lost waits again; an ended or forgotten one never does.
    early.move_to(P.ASSIGNED)
    early.status = JobStatus.RUNNING
    early.lose_process()
    late.move_to(P.ENDED)
    del jobs[recovered.job_id]
    assert jobs.waiting() == [early]

    jobs.clear()
    assert jobs.waiting() == [] and not jobs._waiting
