"""The dispatcher's per-job placement: the transition table (allowed and refused) and guards."""

from __future__ import annotations

import itertools

import pytest

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.services.dispatcher.job_placement import (
    JOB_PLACEMENT_TRANSITIONS,
    JobPlacement,
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
