"""Task deployments to each task executor, sent as one ``SubmitTasks`` per loop turn.

When a region starts, or a wave of tasks finishes and its slots are reused, the scheduler
deploys many attempts within one turn of the event loop, most of them to the same few task
executors. One ``SubmitTask`` round trip each made the RPC layer (and, with CurveZMQ, the
encryption of each message) the JobMaster's largest cost; grouped per task executor, a wave
costs one round trip per executor. Each caller still awaits its own attempt's outcome: the
reply lists the refused attempts with their errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from sparkmill.common.core.ids import ResourceID
from sparkmill.common.core.proto_convert import error_from_proto
from sparkmill.common.v1 import task_executor_pb2
from sparkmill.common.v1.gateways import TaskExecutorClient

# A batch stays well below rpc.max-message-size even when each task carries pipeline code.
MAX_TASKS_PER_BATCH = 256
MAX_BATCH_BYTES = 16 * 1024 * 1024

Spawn = Callable[[Coroutine[Any, Any, None], str], object]
_Entry = tuple[task_executor_pb2.SubmitTaskRequest, "asyncio.Future[None]"]


class TaskSubmissionBatcher:
    def __init__(self, *, spawn: Spawn, timeout_s: float) -> None:
        self._spawn = spawn
        self._timeout_s = timeout_s
        self._queues: dict[ResourceID, tuple[TaskExecutorClient, list[_Entry]]] = {}
        self._flush_scheduled = False
        self.rpcs_sent = 0

    def submit(
        self,
        resource_id: ResourceID,
        client: TaskExecutorClient,
        request: task_executor_pb2.SubmitTaskRequest,
    ) -> asyncio.Future[None]:
        """Queue ``request`` for ``resource_id``; the future ends with its own outcome."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        queued = self._queues.get(resource_id)
        if queued is None or queued[0] is not client:
            if queued is not None:  # the executor's connection changed: send what was queued
                self._send_all(queued)
            queued = self._queues[resource_id] = (client, [])
        queued[1].append((request, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._flush_scheduled = False
        queues, self._queues = list(self._queues.values()), {}
        for queued in queues:
            self._send_all(queued)

    def _send_all(self, queued: tuple[TaskExecutorClient, list[_Entry]]) -> None:
        client, entries = queued
        batch: list[_Entry] = []
        size = 0
        for entry in entries:
            entry_size = entry[0].ByteSize()
            if batch and (len(batch) >= MAX_TASKS_PER_BATCH or size + entry_size > MAX_BATCH_BYTES):
                self._spawn(self._send(client, batch), "submit-tasks")
                batch, size = [], 0
            batch.append(entry)
            size += entry_size
        if batch:
            self._spawn(self._send(client, batch), "submit-tasks")

    async def _send(self, client: TaskExecutorClient, batch: list[_Entry]) -> None:
        self.rpcs_sent += 1
        try:
            reply = await client.submit_tasks(
                task_executor_pb2.SubmitTasksRequest(tasks=[request for request, _ in batch]),
                timeout=self._timeout_s,
            )
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:  # each caller gets the failure of its deployment
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        refused = {r.attempt_id: r.error for r in reply.refused}
        for request, future in batch:
            if future.done():
                continue  # its caller stopped waiting
            error = refused.get(request.tdd.attempt_id)
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error_from_proto(error))
