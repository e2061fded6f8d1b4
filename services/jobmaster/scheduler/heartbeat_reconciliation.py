"""What the JobMaster does with a task executor's heartbeat report (the handler side of Flink's
``DefaultExecutionDeploymentReconciler``; the comparison itself is
:meth:`~sparkmill.services.jobmaster.scheduler.deployments.DeploymentTracker.reconcile`).

* An attempt acknowledged there but missing from the report is failed at once (a failure of the
  environment: it is restarted, never taken for the task's own error).
* An attempt the report lists but the JobMaster does not count as live there is to be cancelled
  there, which frees its slot - unless the JobMaster has it as FINISHED on that executor: its
  final state crossed the heartbeat (the task executor lists an ended attempt until it sees the
  acknowledgement), so it runs no more and there is nothing to cancel.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sparkmill.common.core.ids import ExecutionAttemptID, JobID, ResourceID, short
from sparkmill.common.core.states import ExecutionState
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from sparkmill.services.jobmaster.scheduler.default_scheduler import DefaultScheduler
from sparkmill.services.jobmaster.scheduler.deployments import DeploymentTracker, is_live_state

log = logging.getLogger(__name__)


def apply_heartbeat_report(
    *,
    job_id: JobID,
    graph: ExecutionGraph,
    scheduler: DefaultScheduler,
    deployments: DeploymentTracker,
    resource_id: ResourceID,
    address: str,
    hosted: Iterable[str],
    heartbeat_sent_at: float,
) -> list[ExecutionAttemptID]:
    """Fail the attempts missing on ``resource_id``; the attempts to cancel there."""

    def is_live_on(attempt_id: ExecutionAttemptID, where: ResourceID) -> bool:
        execution = graph.execution(attempt_id)
        return (
            execution is not None
            and execution.is_current
            and execution.task_executor_id == where
            and is_live_state(execution.state)
        )

    def finished_there(attempt_id: ExecutionAttemptID) -> bool:
        execution = graph.execution(attempt_id)
        return (
            execution is not None
            and execution.task_executor_id == resource_id
            and execution.state is ExecutionState.FINISHED
        )

    outcome = deployments.reconcile(resource_id, hosted, heartbeat_sent_at, is_live_on)
    for attempt_id in outcome.missing:
        log.warning(
            "job %s: task executor %s does not have attempt %s; failing it over",
            short(job_id),
            short(resource_id),
            short(attempt_id),
        )
        scheduler.update_task_execution_state(
            attempt_id,
            ExecutionState.FAILED,
            message=f"task executor {short(resource_id)} ({address}) no longer runs "
            "this attempt (heartbeat reconciliation)",
            exception_type="TaskNotFoundError",
        )
    to_cancel = [a for a in outcome.unknown if not finished_there(a)]
    for attempt_id in to_cancel:
        log.info(
            "job %s: task executor %s runs attempt %s, which this JobMaster does not count; "
            "cancelling it",
            short(job_id),
            short(resource_id),
            short(attempt_id),
        )
    return to_cancel


__all__ = ["apply_heartbeat_report"]
