"""The JobMaster of one job (Flink's ``JobMaster``).

It owns the job's :class:`ExecutionGraph` (its open parallelisms decided, then built in slices
when it starts, before it runs for the job's leadership), :class:`SlotPool` and
:class:`DefaultScheduler`, and does their I/O: it registers at the resource manager leader
(with back-off, again after a leader change) and asks it for slots; it accepts slot offers,
heartbeats task executors, deploys and cancels tasks; it reports every job status change to the
dispatcher. Its leader session id (from the job's leader election) fences every RPC it serves
and every call it makes to task executors.
"""

from __future__ import annotations

import asyncio
import logging
import time

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import (
    IllegalStateBug,
    InvalidArgumentError,
    RpcError,
    UnavailableError,
    error_from_code,
)
from sparkmill.common.core.ids import AllocationID, JobID, ResourceID, short
from sparkmill.common.core.proto_convert import profile_from_proto
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.states import JobStatus
from sparkmill.common.exchange.layout import cleanup_job
from sparkmill.common.ha.leader import LeaderElectionService, LeaderInfo
from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.heartbeat import HeartbeatManager
from sparkmill.common.runtime.retry import retry_registration
from sparkmill.common.runtime.settings import ClusterSettings, job_settings_from_config
from sparkmill.common.runtime.timers import AsyncioTimerService
from sparkmill.common.v1 import (
    common_pb2,
    dispatcher_pb2,
    job_master_pb2,
    jobs_pb2,
    resource_manager_pb2,
    task_executor_pb2,
)
from sparkmill.common.v1.gateways import ResourceManagerClient, TaskExecutorClient
from sparkmill.services.jobmaster import peer_calls
from sparkmill.services.jobmaster.executiongraph.deployment_descriptor import (
    InputGateCache,
    deployment_proto_of,
)
from sparkmill.services.jobmaster.executiongraph.execution_graph import Execution, ExecutionGraph
from sparkmill.services.jobmaster.executiongraph.parallelism_decider import build_decided_graph
from sparkmill.services.jobmaster.host import JobMasterHost
from sparkmill.services.jobmaster.job_details import render_job_details
from sparkmill.services.jobmaster.job_outcome import hand_job_back, job_result, status_report
from sparkmill.services.jobmaster.peer_calls import TaskExecutorConnection
from sparkmill.services.jobmaster.recovery import ProgressRecorder, recover_finished_subtasks
from sparkmill.services.jobmaster.scheduler.adaptive_parallelism import AdaptiveParallelism
from sparkmill.services.jobmaster.scheduler.default_scheduler import DefaultScheduler
from sparkmill.services.jobmaster.scheduler.deployments import DeploymentTracker
from sparkmill.services.jobmaster.scheduler.heartbeat_reconciliation import apply_heartbeat_report
from sparkmill.services.jobmaster.scheduler.restart_strategy import restart_strategy_from_settings
from sparkmill.services.jobmaster.scheduler.state_reports import apply_task_state_updates
from sparkmill.services.jobmaster.scheduler.task_submissions import TaskSubmissionBatcher
from sparkmill.services.jobmaster.slotpool.slot_pool import (
    PhysicalSlot,
    SlotOffer,
    SlotPool,
    TaskExecutorInfo,
)
from sparkmill.services.jobmaster.slotpool.slot_requests import RequirementsDeclarer

log = logging.getLogger(__name__)


class JobMaster:
    def __init__(
        self,
        graph: JobGraph,
        *,
        settings: ClusterSettings,
        config: Configuration,
        runtime: ServiceRuntime,
        host: JobMasterHost,
        election: LeaderElectionService,
        clients: RpcClientPool,
        submitted_at: float,
    ) -> None:
        self.job_graph = graph
        self.job_id: JobID = graph.job_id
        self.settings = settings
        self.runtime = runtime
        self.host = host
        self.election = election
        self.clients = clients
        self.submitted_at = submitted_at or time.time()
        self.session_id = ""
        # This JobMaster's leader epoch (from the job's election, never a clock): greater than
        # every earlier JobMaster's of the job, so (epoch, attempt number) orders sink commits
        # and progress logs across takeovers. 0 until leadership is confirmed.
        self.epoch = 0
        self.status = JobStatus.INITIALIZING
        # Job-level keys override the cluster's (restart strategy, failover, slot timeout).
        self.job_settings = job_settings_from_config(
            config.with_overrides(graph.config, job_scope=True)
        )
        # Empty until start() built the real graph in slices: only then are there subtasks.
        self.graph = ExecutionGraph(graph)
        self._scheduler: DefaultScheduler | None = None
        self.timers = AsyncioTimerService()
        self.slot_pool = SlotPool(
            self.job_id,
            self.timers,
            self,
            # Longer than the resource manager's own timeout for a request that waits in its
            # line: its diagnostic comes first.
            slot_request_timeout_s=self.job_settings.slot_request_timeout_s + 1.0,
            idle_slot_timeout_s=settings.slot_idle_timeout_s,
            why_waiting=lambda: self.slot_requests.wait_reason,
        )
        self.progress = ProgressRecorder(host.progress_store, self.job_id, runtime)
        self.results_lost_with_executor = settings.results_lost_with_executor
        self.task_executors: dict[ResourceID, TaskExecutorConnection] = {}
        self.deployments = DeploymentTracker()
        self.input_gates = InputGateCache(self.job_settings.deployment_offload_min_partitions)
        self.task_submissions = TaskSubmissionBatcher(
            spawn=self.runtime.spawn, timeout_s=settings.rpc_timeout_s
        )
        self.slot_requests = RequirementsDeclarer(
            self.job_id,
            lambda: self.rm_client,
            session_id=lambda: self.session_id,
            timeout_ms=int(self.job_settings.slot_request_timeout_s * 1000),
            spawn=self.runtime.spawn,
            on_refused=self.slot_pool.fail_allocation,
        )
        self.rm_leader: LeaderInfo | None = None
        self.rm_client: ResourceManagerClient | None = None
        self._rm_registration: asyncio.Task[None] | None = None
        self.ended_at = 0.0
        self.heartbeats = HeartbeatManager(
            f"jm-{short(self.job_id)}",
            interval_s=settings.heartbeat_interval_s,
            timeout_s=settings.heartbeat_timeout_s,
            rpc_failure_threshold=settings.heartbeat_rpc_failure_threshold,
            on_timeout=self._on_heartbeat_timeout,
        )

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def scheduler(self) -> DefaultScheduler:
        if self._scheduler is None:
            raise IllegalStateBug(
                f"job {short(self.job_id)}: the scheduler was used before the graph was built"
            )
        return self._scheduler

    async def start(self) -> None:
        """Build the execution graph, then run for the job's leadership."""
        await self.build_graph()
        self.heartbeats.start()
        await self.election.start(self)

    async def build_graph(self) -> None:
        """Build the execution graph in slices (the loop runs between them) and the scheduler.
        Raises :class:`UnavailableError` when the job was cancelled or let go of meanwhile
        (nothing was acquired yet: the half-built graph is dropped), and
        :class:`InvalidArgumentError` for a job graph that cannot be expanded."""
        if self._scheduler is not None:
            raise IllegalStateBug(f"job {short(self.job_id)}: its graph was built already")
        try:
            plan, graph = await build_decided_graph(
                self.job_graph,
                self.job_settings.auto_parallelism,
                self.runtime,
                stopped=lambda: self.status is not JobStatus.INITIALIZING,
                # A graph built in several slices is large: frozen as it grows, so the
                # collector's full collections skip it while the job runs (the host releases
                # it when this JobMaster is done).
                on_slice=lambda: self.runtime.heap.hold(self),
            )
        except ValueError as exc:
            self.status = JobStatus.FAILED
            self.host.job_master_done(self)
            raise InvalidArgumentError(f"job {short(self.job_id)} cannot be run: {exc}") from exc
        if graph is None or self.status is not JobStatus.INITIALIZING:
            self.host.job_master_done(self)
            raise UnavailableError(
                f"job {short(self.job_id)} was {self.status.name} while its JobMaster built the "
                "execution graph"
            )
        self.graph = graph
        self.progress.layout = plan.layout
        self._scheduler = DefaultScheduler(
            graph,
            self.slot_pool,
            self,
            restart_strategy_from_settings(self.job_settings.restart),
            failover_strategy=self.job_settings.failover_strategy,
            progress=self.progress,
            fail_on_repeated_error=self.job_settings.restart.fail_on_repeated_error,
            adaptive=AdaptiveParallelism(graph, self.job_settings.auto_parallelism, plan.own_bytes),
            speculative=self.job_settings.speculative,
        )

    async def grant_leadership(self, session_id: str) -> None:
        if self.session_id or self.status is not JobStatus.INITIALIZING:
            # A JobMaster leads its job once: after losing leadership it is done, and the
            # dispatcher starts a new one.
            log.info(
                "job %s: this JobMaster has led already; ignoring a new grant", short(self.job_id)
            )
            return
        store = self.host.result_store
        if await self.runtime.run_blocking(store.has_result, self.job_id):
            # Another JobMaster finished the job while we waited as a standby: never run it
            # again (the "job already done" check).
            log.info("job %s already has a result; this JobMaster stands down", short(self.job_id))
            self.status = JobStatus.SUSPENDED
            self.runtime.spawn(self._stand_down(), "stand-down")
            self.host.job_master_done(self)
            return
        self.session_id = session_id
        epoch = await self.election.confirm_leadership(session_id, self.host.identity.address)
        if epoch is None:
            # Deposed before we could publish ourselves (the latch node is gone): never deploy
            # or record anything under a session nobody can fence against us any more.
            await self.suspend("leadership was lost before it could be confirmed")
            return
        self.epoch = epoch
        # Before anything is scheduled: what an earlier JobMaster finished and is still
        # readable is not run again.
        await recover_finished_subtasks(
            self.graph,
            self.scheduler,
            self.progress,
            self.runtime,
            self.settings.exchange_dir,
            session_id,
            self.epoch,
        )
        self.status = JobStatus.CREATED
        self._report_status(JobStatus.CREATED, "")
        # Scheduling starts once the call stack that started us has returned; the registration
        # at the resource manager right after it, so that it carries the first slot needs.
        loop = asyncio.get_running_loop()
        loop.call_soon(self.scheduler.start_scheduling)
        loop.call_soon(lambda: self.on_resource_manager_leader(self.host.rm_leader))

    async def _stand_down(self) -> None:
        await self.election.stop()
        # The job's outcome is recorded: if the JobMaster that recorded it left the election
        # to us (we were in its latch), it is ours to remove.
        await self.election.remove_election()

    async def revoke_leadership(self) -> None:
        await self.suspend("the JobMaster lost leadership")

    async def suspend(self, cause: str, *, tell_dispatcher: bool = True) -> None:
        """Stop leading the job and release everything. ``tell_dispatcher=False`` when the
        whole process stops (the dispatcher notices that by itself)."""
        if self.status.is_terminal:
            return
        log.warning("job %s suspended: %s", short(self.job_id), cause)
        if self._scheduler is None:  # still building the graph: start() lets go of the job
            self.status = JobStatus.SUSPENDED
            return
        was_leading = bool(self.session_id) and tell_dispatcher
        self.status = JobStatus.SUSPENDED
        self.progress.stop()
        await self._release_resources(cause)
        await self.election.stop()
        if was_leading:
            await self._hand_job_back()

    async def _hand_job_back(self) -> None:
        report = self._status_report(JobStatus.SUSPENDED)
        await hand_job_back(self.host, report, self.settings.rpc_timeout_s)

    def _status_report(
        self, status: JobStatus, result: jobs_pb2.JobResult | None = None
    ) -> dispatcher_pb2.JobStatusReport:
        details = result.details if result is not None else self.details()
        return status_report(
            self.job_id, self.session_id, self.host.identity, status, details, result
        )

    def cancel(self) -> None:
        if self._scheduler is None:
            # Still building the graph: nothing runs or is held yet. start() drops the graph.
            if self.status is JobStatus.INITIALIZING:
                log.info("job %s cancelled while its graph was built", short(self.job_id))
                self.status = JobStatus.CANCELED
                self.ended_at = time.time()
            return
        self._scheduler.cancel()

    # -- SchedulerActions -------------------------------------------------------------------

    def job_status_changed(self, status: JobStatus, cause: str) -> None:
        if self.status is JobStatus.SUSPENDED:
            return  # let go of the job: whatever its scheduler still does is not ours to tell
        self.status = status
        if status.is_globally_terminal:
            self.ended_at = time.time()
            self.runtime.spawn(self._finish(status, cause), "job-finished")
        else:
            self._report_status(status, cause)

    async def _finish(self, status: JobStatus, cause: str) -> None:
        self.progress.stop()
        deposed = not self.election.has_leadership(self.session_id)
        report: asyncio.Future[bool] | None = None
        if not deposed:
            # The outcome goes first: the client waits for it, not for the goodbyes below.
            result = job_result(
                self.job_id, status, cause, self.details(), self.scheduler.accumulators
            )
            report = self.runtime.spawn(
                self.host.report_job_status(self._status_report(status, result)), "final-report"
            )
        # Leave the resource manager while reporting (the client need not wait for both).
        released = self.runtime.spawn(self._release_resources(f"job {status.name}"), "release")
        await asyncio.sleep(0)
        # Task executors keep their connection to the job while they hold its results (as
        # Flink's partition tracker does): the job is over, so let them go now.
        for te in list(self.task_executors.values()):
            self._disconnect_task_executor(te, f"the job ended {status.name}")
        if report is None:
            # Deposed while the job ended here (e.g. frozen past the ZooKeeper session): the
            # new leader owns the job, its results and its files. Touch nothing.
            log.warning(
                "job %s ended %s under a JobMaster that no longer leads it; the outcome is "
                "left to the current leader",
                short(self.job_id),
                status.name,
            )
            self.status = JobStatus.SUSPENDED
            await released
            await self.election.stop()
            self.host.job_master_done(self)
            await self._hand_job_back()  # the job's outcome (if any) is for the next one
            return
        accepted = await report
        if accepted and status is not JobStatus.FINISHED:
            # A successful job's commit vertex removes its intermediate results; after a
            # failure or a cancellation nobody else will. Only once the dispatcher took the
            # outcome from this (still current) JobMaster: a refused one leads nothing.
            try:
                await self.runtime.run_blocking(
                    cleanup_job, self.settings.exchange_dir, self.job_id
                )
            except OSError as exc:
                log.warning("job %s: intermediate results not removed: %s", short(self.job_id), exc)
        # Only once the outcome is recorded may the job's leadership go: a standby that takes
        # over then finds the result and stands down instead of running the job again.
        if accepted:
            try:
                await self.progress.flush()  # no late append may recreate the removed log
                await self.runtime.run_blocking(self.host.progress_store.remove, self.job_id)
            except OSError as exc:
                log.warning("job %s: progress log not removed: %s", short(self.job_id), exc)
        await released
        await self.election.stop()
        if accepted:
            # The outcome is recorded: no JobMaster will contend for this job again.
            await self.election.remove_election()
        self.host.job_master_done(self)

    def _report_status(self, status: JobStatus, cause: str) -> None:
        self.runtime.spawn(self.host.report_job_status(self._status_report(status)), "report")

    async def _release_resources(self, cause: str) -> None:
        await self.scheduler.close()
        self.slot_pool.close(UnavailableError(cause))
        if self._rm_registration is not None:
            self._rm_registration.cancel()
        if self.rm_client is not None:
            await peer_calls.disconnect_from_resource_manager(
                self.rm_client, self.job_id, self.session_id, cause
            )
        await self.heartbeats.stop()
        self.timers.cancel_all()

    def submit_task(self, execution: Execution, slot: PhysicalSlot) -> asyncio.Future[None]:
        te = self.task_executors.get(slot.task_executor.resource_id)
        if te is None:
            gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            gone.set_exception(
                UnavailableError(
                    f"task executor {short(slot.task_executor.resource_id)} is no longer connected"
                )
            )
            return gone
        submitted = self.task_submissions.submit(
            te.resource_id,
            te.client,
            task_executor_pb2.SubmitTaskRequest(
                tdd=deployment_proto_of(
                    execution,
                    slot.allocation_id,
                    self.input_gates,
                    job_id=self.job_id,
                    job_name=self.job_graph.name,
                    job_master_epoch=self.epoch,
                    job_config=self.job_graph.config,
                ),
                job_master_address=self.host.identity.address,
            ),
        )
        self.deployments.follow(execution.attempt_id, te.resource_id, submitted)
        return submitted

    def cancel_task(
        self, execution: Execution, slot: PhysicalSlot
    ) -> asyncio.Future[RpcError | None]:
        te = self.task_executors.get(slot.task_executor.resource_id)
        call = peer_calls.cancel_attempt(
            te.client if te else None,
            self.job_id,
            execution.attempt_id,
            self.settings.rpc_timeout_s,
        )
        return self.runtime.spawn(call, "cancel-task")

    # -- SlotPoolActions --------------------------------------------------------------------

    def request_slot_from_resource_manager(
        self,
        allocation_id: AllocationID,
        resource_profile: ResourceProfile,
        excluded: frozenset[ResourceID] = frozenset(),
    ) -> None:
        # Counted into the job's declared requirements (no message per request).
        self.slot_requests.request(allocation_id, resource_profile, excluded)

    def cancel_slot_request_at_resource_manager(self, allocation_id: AllocationID) -> None:
        self.slot_requests.withdraw(allocation_id)

    def free_slot_at_task_executor(
        self, task_executor: TaskExecutorInfo, allocation_id: AllocationID, cause: str
    ) -> None:
        te = self.task_executors.get(task_executor.resource_id)
        client = te.client if te else self._client_at(task_executor.address)
        call = peer_calls.free_slot(client, self.job_id, allocation_id, cause)
        self.runtime.spawn(call, "free-slot")

    def _client_at(self, address: str) -> TaskExecutorClient:
        return TaskExecutorClient(self.clients.get(address), fencing_token=self.session_id)

    def slot_lost(self, slot: PhysicalSlot, cause: BaseException) -> None:
        self.scheduler.slot_lost(slot, cause)

    # -- resource manager -------------------------------------------------------------------

    def on_resource_manager_leader(self, leader: LeaderInfo | None) -> None:
        if self.status.is_terminal or not self.session_id:
            return
        if self._rm_registration is not None:
            self._rm_registration.cancel()
        self.heartbeats.unmonitor("rm")
        self.slot_pool.disconnect_resource_manager()
        self.slot_requests.reset()
        self.rm_leader = leader
        self.rm_client = None
        if leader is None:
            return
        client = ResourceManagerClient(
            self.clients.get(leader.address), fencing_token=leader.session_id
        )
        self._rm_registration = self.runtime.spawn(self._register_at_rm(client), "jm-rm-reg")

    async def _register_at_rm(self, client: ResourceManagerClient) -> None:
        # The pool's waiting requests go to the declarer from now on. It sends nothing before
        # the registration is done: their first declaration rides on the registration itself.
        self.slot_pool.connect_to_resource_manager()
        ride = True  # until a registration carrying a declaration is refused as invalid

        async def attempt(
            timeout: float,
        ) -> tuple[resource_manager_pb2.RegisterJobMasterResponse, int]:
            """The answer, with the version of the declaration the attempt carried (0: none)."""
            nonlocal ride
            request = resource_manager_pb2.RegisterJobMasterRequest(
                job_id=self.job_id,
                job_master_address=self.host.identity.address,
                job_master_session_id=self.session_id,
                job_master_resource_id=self.host.identity.id,
            )
            declaration = self.slot_requests.declaration_for_registration() if ride else None
            if declaration is not None:
                request.declaration.CopyFrom(declaration)
            version = request.declaration.version
            try:
                return await client.register_job_master(request, timeout=timeout), version
            except BaseException as exc:
                if declaration is not None:
                    self.slot_requests.registration_answered(version, None)
                    # Register without it: declared on its own, its refusal is logged there.
                    ride = not isinstance(exc, InvalidArgumentError)
                raise

        reply, version = await retry_registration(
            f"job {short(self.job_id)}: registration at the resource manager",
            attempt,
            self.settings.registration,
        )
        self.rm_client = client
        self.heartbeats.monitor("rm")
        # An older resource manager leaves the answer unset: the declarer declares again.
        self.slot_requests.registration_answered(
            version, reply.declaration if reply.HasField("declaration") else None
        )

    def heartbeat_from_resource_manager(self, slot_wait_reason: str) -> None:
        self.heartbeats.receive_heartbeat("rm")
        self.slot_requests.wait_reason = slot_wait_reason

    def slot_allocation_failed(self, allocation_id: str, error: common_pb2.ErrorInfo) -> None:
        cause = error_from_code(error.code, error.message, error.details)
        if self.slot_pool.fail_allocation(AllocationID(allocation_id), cause):
            self.slot_requests.withdraw(AllocationID(allocation_id))
            return
        # A declared need the resource manager could not serve in time (its own request id):
        # the request that has waited longest fails with its diagnosis.
        failed = self.slot_pool.fail_oldest_request(cause)
        if failed is not None:
            self.slot_requests.withdraw(failed)

    # -- task executors ---------------------------------------------------------------------

    def register_task_executor(self, resource_id: str, address: str) -> None:
        rid = ResourceID(resource_id)
        if rid in self.task_executors:
            return
        client = self._client_at(address)
        self.task_executors[rid] = TaskExecutorConnection(rid, address, client)
        self.heartbeats.monitor(
            rid,
            lambda: self._heartbeat_task_executor(rid),
            watch=self.clients.get(address).watch_connection,
        )

    async def _heartbeat_task_executor(self, resource_id: ResourceID) -> None:
        te = self.task_executors.get(resource_id)
        if te is None:
            return
        sent_at = asyncio.get_running_loop().time()
        report = await te.client.heartbeat_from_job_master(
            task_executor_pb2.TaskExecutorJobHeartbeatRequest(
                job_id=self.job_id, sender_id=self.host.identity.id
            ),
            timeout=self.settings.heartbeat_interval_s,
        )
        if self.task_executors.get(resource_id) is te and not self.status.is_terminal:
            self._reconcile(te, report, sent_at)

    def _reconcile(
        self,
        te: TaskExecutorConnection,
        report: task_executor_pb2.AllocatedSlotReport,
        sent_at: float,
    ) -> None:
        """Heartbeat payload reconciliation (Flink's ExecutionDeploymentReconciler)."""
        to_cancel = apply_heartbeat_report(
            job_id=self.job_id,
            graph=self.graph,
            scheduler=self.scheduler,
            deployments=self.deployments,
            resource_id=te.resource_id,
            address=te.address,
            hosted=report.hosted_attempt_ids,
            heartbeat_sent_at=sent_at,
        )
        for attempt_id in to_cancel:
            self.runtime.spawn(
                peer_calls.cancel_unknown_attempt(
                    te.client, self.job_id, attempt_id, self.settings.rpc_timeout_s
                ),
                "cancel-unknown",
            )

    def offer_slots(
        self, resource_id: str, address: str, offers: list[job_master_pb2.SlotOffer]
    ) -> list[job_master_pb2.SlotOffer]:
        if self.status.is_terminal:
            return []
        self.register_task_executor(resource_id, address)
        accepted = self.slot_pool.offer_slots(
            TaskExecutorInfo(ResourceID(resource_id), address),
            [
                SlotOffer(
                    AllocationID(o.allocation_id),
                    o.slot_index,
                    profile_from_proto(o.resource_profile),
                )
                for o in offers
            ],
        )
        ids = {a.allocation_id for a in accepted}
        self.slot_requests.received([o.allocation_id for o in offers])
        return [o for o in offers if o.allocation_id in ids]

    def task_executor_lost(self, resource_id: str, cause: str) -> None:
        rid = ResourceID(resource_id)
        te = self.task_executors.pop(rid, None)
        if te is None:
            return
        self.heartbeats.unmonitor(rid)
        self.deployments.forget_task_executor(rid)
        # It may only be hung and come back: tell it to drop whatever it still runs for us
        # (best effort; its slots are written off here either way).
        self._disconnect_task_executor(te, f"the JobMaster wrote this executor off: {cause}")
        self.slot_pool.release_task_executor(
            rid, UnavailableError(f"task executor {short(rid)} is lost: {cause}")
        )
        if self.results_lost_with_executor:
            self.scheduler.results_lost_with_task_executor(rid, cause)

    def _disconnect_task_executor(self, te: TaskExecutorConnection, cause: str) -> None:
        """Tell it to let go of the job (best effort)."""
        self.runtime.spawn(
            peer_calls.disconnect_task_executor(
                te.client, te.resource_id, self.job_id, cause, self.settings.heartbeat_timeout_s
            ),
            "te-disconnect",
        )

    def _on_heartbeat_timeout(self, target: str, reason: str) -> None:
        if target == "rm":
            self.on_resource_manager_leader(self.rm_leader)
        else:
            self.task_executor_lost(target, f"heartbeat timeout: {reason}")

    def update_task_execution_states(
        self, resource_id: str, updates: list[job_master_pb2.TaskExecutionState]
    ) -> None:
        apply_task_state_updates(self.scheduler, updates)

    # -- details ----------------------------------------------------------------------------

    def details(self) -> jobs_pb2.JobDetails:
        return render_job_details(
            name=self.job_graph.name,
            status=self.status,
            submitted_at=self.submitted_at,
            ended_at=self.ended_at,
            job_master_address=self.host.identity.address,
            graph=self.graph,
            scheduler=self.scheduler,
            slot_wait_reason=self.slot_requests.wait_reason,
        )
