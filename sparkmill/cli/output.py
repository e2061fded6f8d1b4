"""How the ``sparkmill`` command shows jobs: the JSON documents of ``--json`` (stable field
names for scripts), the human-readable text, and the live progress line of a job being waited
for.

State names come from :mod:`sparkmill.common.core.states` (Flink's spelling: ``FINISHED``, not
the wire enum's ``EXECUTION_FINISHED``); a number the enum does not know (unspecified, or from a
newer peer) is shown as ``UNKNOWN`` instead of failing the command.
"""

from __future__ import annotations

import shlex
import sys
import time
from typing import Any

from sparkmill.common.core.log_tail import split_log_tail
from sparkmill.common.core.states import (
    JobStatus,
    execution_state_name,
    job_status_name,
    job_status_of,
)
from sparkmill.common.v1 import common_pb2, jobs_pb2

# -- JSON ------------------------------------------------------------------------------------------


def service_json(info: common_pb2.ServiceInfo) -> dict[str, Any]:
    return {
        "role": info.role,
        "id": info.id,
        "address": info.address,
        "pid": info.pid,
        "hostname": info.hostname,
        "leader": info.is_leader,
        "metrics_url": info.metrics_url or None,
        "rest_url": info.rest_url or None,
        "spark_ui_url": info.spark_ui_url or None,
    }


def task_name(details: jobs_pb2.JobDetails, vertex_name: str, subtask_index: int) -> str:
    """``"agg (2/4)"``: the subtask numbered from 1 out of the parallelism, as the failure
    messages of the task executors and the JobMaster name it (and the dashboard)."""
    parallelism = next((v.parallelism for v in details.vertices if v.name == vertex_name), 0)
    return f"{vertex_name} ({subtask_index + 1}/{parallelism or '?'})"


def parallelism_text(vertex: jobs_pb2.VertexDetails) -> str:
    """``parallelism 4``; ``parallelism auto`` before the JobMaster decided it, and after
    ``parallelism 2, auto: 300.0 MiB input, 256.0 MiB per subtask``."""
    decision = vertex.parallelism_decision
    if not vertex.parallelism:  # e.g. "auto: decided when its inputs have finished (at most 8)"
        return f"parallelism {decision if decision.startswith('auto') else 'auto'}"
    return f"parallelism {vertex.parallelism}" + (f", {decision}" if decision else "")


def speculation_text(vertex: jobs_pb2.VertexDetails) -> str:
    """``; 2 speculative attempts (1 won, 1 running)``, or nothing without speculation."""
    if not vertex.speculative_attempts:
        return ""
    running = sum(vertex.subtask_speculative_running)
    return (
        f"; {vertex.speculative_attempts} speculative attempt"
        f"{'s' if vertex.speculative_attempts != 1 else ''} ({vertex.speculative_wins} won"
        + (f", {running} running" if running else "")
        + ")"
    )


def details_json(details: jobs_pb2.JobDetails) -> dict[str, Any]:
    return {
        "job_id": details.job_id,
        "name": details.name,
        "status": job_status_name(details.status),
        "pipeline_args": list(details.pipeline_args),
        "submitted_at": details.submitted_at,
        "ended_at": details.ended_at or None,
        "restarts": details.restarts,
        "recovered_subtasks": details.recovered_subtasks,
        "job_master": (
            service_json(details.job_master) if details.HasField("job_master") else None
        ),
        "vertices": [
            {
                "id": v.vertex_id,
                "name": v.name,
                "parallelism": v.parallelism or "auto",
                "parallelism_decision": v.parallelism_decision or None,
                "tasks": {execution_state_name(k): n for k, n in sorted(v.tasks_by_state.items())},
                "attempts": list(v.subtask_attempts),
                "task_executors": list(v.subtask_task_executors),
                "speculative_attempts": v.speculative_attempts,
                "speculative_wins": v.speculative_wins,
                "speculative_running": sum(v.subtask_speculative_running),
            }
            for v in details.vertices
        ],
        "blocked_task_executors": {b.resource_id: b.until for b in details.blocked_task_executors},
        "slot_wait_reason": details.slot_wait_reason or None,
        "failure": details.failure.message or None,
        "exceptions": [
            {
                "timestamp": e.timestamp,
                "task": task_name(details, e.vertex_name, e.subtask_index),
                "subtask_index": e.subtask_index,
                "attempt": e.attempt_number,
                "task_executor": e.task_executor,
                "exception": e.error.exception_type,
                "message": e.error.message,
            }
            for e in details.exceptions
        ],
    }


def result_json(result: jobs_pb2.JobResult, duration: float) -> dict[str, Any]:
    out = details_json(result.details)
    out.update(
        job_id=result.job_id,
        status=job_status_name(result.status),
        duration_s=round(duration, 3),
        failure=result.failure.message or None,
    )
    return out


# -- text ------------------------------------------------------------------------------------------


def print_result(result: jobs_pb2.JobResult, duration: float, pipeline: Any) -> None:
    """How the job ended, and the pipeline's own rendering of its result if it FINISHED."""
    print(
        f"job {result.job_id} {job_status_name(result.status)} in {duration:.1f}s"
        + (f" after {result.details.restarts} restarts" if result.details.restarts else "")
    )
    if result.failure.message:
        print(f"cause: {result.failure.message}")
    render = getattr(pipeline, "render_result", None)
    if render is not None and job_status_of(result.status) is JobStatus.FINISHED:
        print(render(result))


def print_details(details: jobs_pb2.JobDetails) -> None:
    print(
        f"job {details.job_id} ('{details.name}'): {job_status_name(details.status)}"
        + (f", {details.restarts} restarts" if details.restarts else "")
        + (
            f", {details.recovered_subtasks} finished subtasks taken over from an earlier JobMaster"
            if details.recovered_subtasks
            else ""
        )
    )
    if details.pipeline_args:
        print(f"  arguments: {shlex.join(details.pipeline_args)}")
    if details.HasField("job_master"):
        jm = details.job_master
        print(f"  JobMaster: process {jm.id[:8]} at {jm.address} on {jm.hostname} (pid {jm.pid})")
    for v in details.vertices:
        states = ", ".join(
            f"{n} {execution_state_name(s).lower()}"
            for s, n in sorted(v.tasks_by_state.items())
            if n
        )
        rerun = sum(1 for a in v.subtask_attempts if a > 0)
        again = f"; {rerun} ran again (max attempt #{max(v.subtask_attempts)})" if rerun else ""
        print(f"  {v.name} ({parallelism_text(v)}): {states}{again}{speculation_text(v)}")
    for blocked in details.blocked_task_executors:
        until = time.strftime("%H:%M:%S", time.localtime(blocked.until))
        print(f"  task executor {blocked.resource_id[:8]} blocked until {until} (a slow attempt)")
    if details.slot_wait_reason:
        print(details.slot_wait_reason)
    if details.failure.message:
        print(f"failure: {details.failure.message}")
    if details.exceptions:
        print("exceptions (oldest first):")
        for e in details.exceptions:
            stamp = time.strftime("%H:%M:%S", time.localtime(e.timestamp))
            print(
                f"  {stamp} {task_name(details, e.vertex_name, e.subtask_index)} "
                f"attempt #{e.attempt_number}"
                f" on {e.task_executor[:8] or '-'}: {e.error.exception_type or 'error'}: "
                f"{e.error.message.splitlines()[0] if e.error.message else ''}"
            )
            _, tail = split_log_tail(e.error.details)
            if tail:
                print("    last lines of the attempt's log (sparkmill jobs logs for all):")
                for line in tail:
                    print(f"      {line}")


class Progress:
    """A live one-line display of tasks by state (a plain log line per change when piped)."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._last = ""

    def __call__(self, details: jobs_pb2.JobDetails) -> None:
        totals: dict[str, int] = {}
        for vertex in details.vertices:
            for state, count in vertex.tasks_by_state.items():
                name = execution_state_name(state)
                totals[name] = totals.get(name, 0) + count
        total = sum(totals.values())
        parts = [f"{n} {s.lower()}" for s, n in sorted(totals.items()) if n]
        line = f"{job_status_name(details.status):<11} {total} tasks: " + ", ".join(parts)
        if details.restarts:
            line += f" (restarts: {details.restarts})"
        if details.slot_wait_reason:
            line += f"; {details.slot_wait_reason}"
        if line == self._last:
            return
        self._last = line
        if self._tty:
            sys.stderr.write("\r\x1b[2K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self._tty and self._last:
            sys.stderr.write("\n")


__all__ = [
    "Progress",
    "details_json",
    "print_details",
    "print_result",
    "result_json",
    "service_json",
    "task_name",
]
