"""Which attempts run where, reconciled with the task executors' heartbeat reports.

Flink's ``ExecutionDeploymentTracker`` and ``DefaultExecutionDeploymentReconciler``: the JobMaster
remembers on which task executor each attempt was deployed and when the task executor
acknowledged the deployment. Every heartbeat answer of a task executor lists the attempts of the
job it still hosts (running, or ended with a final state the JobMaster has not acknowledged yet),
and the two views are compared:

* **missing** - an attempt the JobMaster believes is running there, whose deployment was
  acknowledged before the heartbeat was sent, but which the task executor does not have (its
  thread died, the process restarted under the same identity, a state update was lost). Waiting
  for a timeout would only delay the failover: it is failed at once.
* **unknown** - an attempt the task executor runs but the JobMaster no longer counts as a
  current, live attempt there (superseded by a restart, written off, from before a failover).
  The task executor is told to cancel it, which frees its slot for work that counts.

Attempts still being deployed are never "missing": the task executor may not have them yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sparkmill.common.core.ids import ExecutionAttemptID, ResourceID
from sparkmill.common.core.states import ExecutionState

# Is the attempt the current one of its subtask, on this executor, and not ended?
LiveCheck = Callable[[ExecutionAttemptID, ResourceID], bool]

_ON_THE_TASK_EXECUTOR = frozenset(
    {ExecutionState.DEPLOYING, ExecutionState.INITIALIZING, ExecutionState.RUNNING}
)


@dataclass(frozen=True)
class Reconciliation:
    missing: tuple[ExecutionAttemptID, ...]
    unknown: tuple[ExecutionAttemptID, ...]


class DeploymentTracker:
    """Deployed attempts per task executor, with the time their deployment was acknowledged."""

    def __init__(self) -> None:
        self._pending: dict[ExecutionAttemptID, ResourceID] = {}
        self._deployed: dict[ResourceID, dict[ExecutionAttemptID, float]] = {}

    def start_deployment(self, attempt_id: ExecutionAttemptID, resource_id: ResourceID) -> None:
        self._pending[attempt_id] = resource_id

    def complete_deployment(self, attempt_id: ExecutionAttemptID, acknowledged_at: float) -> None:
        resource_id = self._pending.pop(attempt_id, None)
        if resource_id is not None:
            self._deployed.setdefault(resource_id, {})[attempt_id] = acknowledged_at

    def follow(
        self,
        attempt_id: ExecutionAttemptID,
        resource_id: ResourceID,
        submitted: asyncio.Future[None],
    ) -> None:
        """Track a deployment sent as ``submitted``: pending now, deployed once the task
        executor took it, forgotten if it refused it (or the send failed)."""
        self.start_deployment(attempt_id, resource_id)

        def answered(done: asyncio.Future[None]) -> None:
            if done.cancelled() or done.exception() is not None:
                self.stop(attempt_id)
            else:
                self.complete_deployment(attempt_id, asyncio.get_running_loop().time())

        submitted.add_done_callback(answered)

    def stop(self, attempt_id: ExecutionAttemptID) -> None:
        resource_id = self._pending.pop(attempt_id, None)
        for attempts in [] if resource_id else self._deployed.values():
            attempts.pop(attempt_id, None)

    def forget_task_executor(self, resource_id: ResourceID) -> None:
        self._deployed.pop(resource_id, None)
        for attempt_id in [a for a, r in self._pending.items() if r == resource_id]:
            del self._pending[attempt_id]

    def deployed_on(self, resource_id: ResourceID) -> dict[ExecutionAttemptID, float]:
        return dict(self._deployed.get(resource_id, {}))

    def reconcile(
        self,
        resource_id: ResourceID,
        reported: Iterable[str],
        heartbeat_sent_at: float,
        is_live: LiveCheck,
    ) -> Reconciliation:
        """Compare what ``resource_id`` reported with what was deployed there.

        ``heartbeat_sent_at`` is when the heartbeat that produced ``reported`` left: only
        deployments acknowledged before it can be missing from the report. Attempts that are no
        longer live are dropped from the tracker on the way.
        """
        hosted = {ExecutionAttemptID(a) for a in reported}
        deployed = self._deployed.get(resource_id, {})
        missing: list[ExecutionAttemptID] = []
        for attempt_id, acknowledged_at in list(deployed.items()):
            if not is_live(attempt_id, resource_id):
                del deployed[attempt_id]
            elif attempt_id not in hosted and acknowledged_at < heartbeat_sent_at:
                missing.append(attempt_id)
                del deployed[attempt_id]
        unknown = [
            attempt_id
            for attempt_id in sorted(hosted)
            if attempt_id not in self._pending and not is_live(attempt_id, resource_id)
        ]
        return Reconciliation(tuple(missing), tuple(unknown))


def is_live_state(state: ExecutionState) -> bool:
    """States in which an attempt is expected to run on its task executor (a CANCELING one is
    on its way out: the task executor may or may not still have it)."""
    return state in _ON_THE_TASK_EXECUTOR
