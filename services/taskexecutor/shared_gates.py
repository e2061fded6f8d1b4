"""Offloaded input gates, fetched from each job's JobMaster once and cached per job.

A deployment may refer to a large input gate that many consumers share instead of carrying it
(see :mod:`sparkmill.common.deployment.descriptor`). Like Flink's TaskManager, which fetches an
offloaded shuffle descriptor from the blob server once and keeps it in its blob cache, the task
executor fetches each referenced gate once per (gate id, generation) - concurrent deployments that
need the same gate wait for the same fetch - parses it once, and hands every task the same
:class:`InputGateInfo`. The cache of a job is bounded (least recently used gates go first) and
dropped when the job leaves the executor.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

from sparkmill.common.core.errors import FailedPreconditionError, RpcError
from sparkmill.common.core.ids import JobID, short
from sparkmill.common.core.partitions import InputGateInfo
from sparkmill.common.deployment.descriptor import SharedGateKey, input_gate_from_proto
from sparkmill.common.v1 import task_executor_pb2

log = logging.getLogger(__name__)

# Partition entries a job's cache keeps (about 100 bytes each once parsed): far more than any
# one job's gates need at a time, small next to a task executor's memory.
MAX_CACHED_PARTITIONS_PER_JOB = 500_000

Fetch = Callable[[SharedGateKey], Awaitable[task_executor_pb2.InputGate]]
# A fetched gate, or why it could not be fetched (the deployments needing it are refused).
Resolved = dict[SharedGateKey, InputGateInfo | RpcError]


class _JobGates:
    def __init__(self, job_id: JobID) -> None:
        self.job_id = job_id
        self.gates: OrderedDict[SharedGateKey, InputGateInfo] = OrderedDict()
        self.partitions = 0
        self.fetching: dict[SharedGateKey, asyncio.Future[InputGateInfo]] = {}


class SharedGateCache:
    def __init__(self, max_partitions_per_job: int = MAX_CACHED_PARTITIONS_PER_JOB) -> None:
        self._max_partitions = max_partitions_per_job
        self._jobs: dict[JobID, _JobGates] = {}
        self.fetches = 0

    async def resolve(self, job_id: JobID, keys: Iterable[SharedGateKey], fetch: Fetch) -> Resolved:
        """Each gate of ``keys``, from the cache or fetched with ``fetch`` (once per gate,
        however many deployments wait for it)."""
        job = self._jobs.get(job_id) or self._jobs.setdefault(job_id, _JobGates(job_id))
        resolved: Resolved = {}
        waiting: dict[SharedGateKey, asyncio.Future[InputGateInfo]] = {}
        for key in dict.fromkeys(keys):
            gate = job.gates.get(key)
            if gate is not None:
                job.gates.move_to_end(key)
                resolved[key] = gate
            else:
                waiting[key] = job.fetching.get(key) or self._start_fetch(job, key, fetch)
        for key, future in waiting.items():
            try:
                resolved[key] = await asyncio.shield(future)
            except RpcError as exc:
                resolved[key] = exc
            except asyncio.CancelledError:
                if not future.cancelled():
                    raise  # this call itself was cancelled
                resolved[key] = FailedPreconditionError(
                    "the job left this task executor while its input gate was being fetched"
                )
        return resolved

    def _start_fetch(
        self, job: _JobGates, key: SharedGateKey, fetch: Fetch
    ) -> asyncio.Future[InputGateInfo]:
        future = asyncio.ensure_future(self._fetch(job, key, fetch))
        job.fetching[key] = future
        return future

    async def _fetch(self, job: _JobGates, key: SharedGateKey, fetch: Fetch) -> InputGateInfo:
        self.fetches += 1
        try:
            gate = input_gate_from_proto(await fetch(key))
        finally:
            job.fetching.pop(key, None)
        log.info(
            "fetched offloaded input gate %s (generation %d, %d partitions) of job %s",
            short(key[0]),
            key[1],
            len(gate.partitions),
            short(job.job_id),
        )
        # A job dropped meanwhile keeps nothing: `job` is no longer reachable from the cache.
        job.gates[key] = gate
        job.partitions += len(gate.partitions)
        while job.partitions > self._max_partitions and len(job.gates) > 1:
            _, evicted = job.gates.popitem(last=False)
            job.partitions -= len(evicted.partitions)
        return gate

    def drop_job(self, job_id: JobID) -> None:
        """The job left this task executor: its gates are of no further use."""
        job = self._jobs.pop(job_id, None)
        if job is not None:
            for future in job.fetching.values():
                future.cancel()

    def cached(self, job_id: JobID) -> list[SharedGateKey]:
        job = self._jobs.get(job_id)
        return [] if job is None else list(job.gates)
