"""Heartbeat payload reconciliation of deployed attempts (Flink's ExecutionDeploymentReconciler)."""

from __future__ import annotations

from sparkmill.common.core.ids import (
    ExecutionAttemptID,
    ResourceID,
    new_attempt_id,
    new_resource_id,
)
from sparkmill.common.core.states import ExecutionState
from sparkmill.services.jobmaster.scheduler.deployments import DeploymentTracker, is_live_state


class LiveAttempts:
    """The JobMaster's view: which attempt is current and live on which executor."""

    def __init__(self) -> None:
        self.on: dict[ExecutionAttemptID, ResourceID] = {}

    def __call__(self, attempt_id: ExecutionAttemptID, resource_id: ResourceID) -> bool:
        return self.on.get(attempt_id) == resource_id


def deployed(
    tracker: DeploymentTracker, live: LiveAttempts, te: ResourceID, acknowledged_at: float
) -> ExecutionAttemptID:
    attempt = new_attempt_id()
    tracker.start_deployment(attempt, te)
    tracker.complete_deployment(attempt, acknowledged_at)
    live.on[attempt] = te
    return attempt


def test_an_attempt_the_executor_does_not_have_is_missing_once() -> None:
    tracker, live, te = DeploymentTracker(), LiveAttempts(), new_resource_id()
    kept, lost = deployed(tracker, live, te, 1.0), deployed(tracker, live, te, 1.0)
    outcome = tracker.reconcile(te, [kept], heartbeat_sent_at=2.0, is_live=live)
    assert outcome.missing == (lost,)
    assert outcome.unknown == ()
    # Reported once: the next heartbeat does not fail it again.
    assert tracker.reconcile(te, [kept], 3.0, live).missing == ()


def test_a_deployment_acknowledged_after_the_heartbeat_left_is_not_missing() -> None:
    tracker, live, te = DeploymentTracker(), LiveAttempts(), new_resource_id()
    late = deployed(tracker, live, te, acknowledged_at=5.0)
    assert tracker.reconcile(te, [], heartbeat_sent_at=4.0, is_live=live).missing == ()
    assert tracker.reconcile(te, [], heartbeat_sent_at=6.0, is_live=live).missing == (late,)


def test_a_deployment_in_flight_is_neither_missing_nor_unknown() -> None:
    tracker, live, te = DeploymentTracker(), LiveAttempts(), new_resource_id()
    attempt = new_attempt_id()
    tracker.start_deployment(attempt, te)
    outcome = tracker.reconcile(te, [attempt], heartbeat_sent_at=9.0, is_live=live)
    assert outcome == outcome.__class__((), ())


def test_an_attempt_the_job_master_does_not_count_is_unknown() -> None:
    tracker, live, te = DeploymentTracker(), LiveAttempts(), new_resource_id()
    superseded = deployed(tracker, live, te, 1.0)
    del live.on[superseded]  # a restart replaced it; the executor still runs it
    stranger = new_attempt_id()
    outcome = tracker.reconcile(te, [superseded, stranger], 2.0, live)
    assert set(outcome.unknown) == {superseded, stranger}
    assert outcome.missing == ()
    assert tracker.deployed_on(te) == {}


def test_an_attempt_live_on_another_executor_is_unknown_here() -> None:
    tracker, live = DeploymentTracker(), LiveAttempts()
    here, there = new_resource_id(), new_resource_id()
    moved = deployed(tracker, live, there, 1.0)
    assert tracker.reconcile(here, [moved], 2.0, live).unknown == (moved,)


def test_a_lost_executor_is_forgotten() -> None:
    tracker, live, te = DeploymentTracker(), LiveAttempts(), new_resource_id()
    deployed(tracker, live, te, 1.0)
    tracker.forget_task_executor(te)
    assert tracker.reconcile(te, [], 2.0, live).missing == ()


def test_live_states_are_those_on_the_executor() -> None:
    assert {s for s in ExecutionState if is_live_state(s)} == {
        ExecutionState.DEPLOYING,
        ExecutionState.INITIALIZING,
        ExecutionState.RUNNING,
    }
