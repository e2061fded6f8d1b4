"""Unit tests: a task executor asked for a slot by a new JobMaster of a job it still holds
slots for (the old JobMaster was deposed before the task executor heard of it).

The old JobMaster's slots are void and freed; the new slot is allocated and offered to the new
JobMaster. Freeing the old ones after allocating the new one freed the new one as well: the
resource manager counted the request as served, the JobMaster never got an offer, and the job
waited for its slot request timeout.
"""

from __future__ import annotations

import asyncio

from sparkmill.common.core.ids import AllocationID, JobID
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.v1 import task_executor_pb2
from sparkmill.services.taskexecutor.job_connection import JobConnection
from sparkmill.services.taskexecutor.task_executor import TaskExecutor
from tests.unit.task_executor_harness import task_executor_with_slots

JOB = JobID("a" * 32)
OLD_SESSION, NEW_SESSION = "1" * 32, "2" * 32
OLD_JM, NEW_JM = "tcp://127.0.0.1:7", "tcp://127.0.0.1:8"


class OfferRecordingTaskExecutor(TaskExecutor):
    """Records what it would offer to a JobMaster instead of calling one."""

    offered: list[tuple[str, set[AllocationID]]]

    async def _offer_slots(self, connection: JobConnection) -> None:
        await asyncio.sleep(0)
        self.offered.append((connection.session_id, set(connection.pending_offers)))
        connection.pending_offers.clear()


def _request(allocation: str, session: str, address: str, index: int) -> object:
    return task_executor_pb2.TaskExecutorRequestSlotRequest(
        slot_index=index,
        job_id=JOB,
        allocation_id=allocation,
        job_master_address=address,
        resource_manager_id="rm",
        job_master_session_id=session,
    )


def test_a_new_job_masters_slot_request_frees_the_old_slots_and_keeps_the_new_one() -> None:
    async def main() -> None:
        clients = RpcClientPool("test")
        te = task_executor_with_slots(OfferRecordingTaskExecutor, 2, clients)
        te.offered = []
        old, new = AllocationID("b" * 32), AllocationID("c" * 32)
        try:
            await te.request_slot(_request(old, OLD_SESSION, OLD_JM, 0), None)  # type: ignore[arg-type]
            await asyncio.sleep(0.01)
            assert te.jobs[JOB].session_id == OLD_SESSION

            await te.request_slot(_request(new, NEW_SESSION, NEW_JM, 1), None)  # type: ignore[arg-type]
            await asyncio.sleep(0.01)

            assert te.slot_table is not None
            assert te.slot_table.slot_info(old) is None, "the deposed JobMaster's slot is void"
            assert te.slot_table.slot_info(new) is not None, "the new JobMaster's slot was freed"
            assert te.jobs[JOB].session_id == NEW_SESSION
            assert te.offered[-1] == (NEW_SESSION, {new})
        finally:
            await clients.close()

    asyncio.run(main())
