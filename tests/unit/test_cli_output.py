"""The CLI's rendering of jobs: state names as sparkmill.common.core.states spells them."""

from __future__ import annotations

import pytest

from sparkmill.cli.output import Progress, details_json
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.v1 import jobs_pb2


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
