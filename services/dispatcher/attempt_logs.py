"""Attempt logs as the dispatcher serves them: asked of the task executors that keep them.

Each task executor keeps the logs of the attempts it ran
(:mod:`sparkmill.services.taskexecutor.attempt_logs`) and serves them through
``TaskExecutorGateway.ListAttemptLogs`` / ``GetAttemptLog``. The dispatcher finds the task
executors through the resource manager (``GetClusterStatus`` lists each with its address), asks
them all for a job's attempts (a few task executors: one call each, concurrently, bounded by a
short deadline) and reads an attempt's log from the one that has it. A task executor that does
not answer simply contributes nothing: the others' logs are still served.
"""

from __future__ import annotations

import asyncio
import logging

from sparkmill.common.core.errors import NotFoundError, RpcError, UnavailableError
from sparkmill.common.core.ids import short
from sparkmill.common.ha.leader import LeaderRetrievalService
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.v1 import jobs_pb2, resource_manager_pb2
from sparkmill.common.v1.gateways import ResourceManagerClient, TaskExecutorClient

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 3.0


def select_ref(
    refs: list[jobs_pb2.AttemptLogRef], vertex: str, subtask: int, attempt: int
) -> jobs_pb2.AttemptLogRef | None:
    """The attempt a request names among ``refs`` (vertex id or name; attempt -1: the latest)."""
    matching = [
        r
        for r in refs
        if vertex in (r.vertex_id, r.vertex_name)
        and r.subtask_index == subtask
        and (attempt < 0 or r.attempt_number == attempt)
    ]
    return max(matching, key=lambda r: (r.job_master_epoch, r.attempt_number), default=None)


class TaskExecutorLogs:
    def __init__(self, clients: RpcClientPool, rm_retrieval: LeaderRetrievalService) -> None:
        self._clients = clients
        self._rm_retrieval = rm_retrieval

    async def start(self) -> None:
        await self._rm_retrieval.start(_ignore)

    async def stop(self) -> None:
        await self._rm_retrieval.stop()

    async def task_executors(self) -> dict[str, str]:
        """resource id -> RPC address of every task executor registered now."""
        leader = self._rm_retrieval.current()
        if leader is None:
            raise UnavailableError("no resource manager leads now: task executors unknown")
        status = await ResourceManagerClient(self._clients.get(leader.address)).get_cluster_status(
            resource_manager_pb2.GetClusterStatusRequest(),
            timeout=CALL_TIMEOUT_S,
            fencing_token=leader.session_id,
        )
        return {te.resource_id: te.address for te in status.task_executors if te.address}

    async def index(self, job_id: str) -> jobs_pb2.AttemptLogIndex:
        """Every attempt of ``job_id`` with a log on a task executor that answered."""
        executors = await self.task_executors()

        async def ask(address: str) -> list[jobs_pb2.AttemptLogRef]:
            client = TaskExecutorClient(self._clients.get(address))
            try:
                found = await client.list_attempt_logs(
                    jobs_pb2.ListAttemptLogsRequest(job_id=job_id), timeout=CALL_TIMEOUT_S
                )
            except RpcError as exc:
                log.debug("attempt logs of %s on %s unavailable: %s", short(job_id), address, exc)
                return []
            return list(found.logs)

        found = await asyncio.gather(*(ask(a) for a in executors.values()))
        refs = [r for refs in found for r in refs]
        refs.sort(
            key=lambda r: (r.vertex_name, r.subtask_index, r.job_master_epoch, r.attempt_number)
        )
        return jobs_pb2.AttemptLogIndex(logs=refs)

    async def read(self, request: jobs_pb2.GetAttemptLogRequest) -> jobs_pb2.AttemptLogChunk:
        index = await self.index(request.job_id)
        ref = select_ref(
            list(index.logs), request.vertex, request.subtask_index, request.attempt_number
        )
        if ref is None:
            which = (
                "the latest attempt"
                if request.attempt_number < 0
                else f"attempt #{request.attempt_number}"
            )
            raise NotFoundError(
                f"no task executor has a log of {which} of {request.vertex} subtask "
                f"{request.subtask_index} of job {short(request.job_id)} (logs go with their "
                "task executor, and are kept for taskmanager.log.attempt.retention)"
            )
        address = (await self.task_executors()).get(ref.task_executor, "")
        exact = jobs_pb2.GetAttemptLogRequest()
        exact.CopyFrom(request)
        exact.vertex = ref.vertex_id
        exact.attempt_number = ref.attempt_number
        return await TaskExecutorClient(self._clients.get(address)).get_attempt_log(
            exact, timeout=CALL_TIMEOUT_S
        )


def _ignore(info: object) -> None:
    """Retrieval listener: ``current()`` is read when needed."""


__all__ = ["TaskExecutorLogs", "select_ref"]
