"""Protobuf answers of the dispatcher's gateway -> the JSON documents of the REST API.

Shapes and names follow Flink's REST API where the concept is the same (``jid``, ``state``,
``start-time`` in epoch milliseconds, ``tasks`` counts per execution state, ``plan.nodes`` with
``inputs``, ``exceptionHistory.entries``, ``taskmanagers``), so tools written against Flink's
JobManager read them with few changes. Pure functions: no I/O, easy to test.
"""

from __future__ import annotations

import time
from typing import Any

from sparkmill.common.core.states import (
    ExecutionState,
    JobStatus,
    execution_state_name,
    job_status_name,
)
from sparkmill.common.runtime.service_base import http_url
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, jobs_pb2, resource_manager_pb2

Json = dict[str, Any]

# The names come from sparkmill.common.core.states, which follows Flink's JobStatus and
# ExecutionState: the JSON spells them exactly as Flink's REST API does.
EXECUTION_STATES = tuple(state.name for state in ExecutionState)
JOB_STATES = tuple(status.name for status in JobStatus)
TERMINAL_JOB_STATES = frozenset(s.name for s in JobStatus if s.is_globally_terminal)
_ES = ExecutionState


def execution_state(number: int) -> str:
    return execution_state_name(number)


def job_state(number: int) -> str:
    return job_status_name(number)


def states_json() -> Json:
    """Every state name, for the dashboard (which keeps no list of its own): job states,
    the terminal ones, and execution states in lifecycle order (the order of a vertex's
    ``tasks`` counts too)."""
    return {
        "job": list(JOB_STATES),
        "job-terminal": [name for name in JOB_STATES if name in TERMINAL_JOB_STATES],
        "execution": list(EXECUTION_STATES),
    }


def millis(seconds: float) -> int:
    """Epoch seconds -> Flink's epoch milliseconds; -1 for "not yet" (as Flink)."""
    return round(seconds * 1000) if seconds > 0 else -1


def _duration_ms(start: float, end: float, now: float) -> int:
    if start <= 0:
        return -1
    return round(((end if end > 0 else now) - start) * 1000)


def service_json(info: common_pb2.ServiceInfo) -> Json:
    return {
        "role": info.role,
        "id": info.id,
        "address": info.address,
        "host": info.hostname,
        "pid": info.pid,
        "leader": info.is_leader,
        "metrics-url": http_url(info.metrics_url),
        "rest-url": http_url(info.rest_url),
        "start-time": millis(info.started_at),
    }


def job_summary_json(job: dispatcher_pb2.JobSummary, now: float) -> Json:
    return {
        "jid": job.job_id,
        "name": job.name,
        "state": job_state(job.status),
        "start-time": millis(job.submitted_at),
        "end-time": millis(job.ended_at),
        "duration": _duration_ms(job.submitted_at, job.ended_at, now),
        "restarts": job.restarts,
        "tasks": {"total": job.total_tasks, "finished": job.finished_tasks},
    }


def vertex_state(tasks: dict[str, int], parallelism: int) -> str:
    """One state for a vertex from its subtasks' states (Flink's aggregate vertex state)."""
    for state in (_ES.FAILED, _ES.CANCELING, _ES.CANCELED):
        if tasks.get(state.name):
            return state.name
    if parallelism and tasks.get(_ES.FINISHED.name, 0) == parallelism:
        return _ES.FINISHED.name
    for state in (_ES.RUNNING, _ES.INITIALIZING, _ES.DEPLOYING, _ES.SCHEDULED):
        if tasks.get(state.name):
            return state.name
    return _ES.CREATED.name


def _tasks(vertex: jobs_pb2.VertexDetails) -> dict[str, int]:
    counts = dict.fromkeys(EXECUTION_STATES, 0)
    for number, count in vertex.tasks_by_state.items():
        name = execution_state(number)
        counts[name] = counts.get(name, 0) + count
    known = sum(counts.values())
    if known < vertex.parallelism:  # no report yet: every subtask is still to be created
        counts[_ES.CREATED.name] += vertex.parallelism - known
    return counts


def vertex_json(vertex: jobs_pb2.VertexDetails, now: float) -> Json:
    tasks = _tasks(vertex)
    starts = [t for t in vertex.subtask_start_times if t > 0]
    ends = list(vertex.subtask_end_times)
    state = vertex_state(tasks, vertex.parallelism)
    start = min(starts) if starts else 0.0
    end = max(ends) if ends and all(e > 0 for e in ends) else 0.0
    return {
        "id": vertex.vertex_id,
        "name": vertex.name,
        "parallelism": vertex.parallelism,
        # Not Flink's: why the parallelism is what it is ("auto" while still to be decided).
        "parallelism-decision": vertex.parallelism_decision,
        "status": state,
        "start-time": millis(start),
        "end-time": millis(end),
        "duration": _duration_ms(start, end, now),
        "tasks": tasks,
        "attempts-max": max(vertex.subtask_attempts, default=0),
        # Not Flink's REST fields (its web UI shows speculative attempts per subtask):
        "speculative-attempts": vertex.speculative_attempts,
        "speculative-wins": vertex.speculative_wins,
        "metrics": {
            "read-records": vertex.records_in,
            "write-records": vertex.records_out,
            "read-bytes": vertex.bytes_in,
            "write-bytes": vertex.bytes_out,
        },
    }


def subtasks_json(vertex: jobs_pb2.VertexDetails, now: float) -> list[Json]:
    """One entry per subtask's current attempt (Flink's ``/jobs/:jid/vertices/:vid``)."""

    def at(values: Any, index: int, default: Any) -> Any:
        return values[index] if index < len(values) else default

    subtasks = []
    for index in range(vertex.parallelism):
        start = at(vertex.subtask_start_times, index, 0.0)
        end = at(vertex.subtask_end_times, index, 0.0)
        subtasks.append(
            {
                "subtask": index,
                "status": execution_state(at(vertex.subtask_states, index, 0)),
                "attempt": at(vertex.subtask_attempts, index, 0),
                "taskmanager-id": at(vertex.subtask_task_executors, index, ""),
                "speculative-running": at(vertex.subtask_speculative_running, index, 0),
                "start-time": millis(start),
                "end-time": millis(end),
                "duration": _duration_ms(start, end, now),
            }
        )
    return subtasks


def job_details_json(
    details: jobs_pb2.JobDetails, graph: common_pb2.JobGraph | None, now: float
) -> Json:
    state = job_state(details.status)
    return {
        "jid": details.job_id,
        "name": details.name,
        "state": state,
        "isStoppable": False,
        "start-time": millis(details.submitted_at),
        "end-time": millis(details.ended_at),
        "duration": _duration_ms(details.submitted_at, details.ended_at, now),
        "now": millis(now),
        "restarts": details.restarts,
        "recovered-subtasks": details.recovered_subtasks,
        "pipeline-args": list(details.pipeline_args),
        "job-master": service_json(details.job_master) if details.HasField("job_master") else None,
        "job-master-address": details.job_master_address,
        "failure": error_json(details.failure) if details.HasField("failure") else None,
        "slot-wait-reason": details.slot_wait_reason or None,
        "blocked-taskmanagers": [
            {"id": b.resource_id, "until": millis(b.until)} for b in details.blocked_task_executors
        ],
        "vertices": [
            {**vertex_json(v, now), "subtasks": subtasks_json(v, now)} for v in details.vertices
        ],
        "status-counts": _status_counts(details),
        "plan": plan_json(details, graph)["plan"],
    }


def _status_counts(details: jobs_pb2.JobDetails) -> dict[str, int]:
    counts = dict.fromkeys(EXECUTION_STATES, 0)
    for vertex in details.vertices:
        state = vertex_state(_tasks(vertex), vertex.parallelism)
        counts[state] = counts.get(state, 0) + 1
    return counts


def error_json(error: common_pb2.ErrorInfo) -> Json:
    return {
        "exception-type": error.exception_type,
        "message": error.message,
        "stacktrace": error.details,
    }


PATTERNS = {common_pb2.POINTWISE: "POINTWISE", common_pb2.ALL_TO_ALL: "ALL_TO_ALL"}
RESULT_TYPES = {common_pb2.BLOCKING: "BLOCKING", common_pb2.PIPELINED: "PIPELINED"}


def plan_json(details: jobs_pb2.JobDetails, graph: common_pb2.JobGraph | None) -> Json:
    """Flink's ``/jobs/:jid/plan``: nodes with their inputs (edge pattern and exchange)."""
    producers: dict[str, tuple[str, str]] = {}
    vertices = list(graph.vertices) if graph is not None else []
    for vertex in vertices:
        for dataset in vertex.produced:
            producers[dataset.id] = (vertex.id, RESULT_TYPES.get(dataset.result_type, ""))
    decided = {v.vertex_id: v.parallelism for v in details.vertices}
    nodes = []
    for vertex in vertices:
        inputs = []
        for number, edge in enumerate(vertex.inputs):
            source, exchange = producers.get(edge.source_dataset_id, ("", ""))
            inputs.append(
                {
                    "num": number,
                    "id": source,
                    "ship_strategy": PATTERNS.get(edge.pattern, "UNKNOWN"),
                    "partitioner": edge.partitioner,
                    "exchange": exchange.lower(),
                }
            )
        nodes.append(
            {
                "id": vertex.id,
                # An open parallelism (-1 in the graph) as the JobMaster decided it (0: not yet).
                "parallelism": decided.get(vertex.id, 0)
                if vertex.parallelism < 0
                else vertex.parallelism,
                "operator": vertex.operator.kind,
                "description": vertex.name,
                "inputs": inputs,
            }
        )
    if not nodes:  # the graph is gone (a finished job recovered by a new leader): no edges
        nodes = [
            {
                "id": v.vertex_id,
                "parallelism": v.parallelism,
                "operator": "",
                "description": v.name,
                "inputs": [],
            }
            for v in details.vertices
        ]
    return {"plan": {"jid": details.job_id, "name": details.name, "nodes": nodes}}


def exceptions_json(details: jobs_pb2.JobDetails, *, max_entries: int = 100) -> Json:
    """Flink's ``/jobs/:jid/exceptions``: the root exception and the history, newest first.
    Tasks are named as in the failure messages: ``name (subtask from 1/parallelism)``."""
    parallelism = {v.name: v.parallelism for v in details.vertices}
    entries = [
        {
            "exceptionName": failure.error.exception_type,
            "message": failure.error.message,
            "stacktrace": failure.error.details,
            "timestamp": millis(failure.timestamp),
            "taskName": f"{failure.vertex_name} ({failure.subtask_index + 1}/"
            f"{parallelism.get(failure.vertex_name, '?')})",
            "vertexName": failure.vertex_name,
            "subtaskIndex": failure.subtask_index,
            "attempt": failure.attempt_number,
            "taskManagerId": failure.task_executor,
        }
        for failure in reversed(details.exceptions)
    ]
    root: Json = {"root-exception": None, "timestamp": None}
    if details.HasField("failure") and details.failure.message:
        root = {
            "root-exception": details.failure.details or details.failure.message,
            "timestamp": millis(details.ended_at) if details.ended_at else None,
        }
    elif entries:
        root = {"root-exception": entries[0]["stacktrace"] or entries[0]["message"]}
        root["timestamp"] = entries[0]["timestamp"]
    return {
        **root,
        "exceptionHistory": {
            "entries": entries[:max_entries],
            "truncated": len(entries) > max_entries,
        },
    }


def result_json(result: jobs_pb2.JobResult) -> Json:
    """Flink's ``/jobs/:jid/execution-result`` (accumulators are binary: only their names)."""
    return {
        "status": {"id": "COMPLETED"},
        "job-execution-result": {
            "id": result.job_id,
            "application-status": job_state(result.status),
            "failure-cause": error_json(result.failure) if result.HasField("failure") else None,
            "accumulator-names": sorted(result.accumulators),
            "net-runtime": _duration_ms(
                result.details.submitted_at, result.details.ended_at, time.time()
            ),
        },
    }


def taskmanagers_json(status: resource_manager_pb2.ClusterStatus, now: float) -> Json:
    """Flink's ``/taskmanagers``: each task executor with its slots."""
    managers = []
    for te in status.task_executors:
        free = sum(1 for slot in te.slots if not slot.allocation_id)
        managers.append(
            {
                "id": te.resource_id,
                "path": te.address,
                "host": te.info.hostname,
                "pid": te.info.pid,
                "metrics-url": http_url(te.info.metrics_url),
                # Its Spark UI, once its session is up with spark.ui.enabled (else "").
                "spark-ui-url": http_url(te.info.spark_ui_url),
                "timeSinceLastHeartbeat": _duration_ms(te.last_heartbeat_at, 0.0, now),
                "registered-time": millis(te.registered_at),
                "slotsNumber": len(te.slots),
                "freeSlots": free,
                "totalResource": {
                    "cpuCores": te.total_resources.cpu_cores,
                    "memoryMB": te.total_resources.memory_mb,
                },
                "slots": [
                    {"index": slot.slot_index, "jobId": slot.job_id, "free": not slot.allocation_id}
                    for slot in te.slots
                ],
            }
        )
    return {"taskmanagers": managers}


def overview_json(
    jobs: list[dispatcher_pb2.JobSummary], status: resource_manager_pb2.ClusterStatus | None
) -> Json:
    """Flink's ``/overview`` (``flink-version`` becomes ``sparkmill-version``)."""
    states = [job_state(j.status) for j in jobs]
    return {
        "taskmanagers": len(status.task_executors) if status is not None else None,
        "slots-total": status.slots_total if status is not None else None,
        "slots-available": status.slots_free if status is not None else None,
        "jobs-running": sum(1 for s in states if s not in TERMINAL_JOB_STATES),
        "jobs-finished": states.count(JobStatus.FINISHED.name),
        "jobs-cancelled": states.count(JobStatus.CANCELED.name),
        "jobs-failed": states.count(JobStatus.FAILED.name),
        "workers": workers_json(status.workers)
        if status is not None and status.HasField("workers")
        else None,
    }


def workers_json(workers: resource_manager_pb2.WorkerStats) -> Json:
    """The task executors the resource manager starts and stops itself (its driver's)."""
    return {
        "driver": workers.driver,
        "pending": workers.pending,
        "registered": workers.registered,
        "releasing": workers.releasing,
        "started": workers.started_total,
        "failed": workers.failed_total,
        "released": workers.released_total,
        "max-slots": workers.max_slots,
        "recent-failures": workers.recent_failures,
        "starts-paused": workers.starts_paused,
    }


# -- attempt logs ---------------------------------------------------------------------------------


def attempt_log_ref_json(ref: jobs_pb2.AttemptLogRef) -> dict[str, Any]:
    return {
        "vertex-id": ref.vertex_id,
        "vertex-name": ref.vertex_name,
        "subtask": ref.subtask_index,
        "attempt": ref.attempt_number,
        "job-master-epoch": ref.job_master_epoch,
        "attempt-id": ref.attempt_id,
        "taskmanager-id": ref.task_executor,
        "url": (
            f"/v1/jobs/{ref.job_id}/vertices/{ref.vertex_id}/subtasks/{ref.subtask_index}"
            f"/attempts/{ref.attempt_number}/log"
        ),
    }


def attempt_logs_json(index: jobs_pb2.AttemptLogIndex) -> dict[str, Any]:
    return {"logs": [attempt_log_ref_json(ref) for ref in index.logs]}


def attempt_log_json(chunk: jobs_pb2.AttemptLogChunk) -> dict[str, Any]:
    return {
        **attempt_log_ref_json(chunk.ref),
        "text": chunk.text,
        "offset": chunk.offset,
        "next-offset": chunk.next_offset,
        "dropped-bytes": chunk.dropped_bytes,
        "first-offset": chunk.first_offset,
        "ended": chunk.ended,
    }
