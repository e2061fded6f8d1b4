"""Unit test: heartbeat reconciliation never cancels an attempt that finished.

A task executor lists an ended attempt as hosted until the JobMaster has acknowledged its final
state. When the FINISHED report has reached the JobMaster but the answer has not reached the task
executor yet, the next heartbeat still lists it: the JobMaster took it for an attempt it "does
not count" and told the executor to cancel a finished ``write_parquet``. Only attempts that may
still run are cancelled.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sparkmill.common.core.ids import ExecutionAttemptID, ResourceID
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.v1 import common_pb2, task_executor_pb2
from sparkmill.services.jobmaster.peer_calls import TaskExecutorConnection
from tests.unit.test_job_master import TestingJobMasterHost, _job_master, _run, _settle

ES = ExecutionState
TE = ResourceID("e" * 32)
UNKNOWN = ExecutionAttemptID("f" * 32)


class RecordingTaskExecutor:
    """The task executor's gateway as the JobMaster calls it: records cancellations."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    async def cancel_task(
        self, request: task_executor_pb2.CancelTaskRequest, **_: Any
    ) -> common_pb2.Empty:
        self.cancelled.append(request.attempt_id)
        return common_pb2.Empty()


def test_a_finished_attempt_still_listed_by_its_task_executor_is_not_cancelled() -> None:
    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master(TestingJobMasterHost(), runtime)
        await jm.build_graph()  # the graph only; no leadership, nothing scheduled
        vertex = next(iter(jm.graph.all_execution_vertices()))
        execution = vertex.current_execution
        for state in (ES.SCHEDULED, ES.DEPLOYING, ES.INITIALIZING, ES.RUNNING, ES.FINISHED):
            execution.transition_to(state)
        execution.task_executor_id = TE
        gateway = RecordingTaskExecutor()
        te = TaskExecutorConnection(TE, "tcp://te:1", gateway)  # type: ignore[arg-type]
        report = task_executor_pb2.AllocatedSlotReport(
            resource_id=TE, hosted_attempt_ids=[execution.attempt_id, UNKNOWN]
        )
        jm._reconcile(te, report, asyncio.get_running_loop().time())
        await _settle()
        # The attempt nobody counts is cancelled; the finished one is left alone.
        assert gateway.cancelled == [UNKNOWN]
        assert execution.state is ES.FINISHED

    _run(scenario)
