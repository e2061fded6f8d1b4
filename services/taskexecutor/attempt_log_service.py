"""The task executor's attempt logs as a service: started with the process, swept on a timer,
served through ``TaskExecutorGateway.ListAttemptLogs`` / ``GetAttemptLog``.

The task executor itself only delegates to :func:`list_attempt_logs` and :func:`get_attempt_log`;
the capture lives in :mod:`.attempt_logs`.
"""

from __future__ import annotations

import asyncio
import logging

from sparkmill.common.core.errors import InvalidArgumentError, NotFoundError
from sparkmill.common.core.ids import short
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import jobs_pb2
from sparkmill.services.taskexecutor.attempt_logs import AttemptKey, AttemptLogStore, install

log = logging.getLogger(__name__)

SERVICE_KEY = "attempt-logs"
"""Key of the store in ``TaskContext.services`` / the task executor's task services."""
DEFAULT_READ_BYTES = 256 * 1024
MAX_READ_BYTES = 1024 * 1024
SWEEP_INTERVAL_S = 300.0


def start_attempt_logs(
    services: dict[str, object],
    settings: ClusterSettings,
    resource_id: str,
    runtime: ServiceRuntime,
) -> AttemptLogStore:
    """Create this process's store (one directory per task executor), capture into it, and
    remove expired jobs' logs now and then."""
    from pathlib import Path

    store = AttemptLogStore(
        Path(settings.task_log_dir) / resource_id,
        settings.task_log_max_bytes,
        settings.task_log_retention_s,
    )
    install(store)
    services[SERVICE_KEY] = store
    runtime.spawn(_sweep_periodically(store, runtime), "attempt-log-retention")
    runtime.spawn(_put_on_disk_periodically(store, runtime), "attempt-log-files")
    return store


async def _put_on_disk_periodically(store: AttemptLogStore, runtime: ServiceRuntime) -> None:
    """Give an attempt that has run ``defer_s`` its file, whether or not it logs again, and
    write the index lines of the short attempts that ended."""
    try:
        while True:
            await asyncio.sleep(store.defer_s / 2)
            if store.due_on_disk():  # the check does no I/O: a quiet cluster makes no thread hop
                await runtime.run_blocking(store.put_due_on_disk)
    finally:
        # The task executor stops: what ended is written (a few lines, once, on the way out).
        store.flush_index()


async def _sweep_periodically(store: AttemptLogStore, runtime: ServiceRuntime) -> None:
    while True:
        removed = await runtime.run_blocking(store.sweep)
        if removed:
            log.info("removed the attempt logs of %d expired job(s)", len(removed))
        await asyncio.sleep(min(SWEEP_INTERVAL_S, max(1.0, store.retention_s / 10)))


def _store(services: dict[str, object]) -> AttemptLogStore:
    store = services.get(SERVICE_KEY)
    if not isinstance(store, AttemptLogStore):
        raise NotFoundError("this task executor keeps no attempt logs")
    return store


def ref_of(key: AttemptKey, resource_id: str) -> jobs_pb2.AttemptLogRef:
    return jobs_pb2.AttemptLogRef(
        job_id=key.job_id,
        vertex_id=key.vertex_id,
        vertex_name=key.vertex_name,
        subtask_index=key.subtask_index,
        attempt_number=key.attempt_number,
        job_master_epoch=key.job_master_epoch,
        attempt_id=key.attempt_id,
        task_executor=resource_id,
    )


def list_attempt_logs(
    services: dict[str, object], resource_id: str, request: jobs_pb2.ListAttemptLogsRequest
) -> jobs_pb2.AttemptLogIndex:
    if not request.job_id:
        raise InvalidArgumentError("ListAttemptLogs names no job")
    keys = _store(services).attempts(request.job_id)
    return jobs_pb2.AttemptLogIndex(logs=[ref_of(k, resource_id) for k in keys])


def select_attempt(
    keys: list[AttemptKey], vertex: str, subtask: int, attempt: int
) -> AttemptKey | None:
    """The attempt a request names (by vertex id or name; attempt -1: the latest one)."""
    matching = [
        k
        for k in keys
        if vertex in (k.vertex_id, k.vertex_name)
        and k.subtask_index == subtask
        and (attempt < 0 or k.attempt_number == attempt)
    ]
    return max(matching, key=AttemptKey.order, default=None)


def get_attempt_log(
    services: dict[str, object], resource_id: str, request: jobs_pb2.GetAttemptLogRequest
) -> jobs_pb2.AttemptLogChunk:
    if not request.job_id or not request.vertex:
        raise InvalidArgumentError("GetAttemptLog needs a job and a vertex")
    store = _store(services)
    key = select_attempt(
        store.attempts(request.job_id),
        request.vertex,
        request.subtask_index,
        request.attempt_number,
    )
    if key is None:
        which = (
            "the latest attempt"
            if request.attempt_number < 0
            else (f"attempt #{request.attempt_number}")
        )
        raise NotFoundError(
            f"no log of {which} of {request.vertex} subtask {request.subtask_index} of job "
            f"{short(request.job_id)} on this task executor"
        )
    size = min(request.max_bytes or DEFAULT_READ_BYTES, MAX_READ_BYTES)
    chunk = store.read(key, request.offset, size)
    return jobs_pb2.AttemptLogChunk(
        ref=ref_of(key, resource_id),
        text=chunk.text,
        offset=chunk.offset,
        next_offset=chunk.next_offset,
        dropped_bytes=chunk.dropped_bytes,
        first_offset=chunk.first_offset,
        ended=chunk.ended,
    )
