"""Unit tests: who may tell a job-master process that a task executor left a job.

A task executor's key speaks only for its own resource id (another host's key must not make a
JobMaster drop a healthy task executor); the resource manager reports any task executor it
lost, so that the JobMaster need not wait for its own heartbeat timeout.
"""

from __future__ import annotations

import asyncio

import pytest

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import PermissionDeniedError
from sparkmill.common.core.ids import JobID
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.server import CallContext
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.runtime.settings import settings_from_config
from sparkmill.common.v1 import envelope_pb2, job_master_pb2
from sparkmill.common.v1.gateways import JOBMASTERGATEWAY_METHODS
from sparkmill.services.jobmaster.service import JobMasterProcess
from tests.unit.job_master_process_harness import TestingHa

JOB = "0" * 31 + "1"


class RecordingJobMaster:
    """Stands in for the job's JobMaster: records the task executors it was told are lost."""

    def __init__(self) -> None:
        self.lost: list[str] = []

    def task_executor_lost(self, resource_id: str, cause: str) -> None:
        self.lost.append(resource_id)


def _disconnect(peers: list[str]) -> tuple[list[str], list[str]]:
    """Each peer in turn disconnects task executor h3-te-1 (bound to h3's key); what the
    JobMaster heard, and the refusals."""

    async def main() -> tuple[list[str], list[str]]:
        runtime = ServiceRuntime("jm-process-test")
        process = JobMasterProcess(
            settings_from_config(Configuration.from_mapping({})),
            Configuration.from_mapping({}),
            runtime,
            TestingHa(),  # type: ignore[arg-type]
            RpcClientPool("test"),
            ServiceIdentity("job-master", "jm-process-1", address="tcp://127.0.0.1:8"),
        )
        job_master = RecordingJobMaster()
        process.job_masters[JobID(JOB)] = job_master  # type: ignore[assignment]
        process.task_executor_keys.bind("h3-te-1", "task-executor:h3")
        refused: list[str] = []
        try:
            for peer in peers:
                context = CallContext(envelope_pb2.RequestHeader(), 0.0, 0.0, peer=peer)
                request = job_master_pb2.JobMasterDisconnectTaskExecutorRequest(
                    job_id=JOB, resource_id="h3-te-1", cause="test"
                )
                try:
                    await process.disconnect_task_executor(request, context)
                    job_master.lost.append(f"from {peer}")
                except PermissionDeniedError:
                    refused.append(peer)
        finally:
            await runtime.close()
        return job_master.lost, refused

    return asyncio.run(main())


def test_a_task_executor_disconnects_itself_and_no_other() -> None:
    lost, refused = _disconnect(["task-executor:h4", "task-executor:h3"])
    assert refused == ["task-executor:h4"]
    assert lost == ["h3-te-1", "from task-executor:h3"]


def test_the_resource_manager_reports_any_task_executor_it_lost() -> None:
    lost, refused = _disconnect(["resource-manager:h1"])
    assert (lost, refused) == (["h3-te-1", "from resource-manager:h1"], [])


@pytest.mark.parametrize("role", ["task-executor", "resource-manager"])
def test_both_roles_may_call_it(role: str) -> None:
    assert role in JOBMASTERGATEWAY_METHODS["DisconnectTaskExecutor"].callers
