"""SharedGateCache: each offloaded gate fetched once per job, bounded, dropped with the job."""

from __future__ import annotations

import asyncio

from sparkmill.common.core.errors import FailedPreconditionError, NotFoundError, UnavailableError
from sparkmill.common.core.ids import JobID, SharedGateID
from sparkmill.common.deployment.descriptor import SharedGateKey
from sparkmill.common.v1 import common_pb2, task_executor_pb2
from sparkmill.services.taskexecutor.shared_gates import SharedGateCache

JOB = JobID("1" * 32)
GATE = SharedGateID("a" * 32)
OTHER = SharedGateID("b" * 32)


class TestingJobMaster:
    """Serves gates of ``partitions`` entries; counts fetches; can fail or hold them."""

    __test__ = False

    def __init__(self, partitions: int = 3) -> None:
        self.partitions = partitions
        self.fetched: list[SharedGateKey] = []
        self.failures: list[Exception] = []
        self.release = asyncio.Event()
        self.release.set()

    async def fetch(self, key: SharedGateKey) -> task_executor_pb2.InputGate:
        self.fetched.append(key)
        await self.release.wait()
        if self.failures:
            raise self.failures.pop(0)
        gate = task_executor_pb2.InputGate(
            dataset_id="ds", pattern=common_pb2.ALL_TO_ALL, producer_parallelism=self.partitions
        )
        for n in range(self.partitions):
            gate.partitions.add(
                dataset_id="ds",
                partition_number=n,
                producer_attempt_id=f"{key[1]:032x}",
                producer_resource_id="te",
            )
        return gate


def test_deployments_waiting_for_the_same_gate_share_one_fetch() -> None:
    async def main() -> None:
        cache, jm = SharedGateCache(), TestingJobMaster()
        jm.release.clear()
        waiting = [asyncio.create_task(cache.resolve(JOB, [(GATE, 0)], jm.fetch)) for _ in range(5)]
        await asyncio.sleep(0)
        jm.release.set()
        results = await asyncio.gather(*waiting)
        assert jm.fetched == [(GATE, 0)]
        gates = {id(r[(GATE, 0)]) for r in results}
        assert len(gates) == 1  # one parsed gate, shared by every task
        again = await cache.resolve(JOB, [(GATE, 0), (GATE, 0)], jm.fetch)
        assert jm.fetched == [(GATE, 0)]  # cached
        assert id(again[(GATE, 0)]) in gates
        # A new generation names other producer attempts: fetched anew.
        newer = await cache.resolve(JOB, [(GATE, 1)], jm.fetch)
        gate = newer[(GATE, 1)]
        assert not isinstance(gate, Exception)
        assert gate.partitions[0].producer_attempt_id == f"{1:032x}"
        assert jm.fetched == [(GATE, 0), (GATE, 1)]

    asyncio.run(main())


def test_a_failed_fetch_is_reported_per_gate_and_tried_again_next_time() -> None:
    async def main() -> None:
        cache, jm = SharedGateCache(), TestingJobMaster()
        jm.failures = [FailedPreconditionError("stale"), UnavailableError("down")]
        first = await cache.resolve(JOB, [(GATE, 0), (OTHER, 0)], jm.fetch)
        assert isinstance(first[(GATE, 0)], FailedPreconditionError)
        assert isinstance(first[(OTHER, 0)], UnavailableError)
        second = await cache.resolve(JOB, [(GATE, 0)], jm.fetch)
        assert not isinstance(second[(GATE, 0)], Exception)
        assert jm.fetched.count((GATE, 0)) == 2

    asyncio.run(main())


def test_the_least_recently_used_gates_go_when_the_job_cache_is_full() -> None:
    async def main() -> None:
        cache, jm = SharedGateCache(max_partitions_per_job=10), TestingJobMaster(partitions=4)
        await cache.resolve(JOB, [(GATE, 0)], jm.fetch)
        await cache.resolve(JOB, [(OTHER, 0)], jm.fetch)
        await cache.resolve(JOB, [(GATE, 0)], jm.fetch)  # used again: OTHER is older now
        await cache.resolve(JOB, [(GATE, 1)], jm.fetch)  # 12 > 10 partitions
        assert cache.cached(JOB) == [(GATE, 0), (GATE, 1)]
        # A single gate larger than the bound is still kept: its tasks need it.
        big = SharedGateCache(max_partitions_per_job=2)
        await big.resolve(JOB, [(GATE, 0)], jm.fetch)
        assert big.cached(JOB) == [(GATE, 0)]

    asyncio.run(main())


def test_a_job_that_leaves_takes_its_gates_and_fetches_with_it() -> None:
    async def main() -> None:
        cache, jm = SharedGateCache(), TestingJobMaster()
        other_job = JobID("2" * 32)
        await cache.resolve(JOB, [(GATE, 0)], jm.fetch)
        await cache.resolve(other_job, [(GATE, 0)], jm.fetch)
        jm.release.clear()
        pending = asyncio.create_task(cache.resolve(JOB, [(OTHER, 0)], jm.fetch))
        await asyncio.sleep(0)
        cache.drop_job(JOB)
        result = await pending
        assert isinstance(result[(OTHER, 0)], FailedPreconditionError)
        assert cache.cached(JOB) == []
        assert cache.cached(other_job) == [(GATE, 0)]  # another job's gates stay

    asyncio.run(main())


def test_an_unknown_gate_is_a_typed_refusal_not_a_crash() -> None:
    async def main() -> None:
        cache, jm = SharedGateCache(), TestingJobMaster()
        jm.failures = [NotFoundError("no offloaded input gate")]
        result = await cache.resolve(JOB, [(GATE, 0)], jm.fetch)
        assert isinstance(result[(GATE, 0)], NotFoundError)
        assert cache.cached(JOB) == []

    asyncio.run(main())
