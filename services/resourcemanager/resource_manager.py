"""The resource manager service: the cluster's slot broker (Flink's ``ResourceManager``).

It serves :class:`ResourceManagerGateway` while it leads. Task executors register (with
retries) and report their slots; JobMasters register and request slots. The bookkeeping is the
:class:`~sparkmill.services.resourcemanager.slot_manager.SlotManager`; this class is its I/O: it
asks task executors for slots (``TaskExecutor.RequestSlot``), tells JobMasters when a request
failed, and runs heartbeats to every task executor and JobMaster. A heartbeat reply carries the task
executor's slot report, from which the SlotManager reconciles its view; a heartbeat to a JobMaster
says why its job's slot requests wait, if they do (:mod:`.slot_wait`).

A task executor's registration is decoded once, when it arrives, into a
:class:`~sparkmill.services.resourcemanager.task_executor_registration.TaskExecutorRegistration`
that every later use reads (a bad profile is refused at registration).

All state is owned by the service's event loop; RPC results come back to it as coroutines.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from sparkmill.common.core.errors import (
    FailedPreconditionError,
    FencingMismatchError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    RpcError,
)
from sparkmill.common.core.ids import (
    AllocationID,
    InstanceID,
    JobID,
    ResourceID,
    new_instance_id,
    short,
)
from sparkmill.common.core.proto_convert import (
    profile_to_proto,
    slot_report_from_proto,
)
from sparkmill.common.core.slots import SlotID
from sparkmill.common.ha.job_leaders import JobLeaderRetrievalFactory, JobLeaderTracker
from sparkmill.common.ha.leader import LeaderElectionService, LeaderInfo
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.server import CallContext, MethodSpec
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.heartbeat import HeartbeatManager, TimeoutListener
from sparkmill.common.runtime.service_base import (
    ServiceIdentity,
    http_url,
    leader_session,
    require_leader,
)
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.runtime.timers import AsyncioTimerService
from sparkmill.common.v1 import common_pb2, job_master_pb2, resource_manager_pb2, task_executor_pb2
from sparkmill.common.v1.gateways import (
    JobMasterClient,
    ResourceManagerServicer,
    TaskExecutorClient,
)
from sparkmill.services.resourcemanager.active_workers import ActiveWorkers, ActiveWorkerSettings
from sparkmill.services.resourcemanager.cluster_status import cluster_status
from sparkmill.services.resourcemanager.declaration import declaration_from_proto
from sparkmill.services.resourcemanager.declared_requirements import DeclaredRequirements
from sparkmill.services.resourcemanager.job_master_registration import JobMasterRegistration
from sparkmill.services.resourcemanager.slot_manager import SlotManager, SlotRequest
from sparkmill.services.resourcemanager.slot_request_handlers import SlotRequestHandlers
from sparkmill.services.resourcemanager.slot_requests import (
    START_MORE_TASK_EXECUTORS,
)
from sparkmill.services.resourcemanager.slot_wait import slot_wait_reason
from sparkmill.services.resourcemanager.task_executor_registration import (
    TaskExecutorRegistration,
    WorkerRegistration,
    check_owner,
)
from sparkmill.services.resourcemanager.worker_driver import WorkerDriver

log = logging.getLogger(__name__)


class ResourceManager(SlotRequestHandlers, ResourceManagerServicer):
    def __init__(
        self,
        settings: ClusterSettings,
        runtime: ServiceRuntime,
        election: LeaderElectionService,
        clients: RpcClientPool,
        identity: ServiceIdentity,
        job_leader_retrieval: JobLeaderRetrievalFactory | None = None,
        worker_driver: WorkerDriver | None = None,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.election = election
        # Checks that a registering JobMaster leads its job (Flink's JobLeaderIdService).
        self.job_leaders = JobLeaderTracker(job_leader_retrieval, self._on_job_leader_change)
        self.clients = clients
        self.identity = identity
        self.session_id: str | None = None
        self.task_executors: dict[ResourceID, WorkerRegistration] = {}
        self._by_instance: dict[InstanceID, ResourceID] = {}
        self.job_masters: dict[JobID, JobMasterRegistration] = {}
        self.slot_manager: SlotManager | None = None
        self.requirements: DeclaredRequirements | None = None
        self._timers: AsyncioTimerService | None = None
        self.te_heartbeats = self._heartbeats("rm->te", self._on_task_executor_timeout)
        self.jm_heartbeats = self._heartbeats("rm->jm", self._on_job_master_timeout)
        self.slot_request_served: Callable[[float], None] | None = None  # set by the metrics
        # With an active driver (resourcemanager.driver), the leader starts and stops task
        # executors itself (Flink's ActiveResourceManager); None: it only uses those it is given.
        self.worker_driver = worker_driver
        self.active_workers: ActiveWorkers | None = None

    def _heartbeats(self, name: str, on_timeout: TimeoutListener) -> HeartbeatManager:
        return HeartbeatManager(
            name,
            interval_s=self.settings.heartbeat_interval_s,
            timeout_s=self.settings.heartbeat_timeout_s,
            rpc_failure_threshold=self.settings.heartbeat_rpc_failure_threshold,
            on_timeout=on_timeout,
        )

    # -- lifecycle and leadership ----------------------------------------------------------------

    async def start(self) -> None:
        self._timers = AsyncioTimerService()
        self.te_heartbeats.start()
        self.jm_heartbeats.start()
        await self.election.start(self)

    async def stop(self) -> None:
        await self._close_active_workers()
        await self.election.stop()
        await self.job_leaders.close()
        await self.te_heartbeats.stop()
        await self.jm_heartbeats.stop()
        if self._timers is not None:
            self._timers.cancel_all()

    async def grant_leadership(self, session_id: str) -> None:
        assert self._timers is not None
        self.slot_manager = SlotManager(
            self._timers,
            self,
            slot_request_timeout_s=self.settings.slot_request_timeout_s,
            task_manager_idle_timeout_s=self.settings.task_manager_idle_timeout_s,
            spread_out=self.settings.evenly_spread_out_slots,
            allocation_timeout_s=self.settings.rpc_timeout_s,
            on_request_served=self.slot_request_served,
        )
        loop = asyncio.get_running_loop()
        self.requirements = DeclaredRequirements(
            self.slot_manager, loop.call_soon, self._timers.now
        )
        self.session_id = session_id
        if self.worker_driver is not None:
            self.active_workers = ActiveWorkers(
                self.worker_driver, self._timers, self, ActiveWorkerSettings.of(self.settings)
            )
            self.active_workers.start()
        log.info(
            "resource manager %s leads with session %s", short(self.identity.id), short(session_id)
        )
        await self.election.confirm_leadership(session_id, self.identity.address)

    async def revoke_leadership(self) -> None:
        log.warning("resource manager %s lost leadership", short(self.identity.id))
        self.session_id = None
        # The workers keep running for the next leader to adopt; only their accounting goes
        # (in the background: the driver may have to wait, and the rest of the state goes now).
        workers, self.active_workers = self.active_workers, None
        if workers is not None:
            self.runtime.spawn(workers.close(), "close-workers")
        if self.slot_manager is not None:
            self.slot_manager.suspend()
        self.slot_manager = self.requirements = None
        for resource_id in list(self.task_executors):
            self._close_task_executor(
                resource_id, "the resource manager lost leadership", notify=False
            )
        for job_id in list(self.job_masters):
            self._close_job_master(job_id, "the resource manager lost leadership")

    def expected_fencing_token(self, spec: MethodSpec, request: object) -> str:
        return require_leader(self.session_id, "resource manager")

    async def _close_active_workers(self) -> None:
        workers, self.active_workers = self.active_workers, None
        if workers is not None:
            await workers.close()

    def _slots(self) -> SlotManager:
        if self.slot_manager is None:
            require_leader(None, "resource manager")
        assert self.slot_manager is not None
        return self.slot_manager

    # -- task executors --------------------------------------------------------------------------

    async def register_task_executor(
        self, request: resource_manager_pb2.RegisterTaskExecutorRequest, context: CallContext
    ) -> resource_manager_pb2.RegisterTaskExecutorResponse:
        self._slots()
        # Decoded once: a bad profile is refused now, and later uses read the typed record.
        registration = TaskExecutorRegistration.from_proto(request)
        resource_id = registration.resource_id
        previous = self.task_executors.get(resource_id)
        if previous is not None and previous.peer != context.peer:
            # Only the key that registered a resource id may replace its registration: another
            # task executor's key cannot evict it (and take over its slots' tasks).
            raise PermissionDeniedError(
                f"task executor {short(resource_id)} is registered by another key "
                f"({previous.peer or 'unauthenticated'}); {context.peer or 'this caller'} may not "
                "replace it"
            )
        if resource_id in self.task_executors:
            # A re-registration (e.g. it restarted, or missed our heartbeats): the old
            # registration's slots are gone; its slot report will rebuild the new one.
            self._close_task_executor(
                resource_id, "the task executor registered again", notify=False
            )
        instance_id = new_instance_id()
        client = TaskExecutorClient(
            self.clients.get(request.address), fencing_token=self.session_id or ""
        )
        self.task_executors[resource_id] = WorkerRegistration(
            registration, instance_id, client, peer=context.peer
        )
        self._by_instance[instance_id] = resource_id
        self.te_heartbeats.monitor(
            resource_id,
            lambda: self._heartbeat_task_executor(resource_id),
            watch=self.clients.get(request.address).watch_connection,
        )
        log.info(
            "task executor %s registered from %s with %d slots (instance %s)",
            short(resource_id),
            registration.address,
            registration.number_slots,
            short(instance_id),
        )
        return resource_manager_pb2.RegisterTaskExecutorResponse(
            instance_id=instance_id,
            resource_manager_id=self.identity.id,
            heartbeat_interval_ms=int(self.settings.heartbeat_interval_s * 1000),
        )

    async def send_slot_report(
        self, request: resource_manager_pb2.SendSlotReportRequest, context: CallContext
    ) -> common_pb2.Empty:
        record = self._task_executor_by_instance(InstanceID(request.instance_id))
        check_owner(record, context, "report its slots")
        self._apply_slot_report(record, request.slot_report)
        return common_pb2.Empty()

    def _apply_slot_report(
        self, record: WorkerRegistration, message: common_pb2.SlotReport
    ) -> None:
        slots = self._slots()
        report = slot_report_from_proto(message)
        # The Spark UI comes up with the task executor's session, after it registered.
        record.registration.info.spark_ui_url = http_url(message.spark_ui_url)
        if not record.slot_manager_registered:
            slots.register_task_executor(record.instance_id, record.registration, report)
            record.slot_manager_registered = True
            if self.active_workers is not None:
                self.active_workers.on_worker_registered(record.resource_id)
        else:
            slots.report_slot_status(record.instance_id, report)
        if self.active_workers is not None:
            self.active_workers.on_slot_report(record.resource_id, message.holds_result_partitions)

    def _task_executor_by_instance(self, instance_id: InstanceID) -> WorkerRegistration:
        resource_id = self._by_instance.get(instance_id)
        if resource_id is None:
            raise NotFoundError(
                f"task executor instance {short(instance_id)} is not registered "
                f"(it must register again)"
            )
        return self.task_executors[resource_id]

    async def notify_slot_available(
        self, request: resource_manager_pb2.NotifySlotAvailableRequest, context: CallContext
    ) -> common_pb2.Empty:
        record = self._task_executor_by_instance(InstanceID(request.instance_id))
        check_owner(record, context, "free its slots")
        self._slots().free_slot(
            SlotID(record.resource_id, request.slot_index), AllocationID(request.allocation_id)
        )
        return common_pb2.Empty()

    async def disconnect_task_executor(
        self, request: resource_manager_pb2.DisconnectTaskExecutorRequest, context: CallContext
    ) -> common_pb2.Empty:
        record = self.task_executors.get(ResourceID(request.resource_id))
        if record is None:
            return common_pb2.Empty()  # gone already: disconnecting is idempotent
        check_owner(record, context, "disconnect it")
        self._close_task_executor(
            ResourceID(request.resource_id),
            f"the task executor disconnected: {request.cause}",
            notify=False,
        )
        return common_pb2.Empty()

    async def _heartbeat_task_executor(self, resource_id: ResourceID) -> None:
        record = self.task_executors.get(resource_id)
        if record is None:
            return
        report = await record.client.heartbeat_from_resource_manager(
            common_pb2.HeartbeatRequest(sender_id=self.identity.id),
            timeout=self.settings.heartbeat_interval_s,
        )
        current = self.task_executors.get(resource_id)
        if current is record and record.slot_manager_registered and self.slot_manager:
            self._apply_slot_report(record, report)

    def _on_task_executor_timeout(self, resource_id: str, reason: str) -> None:
        self._close_task_executor(
            ResourceID(resource_id), f"heartbeat timeout: {reason}", notify=True
        )
        if self.active_workers is not None:
            self.active_workers.on_task_executor_lost(ResourceID(resource_id), reason)

    def _close_task_executor(self, resource_id: ResourceID, cause: str, *, notify: bool) -> None:
        record = self.task_executors.pop(resource_id, None)
        if record is None:
            return
        self._by_instance.pop(record.instance_id, None)
        self.te_heartbeats.unmonitor(resource_id)
        if self.active_workers is not None:
            self.active_workers.on_task_executor_closed(resource_id)
        lost: list[SlotRequest] = []
        if record.slot_manager_registered and self.slot_manager is not None:
            lost = self.slot_manager.unregister_task_executor(record.instance_id, cause)
        log.warning(
            "task executor %s removed: %s (%d allocations lost)",
            short(resource_id),
            cause,
            len(lost),
        )
        # Tell each affected JobMaster at once instead of waiting for its own heartbeat timeout.
        for job_id in {r.job_id for r in lost}:
            jm = self.job_masters.get(job_id)
            if jm is not None:
                self.runtime.spawn(jm.tell_task_executor_lost(resource_id, cause), "jm-te-lost")
        if notify:
            self.runtime.spawn(record.tell_disconnect(cause), "te-disconnect")

    # -- job masters -----------------------------------------------------------------------------

    async def register_job_master(
        self, request: resource_manager_pb2.RegisterJobMasterRequest, context: CallContext
    ) -> resource_manager_pb2.RegisterJobMasterResponse:
        self._slots()
        job_id = JobID(request.job_id)
        session_id = request.job_master_session_id
        if request.HasField("declaration"):
            # Checked before anything changes: a bad declaration fails the registration too.
            declaration = request.declaration
            if declaration.job_id != job_id or declaration.job_master_session_id != session_id:
                raise InvalidArgumentError(
                    f"the declaration riding on the registration of job {short(job_id)} is for "
                    f"job {short(declaration.job_id)}, session "
                    f"{short(declaration.job_master_session_id)}: it must be the registration's"
                )
            declaration_from_proto(declaration, ())  # bounds, profiles and ids; raises
        leads = await self.job_leaders.verify(job_id, session_id, self.settings.rpc_timeout_s / 2)
        if leads is False:
            raise FencingMismatchError(
                f"JobMaster session {short(session_id)} does not lead job {short(job_id)} "
                "(it may have lost leadership): registration refused"
            )
        self._slots()  # still leading after the wait
        old = self.job_masters.get(job_id)
        if old is not None and old.session_id != session_id:
            self._close_job_master(job_id, "a new JobMaster registered for the job")
        client = JobMasterClient(self.clients.get(request.job_master_address))
        self.job_masters[job_id] = JobMasterRegistration(
            job_id, request.job_master_address, request.job_master_session_id, client
        )
        self.jm_heartbeats.monitor(
            job_id,
            lambda: self._heartbeat_job_master(job_id),
            watch=self.clients.get(request.job_master_address).watch_connection,
        )
        log.info(
            "JobMaster of job %s registered from %s", short(job_id), request.job_master_address
        )
        reply = resource_manager_pb2.RegisterJobMasterResponse(
            resource_manager_id=self.identity.id,
            heartbeat_interval_ms=int(self.settings.heartbeat_interval_s * 1000),
        )
        if request.HasField("declaration"):
            # Set even when nothing is refused: it tells the JobMaster the declaration was read.
            reply.declaration.CopyFrom(self._declare(request.declaration))
        return reply

    async def disconnect_job_master(
        self, request: resource_manager_pb2.DisconnectJobMasterRequest, context: CallContext
    ) -> common_pb2.Empty:
        record = self.job_masters.get(JobID(request.job_id))
        if record is not None and record.session_id == request.job_master_session_id:
            self._close_job_master(record.job_id, request.cause or "the JobMaster disconnected")
        return common_pb2.Empty()

    async def _heartbeat_job_master(self, job_id: JobID) -> None:
        record = self.job_masters.get(job_id)
        if record is None:
            return
        await record.client.heartbeat_from_resource_manager(
            job_master_pb2.JobMasterHeartbeatRequest(
                job_id=job_id,
                sender_id=self.identity.id,
                slot_wait_reason=slot_wait_reason(
                    job_id, self.slot_manager, self.active_workers, self.requirements
                ),
            ),
            timeout=self.settings.heartbeat_interval_s,
            fencing_token=record.session_id,
        )

    def _on_job_master_timeout(self, job_id: str, reason: str) -> None:
        self._close_job_master(JobID(job_id), f"heartbeat timeout: {reason}")

    def _on_job_leader_change(self, job_id: JobID, leader: LeaderInfo | None) -> None:
        record = self.job_masters.get(job_id)
        if record is not None and leader is not None and leader.session_id != record.session_id:
            self._close_job_master(job_id, "the JobMaster lost its job's leadership")

    def _close_job_master(self, job_id: JobID, cause: str) -> None:
        record = self.job_masters.pop(job_id, None)
        if record is None:
            return
        self.runtime.spawn(self.job_leaders.remove_job(job_id), "job-leader-untrack")
        self.jm_heartbeats.unmonitor(job_id)
        if self.requirements is not None:
            self.requirements.remove_job(job_id)
        if self.slot_manager is not None:
            for request in self.slot_manager.pending_requests():
                if request.job_id == job_id:
                    self.slot_manager.unregister_slot_request(request.allocation_id)
        log.info("JobMaster of job %s closed: %s", short(job_id), cause)

    # ResourceActions (called by the SlotManager, on the loop) ------------------------------------

    def allocate_slot(self, instance_id: InstanceID, slot_id: SlotID, request: SlotRequest) -> None:
        self.runtime.spawn(self._allocate_slot(instance_id, slot_id, request), "allocate-slot")

    async def _allocate_slot(
        self, instance_id: InstanceID, slot_id: SlotID, request: SlotRequest
    ) -> None:
        error: RpcError | None = None
        resource_id = self._by_instance.get(instance_id)
        jm = self.job_masters.get(request.job_id)
        if resource_id is None:
            error = NotFoundError(f"task executor instance {short(instance_id)} is gone")
        elif jm is None:
            error = FailedPreconditionError(f"the JobMaster of {short(request.job_id)} is gone")
        else:
            record = self.task_executors[resource_id]
            try:
                await record.client.request_slot(
                    task_executor_pb2.TaskExecutorRequestSlotRequest(
                        slot_index=slot_id.slot_index,
                        job_id=request.job_id,
                        allocation_id=request.allocation_id,
                        resource_profile=profile_to_proto(request.resource_profile),
                        job_master_address=jm.address,
                        resource_manager_id=self.identity.id,
                        job_master_session_id=jm.session_id,
                    ),
                    timeout=self.settings.rpc_timeout_s,
                )
            except RpcError as exc:
                error = exc
                log.info(
                    "task executor %s refused slot %s for %s: %s",
                    short(resource_id),
                    slot_id,
                    short(request.allocation_id),
                    exc,
                )
        if self.slot_manager is not None:
            self.slot_manager.on_allocation_result(request.allocation_id, slot_id, error)

    def notify_allocation_failure(
        self, job_id: JobID, allocation_id: AllocationID, cause: RpcError
    ) -> None:
        if self.requirements is not None:
            # A declared need unserved past its deadline: the JobMaster fails its oldest
            # pending request with this diagnosis, and declares one slot fewer.
            self.requirements.request_failed(allocation_id)
        jm = self.job_masters.get(job_id)
        if jm is None:
            return
        self.runtime.spawn(jm.tell_allocation_failed(allocation_id, cause), "allocation-failure")

    def notify_idle_task_executor(self, instance_id: InstanceID) -> None:
        resource_id = self._by_instance.get(instance_id)
        if resource_id is None:
            return
        if self.active_workers is not None:
            self.active_workers.on_idle(resource_id)
        else:
            # Without a driver idle task executors stay: there is nobody to start new ones.
            log.debug("task executor %s is idle", short(resource_id))

    # SlotDemand (read by the ActiveWorkers, on the loop) -----------------------------------------

    def more_slots_advice(self) -> str:
        workers = self.active_workers
        return workers.more_slots_advice() if workers is not None else START_MORE_TASK_EXECUTORS

    def waiting_slot_requests(self) -> int:
        """Slots JobMasters wait for: requests in line and declared needs no free slot fits."""
        if self.slot_manager is None:
            return 0
        unmet = self.requirements.unmet() if self.requirements is not None else 0
        return self.slot_manager.number_pending_requests() + unmet

    def registered_slots(self) -> int:
        return sum(self.slot_manager.slot_counts().values()) if self.slot_manager else 0

    def is_idle(self, resource_id: ResourceID) -> bool:
        record = self.task_executors.get(resource_id)
        if record is None or not record.slot_manager_registered or self.slot_manager is None:
            return False
        return self.slot_manager.is_idle(record.instance_id)

    def close_task_executor(self, resource_id: ResourceID, cause: str) -> None:
        self._close_task_executor(resource_id, cause, notify=False)

    # -- queries ---------------------------------------------------------------------------------

    async def get_cluster_status(
        self, request: resource_manager_pb2.GetClusterStatusRequest, context: CallContext
    ) -> resource_manager_pb2.ClusterStatus:
        # The heartbeat manager notes loop (monotonic) times; the status carries wall-clock ones.
        offset = time.time() - asyncio.get_running_loop().time()

        def last_heartbeat_at(resource_id: ResourceID) -> float:
            heard = self.te_heartbeats.last_heard(resource_id)
            return 0.0 if heard is None else heard + offset

        status = cluster_status(
            self.identity.info(is_leader=True),
            self._slots(),
            self.task_executors.values(),
            self.job_masters,
            last_heartbeat_at,
            self.active_workers,
        )
        status.pending_slot_requests = self.waiting_slot_requests()
        return status

    async def get_service_info(
        self, request: common_pb2.GetServiceInfoRequest, context: CallContext
    ) -> common_pb2.ServiceInfo:
        return self.identity.info(is_leader=self.session_id is not None)

    async def get_leader_session(
        self, request: common_pb2.GetLeaderSessionRequest, context: CallContext
    ) -> common_pb2.LeaderSession:
        return leader_session(self.session_id, "resource manager", self.identity.address)
