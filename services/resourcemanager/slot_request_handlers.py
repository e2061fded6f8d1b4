"""The resource manager's slot methods of ``ResourceManagerGateway``: a JobMaster's declared
requirements (``DeclareRequiredResources``, Flink's declarative slot protocol) and the
per-request ``RequestSlot(s)`` / ``CancelSlotRequest(s)`` of JobMasters of older versions.

A mixin of :class:`~sparkmill.services.resourcemanager.resource_manager.ResourceManager`: it
reads the resource manager's registrations and slot bookkeeping, declared below, and runs on
its event loop like every other handler.
"""

from __future__ import annotations

from sparkmill.common.core.errors import (
    FailedPreconditionError,
    FencingMismatchError,
    IllegalStateBug,
    ResourceExhaustedError,
    RpcError,
)
from sparkmill.common.core.ids import AllocationID, JobID, ResourceID, short
from sparkmill.common.core.proto_convert import profile_from_proto, refusal_to_proto
from sparkmill.common.rpc.server import CallContext
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from sparkmill.services.resourcemanager.active_workers import ActiveWorkers
from sparkmill.services.resourcemanager.declaration import declaration_from_proto
from sparkmill.services.resourcemanager.declared_requirements import DeclaredRequirements
from sparkmill.services.resourcemanager.job_master_registration import JobMasterRegistration
from sparkmill.services.resourcemanager.slot_manager import SlotManager
from sparkmill.services.resourcemanager.slot_requests import SlotRequest, excluded_task_executors
from sparkmill.services.resourcemanager.task_executor_registration import (
    WorkerRegistration,
    no_slot_large_enough,
)


class SlotRequestHandlers:
    """Slot requests and declarations of JobMasters; see the module docstring."""

    job_masters: dict[JobID, JobMasterRegistration]
    task_executors: dict[ResourceID, WorkerRegistration]
    active_workers: ActiveWorkers | None
    requirements: DeclaredRequirements | None

    def _slots(self) -> SlotManager:
        raise NotImplementedError  # the resource manager's: refuses unless it leads

    async def request_slot(
        self, request: resource_manager_pb2.RequestSlotRequest, context: CallContext
    ) -> common_pb2.Empty:
        slots = self._slots()
        job_id = JobID(request.job_id)
        self._fenced_job_master(job_id, request.job_master_session_id)
        profile = profile_from_proto(request.resource_profile)
        registered = (record.registration for record in self.task_executors.values())
        unsatisfiable = no_slot_large_enough(job_id, profile, registered)
        if unsatisfiable:
            raise ResourceExhaustedError(unsatisfiable)
        slots.register_slot_request(
            SlotRequest(
                job_id=job_id,
                allocation_id=AllocationID(request.allocation_id),
                resource_profile=profile,
                job_master_address=request.job_master_address,
                timeout_s=request.timeout_ms / 1000 if request.timeout_ms else None,
                excluded=excluded_task_executors(request.excluded_task_executors),
            )
        )
        if self.active_workers is not None:
            self.active_workers.check_resource_needs()
        return common_pb2.Empty()

    async def declare_required_resources(
        self, request: resource_manager_pb2.DeclareRequiredResourcesRequest, context: CallContext
    ) -> resource_manager_pb2.DeclareRequiredResourcesResponse:
        return self._declare(request)

    def _declare(
        self, request: resource_manager_pb2.DeclareRequiredResourcesRequest
    ) -> resource_manager_pb2.DeclareRequiredResourcesResponse:
        """A declaration on its own or riding on the JobMaster's registration."""
        self._slots()  # refused unless leading; a leader has its declared requirements
        requirements = self.requirements
        if requirements is None:
            raise IllegalStateBug("a leading resource manager has no declared requirements")
        record = self._fenced_job_master(JobID(request.job_id), request.job_master_session_id)
        registered = [worker.registration for worker in self.task_executors.values()]
        declared, received, reply = declaration_from_proto(request, registered)
        requirements.declare(
            record.job_id,
            record.session_id,
            record.address,
            request.version,
            declared,
            received,
            request.timeout_ms / 1000 if request.timeout_ms else None,
        )
        if self.active_workers is not None:
            self.active_workers.check_resource_needs()
        return reply

    def _fenced_job_master(self, job_id: JobID, session_id: str) -> JobMasterRegistration:
        record = self.job_masters.get(job_id)
        if record is None:
            raise FailedPreconditionError(
                f"no JobMaster of job {short(job_id)} is registered (register first)"
            )
        if session_id != record.session_id:
            raise FencingMismatchError(
                f"JobMaster session {short(session_id)} is not the registered leader of job "
                f"{short(job_id)}"
            )
        return record

    async def cancel_slot_request(
        self, request: resource_manager_pb2.CancelSlotRequestRequest, context: CallContext
    ) -> common_pb2.Empty:
        self._slots().unregister_slot_request(AllocationID(request.allocation_id))
        return common_pb2.Empty()

    async def request_slots(
        self, request: resource_manager_pb2.RequestSlotsRequest, context: CallContext
    ) -> resource_manager_pb2.RequestSlotsResponse:
        self._slots()  # not leading: the whole batch is refused, as one request would be
        reply = resource_manager_pb2.RequestSlotsResponse()
        for one in request.requests:
            try:
                await self.request_slot(one, context)
            except RpcError as exc:
                reply.refused.add(allocation_id=one.allocation_id, error=refusal_to_proto(exc))
        return reply

    async def cancel_slot_requests(
        self, request: resource_manager_pb2.CancelSlotRequestsRequest, context: CallContext
    ) -> common_pb2.Empty:
        for allocation_id in request.allocation_ids:
            await self.cancel_slot_request(
                resource_manager_pb2.CancelSlotRequestRequest(allocation_id=allocation_id), context
            )
        return common_pb2.Empty()


__all__ = ["SlotRequestHandlers"]
