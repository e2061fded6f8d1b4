"""The CLI's rendering of jobs: state names from the enums of sparkmill.common.core.states."""

from __future__ import annotations

import pytest

from sparkmill.cli.output import (
    UNKNOWN_STATE_NAME,
    Progress,
    details_json,
    state_name,
    status_name,
)
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.common.v1 import jobs_pb2


def test_names_are_the_enums_names_and_unknown_numbers_do_not_fail() -> None:
    assert [status_name(s.value) for s in JobStatus] == [s.name for s in JobStatus]
    assert [state_name(s.value) for s in ExecutionState] == [s.name for s in ExecutionState]
    assert state_name(ExecutionState.FINISHED.value) == "FINISHED"  # not EXECUTION_FINISHED
    assert status_name(0) == state_name(0) == UNKNOWN_STATE_NAME
    assert status_name(99) == UNKNOWN_STATE_NAME


def test_details_and_progress_name_tasks_by_state(capsys: pytest.CaptureFixture[str]) -> None:
    details = jobs_pb2.JobDetails(job_id="j", name="wordcount", status="RUNNING")
    vertex = details.vertices.add(vertex_id="v", name="read", parallelism=3)
    vertex.tasks_by_state[ExecutionState.RUNNING.value] = 2
    vertex.tasks_by_state[ExecutionState.FINISHED.value] = 1
    document = details_json(details)
    assert document["status"] == "RUNNING"
    assert document["vertices"][0]["tasks"] == {"RUNNING": 2, "FINISHED": 1}
    Progress()(details)
    assert "RUNNING     3 tasks: 1 finished, 2 running" in capsys.readouterr().err
