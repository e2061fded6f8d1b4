"""Unit tests: a task executor keeps its connection to a job while it holds the job's results.

Flink's TaskExecutor closes a job's JobMaster connection only once it has neither slots nor
tracked result partitions of the job. Dropping it with the last slot made the JobMaster's next
heartbeat answer "no connection to job": the JobMaster declared the executor lost and, with
``exchange.storage: local``, ran its finished producers again although their results were there.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sparkmill.common.core.errors import NotFoundError
from sparkmill.common.core.ids import AllocationID, ExecutionAttemptID, JobID
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.server import MethodSpec
from sparkmill.common.v1 import common_pb2, job_master_pb2, task_executor_pb2
from sparkmill.common.v1.gateways import TASKEXECUTORGATEWAY_METHODS
from sparkmill.services.taskexecutor.job_connection import JobConnection
from sparkmill.services.taskexecutor.task_executor import TaskExecutor
from tests.unit.task_executor_harness import task_executor_with_slots

JOB = JobID("a" * 32)
SESSION = "1" * 32
JM = "tcp://127.0.0.1:7"
ALLOCATION = AllocationID("b" * 32)
ATTEMPT = "c" * 32


class AcknowledgingJobMaster:
    """Takes every batch of state updates (the real JobMaster's answer when all is well)."""

    def __init__(self) -> None:
        self.updates: list[job_master_pb2.TaskExecutionState] = []

    async def update_task_execution_state(
        self, request: job_master_pb2.UpdateTaskExecutionStateRequest, **_: object
    ) -> common_pb2.Empty:
        self.updates.extend(request.updates)
        return common_pb2.Empty()


class NoOfferTaskExecutor(TaskExecutor):
    async def _offer_slots(self, connection: JobConnection) -> None:
        connection.pending_offers.clear()


@dataclass
class _Context:
    produced_dataset_ids: list[str] = field(default_factory=list)


@dataclass
class FinishedTask:
    """What the task executor reads of a task whose state changes (a real Task's fields)."""

    produced: list[str]
    tdd: task_executor_pb2.TaskDeploymentDescriptor = field(
        default_factory=lambda: task_executor_pb2.TaskDeploymentDescriptor(
            job_id=JOB, attempt_id=ATTEMPT, allocation_id=ALLOCATION
        )
    )

    def __post_init__(self) -> None:
        self.context = _Context(list(self.produced))

    @property
    def attempt_id(self) -> ExecutionAttemptID:
        return ExecutionAttemptID(ATTEMPT)

    @property
    def job_id(self) -> JobID:
        return JOB


def _heartbeat_spec() -> MethodSpec:
    return TASKEXECUTORGATEWAY_METHODS["HeartbeatFromJobMaster"]


async def _task_executor(
    clients: RpcClientPool,
) -> tuple[NoOfferTaskExecutor, AcknowledgingJobMaster]:
    te = task_executor_with_slots(NoOfferTaskExecutor, 1, clients)
    await te.request_slot(
        task_executor_pb2.TaskExecutorRequestSlotRequest(
            slot_index=0,
            job_id=JOB,
            allocation_id=ALLOCATION,
            job_master_address=JM,
            resource_manager_id="rm",
            job_master_session_id=SESSION,
        ),
        None,  # type: ignore[arg-type]
    )
    job_master = AcknowledgingJobMaster()
    te.jobs[JOB].client = job_master  # type: ignore[assignment]
    return te, job_master


async def _finish_and_free(te: TaskExecutor, produced: list[str]) -> None:
    task = FinishedTask(produced)
    te._on_task_state(task, ExecutionState.FINISHED, None, None)  # type: ignore[arg-type]
    await asyncio.sleep(0.05)  # the update goes out and is acknowledged
    te._free_slot(ALLOCATION, "the JobMaster freed the slot")
    await asyncio.sleep(0.01)


def _heartbeat_answered(te: TaskExecutor) -> bool:
    request = task_executor_pb2.TaskExecutorJobHeartbeatRequest(job_id=JOB, sender_id="jm")
    try:
        return te.expected_fencing_token(_heartbeat_spec(), request) == SESSION
    except NotFoundError:
        return False


def test_a_task_executor_holding_results_of_a_job_keeps_its_connection_without_slots() -> None:
    async def main() -> None:
        clients = RpcClientPool("test")
        try:
            te, job_master = await _task_executor(clients)
            await _finish_and_free(te, produced=["d" * 32])
            assert [u.attempt_id for u in job_master.updates] == [ATTEMPT]
            assert te.slot_table is not None and not te.slot_table.allocation_ids_of_job(JOB)
            # The JobMaster's heartbeats are still answered: the results are not written off.
            assert JOB in te.jobs
            assert _heartbeat_answered(te)
            report = await te.heartbeat_from_job_master(
                task_executor_pb2.TaskExecutorJobHeartbeatRequest(job_id=JOB, sender_id="jm"),
                None,  # type: ignore[arg-type]
            )
            assert list(report.hosted_attempt_ids) == []  # finished and acknowledged
            # The JobMaster lets it go when the job ends.
            await te.disconnect_job_master(
                task_executor_pb2.DisconnectJobMasterFromTaskExecutorRequest(
                    job_id=JOB, cause="the job ended FINISHED"
                ),
                None,  # type: ignore[arg-type]
            )
            assert JOB not in te.jobs
            assert not _heartbeat_answered(te)
        finally:
            await clients.close()

    asyncio.run(main())


def test_a_task_executor_without_results_of_a_job_drops_it_with_its_last_slot() -> None:
    async def main() -> None:
        clients = RpcClientPool("test")
        try:
            te, job_master = await _task_executor(clients)
            await _finish_and_free(te, produced=[])  # a sink: nothing for others to read here
            assert [u.attempt_id for u in job_master.updates] == [ATTEMPT]
            assert JOB not in te.jobs
            assert not _heartbeat_answered(te)
        finally:
            await clients.close()

    asyncio.run(main())
