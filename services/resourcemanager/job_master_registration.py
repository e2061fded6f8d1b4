"""A JobMaster registered at the resource manager (Flink's ``JobManagerRegistration``), and
what the resource manager tells it.

A JobMaster registers for its job under its leader session; every call to it is fenced with
that session, so a JobMaster that lost its job's leadership cannot act on the news. The
resource manager tells a JobMaster at once when a task executor holding its slots is lost or
when one of its slot requests failed for good, instead of letting it wait for its own heartbeat
or request timeout.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sparkmill.common.core.errors import RpcError
from sparkmill.common.core.ids import AllocationID, JobID, ResourceID, short
from sparkmill.common.core.proto_convert import error_to_proto
from sparkmill.common.v1 import job_master_pb2
from sparkmill.common.v1.gateways import JobMasterClient

log = logging.getLogger(__name__)


@dataclass
class JobMasterRegistration:
    job_id: JobID
    address: str
    session_id: str
    client: JobMasterClient

    async def tell_task_executor_lost(self, resource_id: ResourceID, cause: str) -> None:
        """The task executor ``resource_id`` (which held slots of this job) is gone."""
        try:
            await self.client.disconnect_task_executor(
                job_master_pb2.JobMasterDisconnectTaskExecutorRequest(
                    job_id=self.job_id, resource_id=resource_id, cause=cause
                ),
                fencing_token=self.session_id,
            )
        except RpcError as exc:
            log.info(
                "could not tell the JobMaster of %s about %s: %s",
                short(self.job_id),
                short(resource_id),
                exc,
            )

    async def tell_allocation_failed(self, allocation_id: AllocationID, cause: RpcError) -> None:
        """The slot request ``allocation_id`` failed for good with ``cause``."""
        try:
            await self.client.notify_slot_allocation_failure(
                job_master_pb2.NotifySlotAllocationFailureRequest(
                    job_id=self.job_id, allocation_id=allocation_id, error=error_to_proto(cause)
                ),
                fencing_token=self.session_id,
            )
        except RpcError as exc:
            log.info(
                "could not report failed allocation %s to job %s: %s",
                short(allocation_id),
                short(self.job_id),
                exc,
            )


__all__ = ["JobMasterRegistration"]
