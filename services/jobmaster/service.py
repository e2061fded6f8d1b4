"""The job-master process: hosts one :class:`~sparkmill.services.jobmaster.job_master.JobMaster`
per job.

It registers at the dispatcher leader (with back-off; again whenever the leader changes) and
is heartbeated by it. It also watches those heartbeats (Flink's JobMaster watches its
ResourceManager's the same way): a dispatcher that stopped heartbeating it - it was cut off
long enough to be dropped, while the same dispatcher stayed leader - gets a new registration,
so the process rejoins as a standby instead of staying unknown until the next leader change.

``StartJob`` from the dispatcher creates a JobMaster, which gets its own leader session id
from the job's leader election; every per-job RPC is routed to that job's JobMaster and fenced
with its session id, so a message meant for an earlier JobMaster of the same job is refused.

The process also follows the resource manager leader once, for all its JobMasters.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    NotLeaderError,
    PermissionDeniedError,
    UnavailableError,
)
from sparkmill.common.core.ids import JobID, SharedGateID, short
from sparkmill.common.core.proto_convert import job_status_to_proto
from sparkmill.common.ha.leader import LeaderInfo, LeaderRetrievalService
from sparkmill.common.ha.services import HighAvailabilityServices
from sparkmill.common.jobgraph.codec import job_graph_from_proto
from sparkmill.common.jobgraph.model import KNOWN_OPERATOR_KINDS
from sparkmill.common.jobgraph.validation import validate_job_graph
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.peer_bindings import PeerBindings
from sparkmill.common.rpc.server import CallContext, MethodSpec
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.heartbeat import HeartbeatManager
from sparkmill.common.runtime.retry import Backoff, retry_registration, retry_with_backoff
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import (
    common_pb2,
    dispatcher_pb2,
    job_master_pb2,
    jobs_pb2,
    task_executor_pb2,
)
from sparkmill.common.v1.gateways import DispatcherClient, JobMasterServicer
from sparkmill.services.jobmaster.host import HostedJobMaster
from sparkmill.services.jobmaster.job_master import JobMaster

log = logging.getLogger(__name__)

# The dispatcher leader's key in the process's heartbeat manager (it only receives).
DISPATCHER_HEARTBEAT_TARGET = "dispatcher"
_REPORT_BACKOFF = Backoff(initial_s=0.1, max_s=2.0)
# The dispatcher leader answered "never": the job is unknown to it, or another JobMaster
# session leads the job.
_REPORT_REFUSED: tuple[type[Exception], ...] = (
    PermissionDeniedError,
    NotFoundError,
    InvalidArgumentError,
    FailedPreconditionError,
)


@dataclass
class _DispatcherConnection:
    leader: LeaderInfo
    client: DispatcherClient
    registered: bool = False
    registration: asyncio.Task[None] | None = None


class JobMasterProcess(JobMasterServicer):
    """The job-master process; the :class:`~sparkmill.services.jobmaster.host.JobMasterHost` of its
    JobMasters."""

    def __init__(
        self,
        settings: ClusterSettings,
        config: Configuration,
        runtime: ServiceRuntime,
        ha: HighAvailabilityServices,
        clients: RpcClientPool,
        identity: ServiceIdentity,
    ) -> None:
        self.settings = settings
        self.config = config
        self.runtime = runtime
        self.ha = ha
        self.clients = clients
        self.identity = identity
        # A task executor's key speaks only for its own resource id, across this process's jobs.
        self.task_executor_keys = PeerBindings("task executor")
        self.job_masters: dict[JobID, JobMaster] = {}
        self.dispatcher: _DispatcherConnection | None = None
        self.rm_leader: LeaderInfo | None = None
        self._dispatcher_retrieval: LeaderRetrievalService = ha.dispatcher_retrieval()
        self.result_store = ha.job_result_store()
        self.progress_store = ha.job_progress_store()
        self._rm_retrieval: LeaderRetrievalService = ha.resource_manager_retrieval()
        self.heartbeats = HeartbeatManager(
            "jm-process",
            interval_s=settings.heartbeat_interval_s,
            timeout_s=settings.heartbeat_timeout_s,
            rpc_failure_threshold=0,  # the receiving side has no RPCs to count
            on_timeout=self._on_dispatcher_heartbeat_timeout,
        )

    async def start(self) -> None:
        self.heartbeats.start()
        await self._rm_retrieval.start(self._on_rm_leader)
        await self._dispatcher_retrieval.start(self._on_dispatcher_leader)

    async def stop(self) -> None:
        await self._dispatcher_retrieval.stop()
        await self._rm_retrieval.stop()
        await self.heartbeats.stop()
        for job_master in list(self.job_masters.values()):
            await job_master.suspend(
                "the job-master process is shutting down", tell_dispatcher=False
            )

    # -- leaders -----------------------------------------------------------------------------

    async def _on_rm_leader(self, leader: LeaderInfo | None) -> None:
        self.rm_leader = leader
        for job_master in self.job_masters.values():
            job_master.on_resource_manager_leader(leader)

    async def _on_dispatcher_leader(self, leader: LeaderInfo | None) -> None:
        old = self.dispatcher
        if old is not None and old.registration is not None:
            old.registration.cancel()
        self.dispatcher = None
        self.heartbeats.unmonitor(DISPATCHER_HEARTBEAT_TARGET)
        if leader is None:
            return
        client = DispatcherClient(self.clients.get(leader.address), fencing_token=leader.session_id)
        connection = _DispatcherConnection(leader, client)
        self.dispatcher = connection
        connection.registration = self.runtime.spawn(
            self._register_at_dispatcher(connection), "dispatcher-registration"
        )

    async def _register_at_dispatcher(self, connection: _DispatcherConnection) -> None:
        async def attempt(timeout: float) -> None:
            # Built per attempt: the hosted jobs must be current when the new leader reads them.
            request = dispatcher_pb2.RegisterJobMasterProcessRequest(
                process_id=self.identity.id,
                address=self.identity.address,
                info=self.identity.info(),
                jobs=self._hosted_jobs(),
            )
            await connection.client.register_job_master_process(request, timeout=timeout)

        await retry_registration(
            f"registration at dispatcher {connection.leader.address}",
            attempt,
            self.settings.registration,
        )
        connection.registered = True
        self.heartbeats.monitor(DISPATCHER_HEARTBEAT_TARGET)
        log.info("registered at dispatcher %s", connection.leader.address)

    def _on_dispatcher_heartbeat_timeout(self, target: str, reason: str) -> None:
        connection = self.dispatcher
        if target != DISPATCHER_HEARTBEAT_TARGET or connection is None:
            return
        log.warning(
            "dispatcher %s stopped heartbeating this process (%s): registering again",
            connection.leader.address,
            reason,
        )
        self.runtime.spawn(self._on_dispatcher_leader(connection.leader), "dispatcher-reconnect")

    async def report_job_status(self, report: dispatcher_pb2.JobStatusReport) -> bool:
        """Deliver a job status report to the dispatcher leader, retrying until it is taken
        (True) or refused (False: unknown job, or another JobMaster session leads it)."""

        async def attempt() -> None:
            # The leader may change between attempts: always the current one.
            connection = self.dispatcher
            if connection is None:
                raise UnavailableError("no dispatcher leader known yet")
            await connection.client.report_job_status(report)

        try:
            await retry_with_backoff(
                f"reporting job {short(report.job_id)} status",
                attempt,
                _REPORT_BACKOFF,
                give_up_on=_REPORT_REFUSED,
            )
        except _REPORT_REFUSED as exc:
            log.warning("dispatcher refused the status of job %s: %s", short(report.job_id), exc)
            return False
        return True

    def job_master_done(self, job_master: HostedJobMaster) -> None:
        if self.job_masters.get(job_master.job_id) is job_master:
            del self.job_masters[job_master.job_id]
        self.runtime.heap.release(job_master)

    # -- fencing and routing -----------------------------------------------------------------

    def expected_fencing_token(self, spec: MethodSpec, request: Any) -> str:
        if spec.name == "StartJob":
            if self.dispatcher is None:
                raise NotLeaderError("this job-master process knows no dispatcher leader yet")
            return self.dispatcher.leader.session_id
        return self._job_master(request.job_id).session_id

    def _job_master(self, job_id: str) -> JobMaster:
        job_master = self.job_masters.get(JobID(job_id))
        if job_master is None:
            raise NotFoundError(f"job {short(job_id)} has no JobMaster in this process")
        return job_master

    # -- RPCs --------------------------------------------------------------------------------

    async def start_job(
        self, request: job_master_pb2.StartJobRequest, context: CallContext
    ) -> job_master_pb2.StartJobResponse:
        graph = job_graph_from_proto(request.job_graph)
        # Again, not only at submission: a StartJob may come from anyone holding a dispatcher
        # key, and an unchecked graph (parallelism 10^6) would block this loop building it.
        validate_job_graph(
            graph,
            known_operator_kinds=KNOWN_OPERATOR_KINDS,
            limits=self.settings.job_graph_limits,
            forbidden_sink_dirs=self.settings.protected_dirs,
        )
        existing = self.job_masters.get(graph.job_id)
        if existing is not None and not existing.status.is_terminal:
            raise AlreadyExistsError(f"job {short(graph.job_id)} already runs in this process")
        election = self.ha.job_master_election(graph.job_id)
        # The job's first JobMaster is published as its leader by the write that creates the
        # job's election: one ZooKeeper transaction between StartJob and deployment.
        election.will_publish(self.identity.address)
        job_master = JobMaster(
            graph,
            settings=self.settings,
            config=self.config,
            runtime=self.runtime,
            host=self,
            election=election,
            clients=self.clients,
            submitted_at=request.submitted_at,
        )
        self.job_masters[graph.job_id] = job_master
        # In standalone mode leadership is granted inside start(); with ZooKeeper it may come
        # later (another JobMaster of the job may still lead), and the session id with it.
        await job_master.start()
        return job_master_pb2.StartJobResponse(
            job_master_session_id=job_master.session_id, job_master_address=self.identity.address
        )

    async def cancel_job(
        self, request: job_master_pb2.JobMasterCancelJobRequest, context: CallContext
    ) -> common_pb2.Empty:
        self._job_master(request.job_id).cancel()
        return common_pb2.Empty()

    async def get_job_details(
        self, request: job_master_pb2.GetJobDetailsRequest, context: CallContext
    ) -> jobs_pb2.JobDetails:
        return self._job_master(request.job_id).details()

    async def register_task_executor(
        self, request: job_master_pb2.JobMasterRegisterTaskExecutorRequest, context: CallContext
    ) -> job_master_pb2.JobMasterRegisterTaskExecutorResponse:
        job_master = self._job_master(request.job_id)
        self.task_executor_keys.bind(request.resource_id, context.peer)
        job_master.register_task_executor(request.resource_id, request.address)
        return job_master_pb2.JobMasterRegisterTaskExecutorResponse(
            job_master_resource_id=self.identity.id,
            heartbeat_interval_ms=int(self.settings.heartbeat_interval_s * 1000),
        )

    async def offer_slots(
        self, request: job_master_pb2.OfferSlotsRequest, context: CallContext
    ) -> job_master_pb2.OfferSlotsResponse:
        job_master = self._job_master(request.job_id)
        # Offering connects the task executor (RegisterTaskExecutor is optional), so the key
        # that offers first owns the id from now on, as one that registered would.
        self.task_executor_keys.bind(request.resource_id, context.peer)
        accepted = job_master.offer_slots(
            request.resource_id, request.address, list(request.offers)
        )
        return job_master_pb2.OfferSlotsResponse(accepted=accepted)

    async def update_task_execution_state(
        self, request: job_master_pb2.UpdateTaskExecutionStateRequest, context: CallContext
    ) -> common_pb2.Empty:
        job_master = self._job_master(request.job_id)
        self.task_executor_keys.check(request.resource_id, context.peer, "report its tasks")
        job_master.update_task_execution_states(request.resource_id, list(request.updates))
        return common_pb2.Empty()

    async def get_input_gate(
        self, request: job_master_pb2.GetInputGateRequest, context: CallContext
    ) -> task_executor_pb2.InputGate:
        return self._job_master(request.job_id).input_gates.shared_gate(
            SharedGateID(request.shared_gate_id), request.generation
        )

    async def notify_slot_allocation_failure(
        self, request: job_master_pb2.NotifySlotAllocationFailureRequest, context: CallContext
    ) -> common_pb2.Empty:
        self._job_master(request.job_id).slot_allocation_failed(
            request.allocation_id, request.error
        )
        return common_pb2.Empty()

    async def disconnect_task_executor(
        self, request: job_master_pb2.JobMasterDisconnectTaskExecutorRequest, context: CallContext
    ) -> common_pb2.Empty:
        job_master = self._job_master(request.job_id)
        if not context.peer.startswith("resource-manager:"):
            # A task executor's key disconnects only its own resource id; the resource manager
            # reports any task executor it lost.
            self.task_executor_keys.check(request.resource_id, context.peer, "disconnect it")
        job_master.task_executor_lost(request.resource_id, request.cause)
        return common_pb2.Empty()

    async def disconnect_resource_manager(
        self, request: job_master_pb2.DisconnectResourceManagerRequest, context: CallContext
    ) -> common_pb2.Empty:
        self._job_master(request.job_id).on_resource_manager_leader(self.rm_leader)
        return common_pb2.Empty()

    async def heartbeat_from_resource_manager(
        self, request: job_master_pb2.JobMasterHeartbeatRequest, context: CallContext
    ) -> common_pb2.Empty:
        self._job_master(request.job_id).heartbeat_from_resource_manager(request.slot_wait_reason)
        return common_pb2.Empty()

    async def heartbeat_from_dispatcher(
        self, request: common_pb2.HeartbeatRequest, context: CallContext
    ) -> job_master_pb2.HostedJobs:
        self.heartbeats.receive_heartbeat(DISPATCHER_HEARTBEAT_TARGET)
        return job_master_pb2.HostedJobs(process_id=self.identity.id, jobs=self._hosted_jobs())

    def _hosted_jobs(self) -> list[jobs_pb2.HostedJob]:
        return [
            jobs_pb2.HostedJob(
                job_id=jm.job_id,
                status=job_status_to_proto(jm.status),
                job_master_session_id=jm.session_id,
            )
            for jm in self.job_masters.values()
        ]

    async def get_service_info(
        self, request: common_pb2.GetServiceInfoRequest, context: CallContext
    ) -> common_pb2.ServiceInfo:
        return self.identity.info()
