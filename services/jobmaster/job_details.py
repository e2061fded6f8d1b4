"""What a JobMaster tells about its job: the :class:`JobDetails` of status reports, of the
dispatcher's ``GetJobStatus`` and of the job result (Flink's ``JobDetailsInfo`` with the
per-vertex task counts and the exception history).

Rendered from the execution graph (current attempts, where they ran) and the scheduler (I/O
counters, restarts, the failure cause and the failures kept).
"""

from __future__ import annotations

from sparkmill.common.core.proto_convert import job_status_to_proto
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.common.v1 import common_pb2, jobs_pb2
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from sparkmill.services.jobmaster.scheduler.default_scheduler import DefaultScheduler
from sparkmill.services.jobmaster.scheduler.speculative_execution import racing_attempts

# The failure cause is shown while the job fails or restarts, and once it failed.
_SHOWS_FAILURE_CAUSE = frozenset({JobStatus.FAILED, JobStatus.FAILING, JobStatus.RESTARTING})


def render_job_details(
    *,
    name: str,
    status: JobStatus,
    submitted_at: float,
    ended_at: float,
    job_master_address: str,
    graph: ExecutionGraph,
    scheduler: DefaultScheduler,
    slot_wait_reason: str = "",
) -> jobs_pb2.JobDetails:
    details = jobs_pb2.JobDetails(
        job_id=graph.job_id,
        name=name,
        status=job_status_to_proto(status),
        submitted_at=submitted_at,
        ended_at=ended_at,
        job_master_address=job_master_address,
        restarts=scheduler.restarts,
        recovered_subtasks=scheduler.recovered_subtasks,
    )
    _add_vertices(details, graph, scheduler)
    # The resource manager's word lags by up to a heartbeat: shown only while a subtask waits.
    if (
        slot_wait_reason
        and not status.is_terminal
        and any(v.tasks_by_state.get(ExecutionState.SCHEDULED.value) for v in details.vertices)
    ):
        details.slot_wait_reason = slot_wait_reason
    if scheduler.failure_cause and status in _SHOWS_FAILURE_CAUSE:
        details.failure.code = common_pb2.INTERNAL
        details.failure.message = scheduler.failure_cause
    _add_exceptions(details, scheduler)
    for resource_id, until in sorted(scheduler.speculation.blocklist.until.items()):
        details.blocked_task_executors.add(resource_id=resource_id, until=until)
    return details


def _add_vertices(
    details: jobs_pb2.JobDetails, graph: ExecutionGraph, scheduler: DefaultScheduler
) -> None:
    speculation = scheduler.speculation
    for ejv in graph.job_vertices:
        counts: dict[int, int] = {}
        attempts: list[int] = []
        locations: list[str] = []
        states: list[int] = []
        started: list[float] = []
        ended: list[float] = []
        speculative: list[int] = []
        for vertex in ejv.task_vertices:
            if speculation.enabled:
                speculative.append(sum(1 for e in racing_attempts(vertex) if e.is_speculative))
            execution = vertex.current_execution
            counts[execution.state.value] = counts.get(execution.state.value, 0) + 1
            attempts.append(execution.attempt_number)
            locations.append(execution.task_executor_id)
            states.append(execution.state.value)
            started.append(execution.state_timestamp(ExecutionState.DEPLOYING) or 0.0)
            terminal = execution.state.is_terminal
            ended.append((terminal and execution.state_timestamp(execution.state)) or 0.0)
        io = scheduler.io.get(ejv.name)
        details.vertices.add(
            vertex_id=ejv.id,
            name=ejv.name,
            parallelism=max(0, ejv.parallelism),  # 0: not decided yet ("auto")
            tasks_by_state=counts,
            subtask_attempts=attempts,
            subtask_task_executors=locations,
            subtask_states=states,
            subtask_start_times=started,
            subtask_end_times=ended,
            records_in=io.records_in if io else 0,
            records_out=io.records_out if io else 0,
            bytes_in=io.bytes_in if io else 0,
            bytes_out=io.bytes_out if io else 0,
            parallelism_decision=graph.parallelism_decisions.get(ejv.id, ""),
            speculative_attempts=speculation.attempts_started.get(ejv.id, 0),
            speculative_wins=speculation.attempts_won.get(ejv.id, 0),
            subtask_speculative_running=speculative,
        )


def _add_exceptions(details: jobs_pb2.JobDetails, scheduler: DefaultScheduler) -> None:
    for record in scheduler.exceptions:
        details.exceptions.add(
            timestamp=record.timestamp,
            vertex_name=record.vertex_name,
            subtask_index=record.subtask_index,
            attempt_number=record.attempt_number,
            task_executor=record.task_executor,
            error=common_pb2.ErrorInfo(
                code=common_pb2.INTERNAL,
                message=record.message,
                details=record.details,
                exception_type=record.exception_type,
            ),
        )
