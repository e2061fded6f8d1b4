"""The dispatcher service: the cluster's front door (Flink's ``Dispatcher``).

While it leads, it

* accepts job submissions: decodes and validates the job graph (a clear error naming every
  problem otherwise), stores it in the submitted-job-graph store *before* acknowledging, and
  hands the job to a job-master process;
* keeps the registry of job-master processes (they register with back-off and are heartbeated);
  a job whose process is lost goes back to the queue and is started on another process;
* answers list / status / cancel / result, and keeps finished jobs' results until they expire
  (``jobstore.expiration-time``).

Job masters push every job status change (``ReportJobStatus``); live task counts are fetched
from the JobMaster on demand.

Next to it: :mod:`~sparkmill.services.dispatcher.job_placement` (the job and process records and
the placement state machine), :mod:`~sparkmill.services.dispatcher.job_master_processes` (the
heartbeated process registry), :mod:`~sparkmill.services.dispatcher.job_recovery` (taking the
jobs over on leadership) and :mod:`~sparkmill.services.dispatcher.job_views` (what is answered
about a job).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from sparkmill.common.core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    NotLeaderError,
    RpcError,
)
from sparkmill.common.core.ids import JobID, short
from sparkmill.common.core.proto_convert import error_code_to_proto, job_status_to_proto
from sparkmill.common.core.states import JobStatus
from sparkmill.common.ha.job_stores import JobGraphStore, JobResultStore, UnrecoverableJobGraph
from sparkmill.common.ha.leader import LeaderElectionService
from sparkmill.common.jobgraph.codec import job_graph_from_proto
from sparkmill.common.jobgraph.model import KNOWN_OPERATOR_KINDS
from sparkmill.common.jobgraph.validation import validate_job_graph
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.server import CallContext, MethodSpec
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.heartbeat import HeartbeatManager
from sparkmill.common.runtime.service_base import ServiceIdentity, leader_session, require_leader
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, job_master_pb2, jobs_pb2
from sparkmill.common.v1.gateways import DispatcherServicer
from sparkmill.services.dispatcher import job_listing, job_recovery
from sparkmill.services.dispatcher.attempt_logs import TaskExecutorLogs
from sparkmill.services.dispatcher.job_history import JobHistory
from sparkmill.services.dispatcher.job_master_processes import JobMasterProcesses
from sparkmill.services.dispatcher.job_placement import (
    JobMasterProcessRecord,
    JobPlacement,
    JobRecord,
    JobTable,
    can_be_released,
)
from sparkmill.services.dispatcher.job_reports import (
    HostedJobAction,
    JobLeaderLookup,
    adopt_hosted_state,
    check_replacement,
    check_reporter,
    decide_hosted_job,
    jobs_no_longer_hosted,
    stop_orphan,
)
from sparkmill.services.dispatcher.job_views import add_job_summary, job_details

log = logging.getLogger(__name__)
# The longest a GetJobResult call may wait for its job to end (its RPC deadline must be longer).
_MAX_RESULT_WAIT_MS = 60_000


class Dispatcher(DispatcherServicer):
    def __init__(
        self,
        settings: ClusterSettings,
        runtime: ServiceRuntime,
        election: LeaderElectionService,
        job_store: JobGraphStore,
        result_store: JobResultStore,
        clients: RpcClientPool,
        identity: ServiceIdentity,
        job_master_contenders: job_recovery.ContenderCount | None = None,
        job_leader: JobLeaderLookup | None = None,
        task_executor_logs: TaskExecutorLogs | None = None,
    ) -> None:
        self.settings = settings
        # Who leads a job according to the HA services (None: not known without HA).
        self._job_leader = job_leader
        # How many JobMasters contend for a job's leadership (None: cannot be known).
        self._job_master_contenders = job_master_contenders
        self.runtime = runtime
        self.election = election
        self.job_store = job_store
        self.result_store = result_store
        self.clients = clients
        self.identity = identity
        self.session_id: str | None = None
        self.jobs = JobTable()
        self.processes = JobMasterProcesses(
            settings, clients, identity.id, self._lose_process, self._check_hosted
        )
        self.submitted_total = 0
        # The job history (ended jobs, kept past jobstore.expiration-time and restarts) and the
        # task executors' attempt logs.
        self.history = JobHistory(self, settings, task_executor_logs)

    @property
    def heartbeats(self) -> HeartbeatManager:
        """The heartbeats to the registered job-master processes (their metrics)."""
        return self.processes.heartbeats

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self.heartbeats.start()
        await self.history.start()
        self.runtime.spawn(self.history.expire_periodically(), "job-expiry")
        await self.election.start(self)

    async def stop(self) -> None:
        await self.election.stop()
        await self.heartbeats.stop()
        await self.history.stop()

    async def grant_leadership(self, session_id: str) -> None:
        self.session_id = session_id
        await self._recover()
        log.info("dispatcher %s leads with session %s", short(self.identity.id), short(session_id))
        await self.election.confirm_leadership(session_id, self.identity.address)
        # Recovered jobs wait a little for their job-master processes to re-register and claim
        # them (a running JobMaster must not be started a second time).
        grace = job_recovery.recovery_grace_s(self.settings)
        asyncio.get_running_loop().call_later(grace, self._end_recovery_grace)
        if self._job_master_contenders is not None:
            release = job_recovery.release_uncontended_jobs(
                self.jobs,
                self._job_master_contenders,
                still_leading=lambda: self.session_id == session_id,
                on_released=self._schedule_waiting_jobs,
                grace_s=grace,
                poll_s=min(1.0, self.settings.heartbeat_interval_s),
            )
            self.runtime.spawn(release, "uncontended-recovered-jobs")
        self._schedule_waiting_jobs()

    async def _recover(self) -> None:
        """Rebuild the job table from the stores; a job with a result is never run again."""
        results = await self.runtime.run_blocking(self.result_store.results)
        for result, dirty in results:
            job = job_recovery.ended_job(result)
            self.jobs[job.job_id] = job
            if dirty:  # the previous leader died between recording the result and clean-up
                await self._clean_up(job.job_id)
        recovered = await self.runtime.run_blocking(self.job_store.recover)
        for lost in recovered.unrecoverable:
            await self._fail_unrecoverable(lost)
        for graph in recovered.graphs:
            job_id = JobID(graph.job_id)
            if job_id in self.jobs:
                log.info("job %s already has a result; removing its stale graph", short(job_id))
                await self._clean_up(job_id)
                continue
            self.jobs[job_id] = job_recovery.recovered_job(graph)
            log.info("recovered job %s ('%s') from the job graph store", short(job_id), graph.name)
        await self.history.recover()

    async def _fail_unrecoverable(self, lost: UnrecoverableJobGraph) -> None:
        """A stored job whose graph cannot be read back: FAILED, with the reason, for good.

        The other jobs still recover and this dispatcher still leads: one corrupt entry in the
        store must not take the cluster down with it.
        """
        job_id = JobID(lost.job_id)
        if job_id in self.jobs:  # it already has a result: only its clean-up was left
            await self._clean_up(job_id)
            return
        job, failure = job_recovery.unreadable_job(lost)
        self.jobs[job_id] = job
        log.error("job %s FAILED on recovery: %s", short(job_id), failure.message)
        await self._fail_for_good(job, failure)

    async def _fail_for_good(self, job: JobRecord, failure: common_pb2.ErrorInfo) -> None:
        """End ``job`` FAILED with ``failure`` without running it: recorded, then cleaned up."""
        job.status = JobStatus.FAILED
        job.ended_at = time.time()
        result = jobs_pb2.JobResult(
            job_id=job.job_id, status=job_status_to_proto(JobStatus.FAILED), failure=failure
        )
        result.details.CopyFrom(self._details(job))
        if job.placement is not JobPlacement.ENDED:
            job.move_to(JobPlacement.ENDED)
        await self.runtime.run_blocking(self.result_store.create_dirty, result)
        job.record_result(result)  # durable first: see _apply_report
        await self._clean_up(job.job_id)

    async def _clean_up(self, job_id: JobID) -> None:
        await self.runtime.run_blocking(self.job_store.remove, job_id)
        await self.runtime.run_blocking(self.result_store.mark_clean, job_id)
        self.history.job_ended(job_id)

    def _end_recovery_grace(self) -> None:
        job_recovery.end_recovery_grace(self.jobs.values())
        self._schedule_waiting_jobs()

    async def revoke_leadership(self) -> None:
        log.warning("dispatcher %s lost leadership", short(self.identity.id))
        self.session_id = None
        self.processes.clear()
        self.jobs.clear()
        await self.runtime.run_blocking(self.job_store.release_all)

    def expected_fencing_token(self, spec: MethodSpec, request: object) -> str:
        return require_leader(self.session_id, "dispatcher")

    # -- submission ------------------------------------------------------------------------------

    async def submit_job(
        self, request: dispatcher_pb2.SubmitJobRequest, context: CallContext
    ) -> dispatcher_pb2.SubmitJobResponse:
        graph = job_graph_from_proto(request.job_graph)
        validate_job_graph(
            graph,
            known_operator_kinds=KNOWN_OPERATOR_KINDS,
            limits=self.settings.job_graph_limits,
            forbidden_sink_dirs=self.settings.protected_dirs,
        )
        job_id = graph.job_id
        existing = self.jobs.get(job_id)
        if existing is not None:
            raise AlreadyExistsError(
                f"job {job_id} ('{existing.name}') was already submitted and is "
                f"{existing.status.name}; submit it with a new job id"
            )
        started = time.monotonic()
        # Persist before acknowledging: once the client hears "submitted", no leader change
        # may lose the job. The write is fenced by this leadership: a dispatcher that was
        # paused or cut off may still be answering after a successor recovered the store, and
        # a graph it stored then would be known to no leader.
        session = require_leader(self.session_id, "dispatcher")
        fence = self.election.leadership_fence(session)
        await self.runtime.run_blocking(self.job_store.put, request.job_graph, fence)
        if self.session_id != session:
            # Stored while this dispatcher still led: the next leader recovers it, and the
            # client's retry there is told the job exists.
            raise NotLeaderError("this dispatcher lost its leadership while storing the job")
        self.jobs[job_id] = JobRecord(job_id, graph.name, request.job_graph, time.time())
        self.submitted_total += 1
        log.info(
            "job %s ('%s') submitted: %d vertices, %d subtasks + %d vertices to decide "
            "(stored in %.1f ms)",
            short(job_id),
            graph.name,
            len(graph.vertices),
            sum(max(0, v.parallelism) for v in graph.vertices),
            sum(1 for v in graph.vertices if v.is_auto),
            (time.monotonic() - started) * 1000,
        )
        self._schedule_waiting_jobs()
        return dispatcher_pb2.SubmitJobResponse(job_id=job_id)

    def _schedule_waiting_jobs(self) -> None:
        if self.session_id is None:
            return
        for job in self.jobs.waiting():
            process = self.processes.least_loaded()
            if process is None:
                log.info("job %s waits for a job-master process to register", short(job.job_id))
                return
            job.move_to(JobPlacement.STARTING)
            job.process_id = process.process_id
            process.jobs.add(job.job_id)
            self.runtime.spawn(self._start_job(job, process), "start-job")

    def _assign(self, job: JobRecord, process_id: str, address: str) -> None:
        old = self.processes.get(job.process_id)
        if old is not None and old.process_id != process_id:
            old.jobs.discard(job.job_id)
        job.process_id = process_id
        job.address = address
        job.move_to(JobPlacement.ASSIGNED)
        new = self.processes.get(process_id)
        if new is not None:
            new.jobs.add(job.job_id)

    async def _start_job(self, job: JobRecord, process: JobMasterProcessRecord) -> None:
        try:
            reply = await process.client.start_job(
                job_master_pb2.StartJobRequest(
                    job_graph=job.graph,
                    dispatcher_address=self.identity.address,
                    submitted_at=job.submitted_at,
                ),
                fencing_token=self.session_id or "",
            )
        except RpcError as exc:
            if isinstance(exc, AlreadyExistsError) and job.process_id == process.process_id:
                # It runs there already (a start retried after a lost answer): placed there.
                # Its reports will come, and that process's heartbeats say if it stops.
                log.info(
                    "job %s runs on process %s already", short(job.job_id), short(job.process_id)
                )
                if job.placement is JobPlacement.STARTING:
                    self._assign(job, process.process_id, process.address)
                return
            log.warning(
                "could not start job %s on job-master process %s: %s",
                short(job.job_id),
                short(process.process_id),
                exc,
            )
            process.jobs.discard(job.job_id)
            job.process_id = ""
            if isinstance(exc, InvalidArgumentError) and not job.terminal:
                # The JobMaster refused the graph or its configuration: no retry can help.
                await self._refuse_job(job, exc)
                return
            if can_be_released(job.placement):
                job.move_to(JobPlacement.WAITING)
            self.runtime.spawn(self._retry_scheduling_later(), "reschedule")
            return
        if job.placement is JobPlacement.STARTING:
            job.move_to(JobPlacement.ASSIGNED)
        if self.jobs.get(job.job_id) is not job:
            return
        # Empty while the JobMaster waits as a standby in the job's election; its first status
        # report, once it leads, brings the session id.
        job.session_id = reply.job_master_session_id or job.session_id
        job.address = reply.job_master_address
        log.info(
            "job %s runs on job-master process %s (JobMaster session %s)",
            short(job.job_id),
            short(process.process_id),
            short(job.session_id),
        )

    async def _refuse_job(self, job: JobRecord, exc: InvalidArgumentError) -> None:
        log.error("job %s FAILED: the JobMaster refused to start it: %s", short(job.job_id), exc)
        failure = common_pb2.ErrorInfo(
            code=error_code_to_proto(exc.code),
            message=f"the JobMaster refused to start the job: {exc.message}",
            exception_type=type(exc).__name__,
        )
        await self._fail_for_good(job, failure)

    async def _retry_scheduling_later(self) -> None:
        await asyncio.sleep(1.0)
        self._schedule_waiting_jobs()

    # -- reports from job masters ----------------------------------------------------------------

    async def report_job_status(
        self, request: dispatcher_pb2.JobStatusReport, context: CallContext
    ) -> common_pb2.Empty:
        job = self.jobs.get(JobID(request.job_id))
        if job is None:
            raise NotFoundError(f"job {short(request.job_id)} is unknown to this dispatcher")
        # One report of a job at a time, in arrival order: the check below may wait for
        # ZooKeeper, and a CREATED report finishing its wait after the RUNNING report that
        # followed it would leave the job CREATED until it ends.
        async with job.reports:
            await self._apply_report(job, request, context)
        return common_pb2.Empty()

    async def _apply_report(
        self, job: JobRecord, request: dispatcher_pb2.JobStatusReport, context: CallContext
    ) -> None:
        if job.result is not None:
            return  # a late or repeated report; the result is final
        await check_reporter(job, request, context, self.processes, self._job_leader)
        job.session_id = request.job_master_session_id
        if request.job_master_process_id:
            self._assign(job, request.job_master_process_id, request.job_master_address)
        job.status = JobStatus(request.status)
        job.details = request.details
        if job.status is JobStatus.SUSPENDED:
            # Its JobMaster lost leadership (its process lives on): start the job again.
            log.warning(
                "job %s: its JobMaster on %s was suspended; starting the job again",
                short(job.job_id),
                request.job_master_address or "?",
            )
            process = self.processes.get(job.process_id)
            if process is not None:
                process.jobs.discard(job.job_id)
            job.process_id = ""
            job.session_id = ""
            if can_be_released(job.placement):
                job.move_to(JobPlacement.WAITING)
            job.status = JobStatus.INITIALIZING
            self._schedule_waiting_jobs()
            return
        if job.status.is_globally_terminal:
            job.ended_at = time.time()
            result = jobs_pb2.JobResult()
            result.CopyFrom(request.result)
            result.details.CopyFrom(self._details(job))
            job.move_to(JobPlacement.ENDED)
            process = self.processes.get(job.process_id)
            if process is not None:
                process.jobs.discard(job.job_id)
            # Record the outcome before the graph goes: a new leader must never run it again.
            # And before anyone hears of it: a client told the job ended must not see a leader
            # that was killed a moment later be followed by one that runs the job again.
            await self.runtime.run_blocking(self.result_store.create_dirty, result)
            job.record_result(result)
            await self._clean_up(job.job_id)
            log.info("job %s ('%s') ended %s", short(job.job_id), job.name, job.status.name)

    # -- job-master processes --------------------------------------------------------------------

    async def register_job_master_process(
        self, request: dispatcher_pb2.RegisterJobMasterProcessRequest, context: CallContext
    ) -> dispatcher_pb2.RegisterJobMasterProcessResponse:
        previous = self.processes.get(request.process_id)
        kept: set[JobID] = set()
        if previous is not None:
            check_replacement(previous, context)
            # The same process again (it stopped hearing us, or a registration queued while it
            # was cut off): the jobs it hosts are decided below, not started elsewhere at once.
            self.processes.remove(request.process_id)
            kept = previous.jobs & {JobID(hosted.job_id) for hosted in request.jobs}
            for job_id in previous.jobs - kept:
                if job_id in self.jobs:
                    self._orphan(self.jobs[job_id])
        process = self.processes.add(
            request.process_id, request.address, request.info, peer=context.peer
        )
        process.jobs |= kept
        for hosted in request.jobs:
            job = self.jobs.get(JobID(hosted.job_id))
            action, why = await decide_hosted_job(job, hosted, self._job_leader)
            if job is None or action is HostedJobAction.LEAVE:
                log.info(
                    "job %s in job-master process %s not adopted: %s",
                    short(hosted.job_id),
                    short(request.process_id),
                    why,
                )
                if job is not None and job.process_id == process.process_id:
                    self._orphan(job)
            elif action is HostedJobAction.STOP:
                # That JobMaster must stop and free its slots.
                self.runtime.spawn(
                    stop_orphan(process, job.job_id, hosted.job_master_session_id),
                    "stop-orphan",
                )
            else:
                # It survived our leader change: adopt it instead of starting it again.
                adopt_hosted_state(job, hosted)
                self._assign(job, process.process_id, process.address)
                log.info(
                    "job %s is led by job-master process %s; adopted",
                    short(job.job_id),
                    short(process.process_id),
                )
        log.info(
            "job-master process %s registered from %s", short(request.process_id), request.address
        )
        self._schedule_waiting_jobs()
        return dispatcher_pb2.RegisterJobMasterProcessResponse(dispatcher_id=self.identity.id)

    def _lose_process(self, process_id: str, reason: str) -> None:
        process = self.processes.remove(process_id)
        if process is None:
            return
        orphans = [self.jobs[j] for j in process.jobs if j in self.jobs]
        log.warning(
            "job-master process %s lost (%s); %d jobs will start elsewhere",
            short(process_id),
            reason,
            len(orphans),
        )
        for job in orphans:
            self._orphan(job)
        self._schedule_waiting_jobs()

    def _check_hosted(
        self, process_id: str, hosted: job_master_pb2.HostedJobs, asked_at: float
    ) -> None:
        """A heartbeat's reply: a job placed on the process that it no longer runs starts
        again, instead of waiting for a report that will not come (the process lives on)."""
        process = self.processes.get(process_id)
        if process is None or self.session_id is None:
            return
        lost = jobs_no_longer_hosted(process, self.jobs, hosted, asked_at)
        for job in lost:
            self._orphan(job)
        if lost:
            self._schedule_waiting_jobs()

    def _orphan(self, job: JobRecord) -> None:
        """``job`` lost its job-master process: it waits to start elsewhere."""
        process = self.processes.get(job.process_id)
        if process is not None:
            process.jobs.discard(job.job_id)
        job.lose_process()

    # -- queries and control ---------------------------------------------------------------------

    def _job(self, job_id: str) -> JobRecord:
        job = self.jobs.get(JobID(job_id))
        if job is None:
            raise NotFoundError(f"no job {job_id} ({self.history.retention_note()})")
        return job

    async def list_jobs(
        self, request: dispatcher_pb2.ListJobsRequest, context: CallContext
    ) -> dispatcher_pb2.ListJobsResponse:
        size = job_listing.page_size(request.page_size)
        page, next_token = job_listing.select_page(self.jobs.values(), size, request.page_token)
        reply = dispatcher_pb2.ListJobsResponse(next_page_token=next_token)
        for job in page:
            add_job_summary(reply, job)
        return reply

    async def get_job_status(
        self, request: dispatcher_pb2.GetJobStatusRequest, context: CallContext
    ) -> jobs_pb2.JobDetails:
        job = self._job(request.job_id)
        process = self.processes.get(job.process_id)
        if not job.terminal and job.session_id and process is not None:
            try:
                details = await process.client.get_job_details(
                    job_master_pb2.GetJobDetailsRequest(job_id=job.job_id),
                    fencing_token=job.session_id,
                    timeout=5.0,
                )
                job.details = details
            except RpcError as exc:
                log.debug("live details of %s unavailable: %s", short(job.job_id), exc)
        return self._details(job)

    def _details(self, job: JobRecord) -> jobs_pb2.JobDetails:
        return job_details(job, self.processes.get(job.process_id))

    def job_graph(self, job_id: str) -> common_pb2.JobGraph:
        """The submitted graph (for the REST API's plan; only the id after a leader change
        recovered a finished job from its result)."""
        return self._job(job_id).graph

    async def cancel_job(
        self, request: dispatcher_pb2.CancelJobRequest, context: CallContext
    ) -> common_pb2.Empty:
        job = self._job(request.job_id)
        if job.terminal:
            raise FailedPreconditionError(
                f"job {short(job.job_id)} already ended {job.status.name}; nothing to cancel"
            )
        process = self.processes.get(job.process_id)
        if job.session_id and process is not None:
            await process.client.cancel_job(
                job_master_pb2.JobMasterCancelJobRequest(job_id=job.job_id),
                fencing_token=job.session_id,
            )
        else:
            # Not running anywhere yet: cancelling is just recording the outcome.
            job.status = JobStatus.CANCELED
            job.ended_at = time.time()
            canceled = jobs_pb2.JobResult(
                job_id=job.job_id, status=job_status_to_proto(JobStatus.CANCELED)
            )
            canceled.details.CopyFrom(self._details(job))
            await self.runtime.run_blocking(self.result_store.create_dirty, canceled)
            job.record_result(canceled)  # durable first: see _apply_report
            await self._clean_up(job.job_id)
        return common_pb2.Empty()

    async def get_job_result(
        self, request: dispatcher_pb2.GetJobResultRequest, context: CallContext
    ) -> jobs_pb2.JobResult:
        job = self._job(request.job_id)
        if request.wait_ms and job.result is None:
            # A long poll: answered the moment the job ends (no polling interval in the
            # latency of a short job), or when the wait is over.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(request.wait_ms, _MAX_RESULT_WAIT_MS) / 1000):
                    await job.ended.wait()
        if not job.terminal or job.result is None:
            raise FailedPreconditionError(
                f"job {short(job.job_id)} is {job.status.name}; its result is not ready"
            )
        result = jobs_pb2.JobResult()
        result.CopyFrom(job.result)
        result.details.CopyFrom(self._details(job))
        return result

    async def get_cluster_services(
        self, request: dispatcher_pb2.GetClusterServicesRequest, context: CallContext
    ) -> dispatcher_pb2.ClusterServices:
        return dispatcher_pb2.ClusterServices(
            dispatcher=self.identity.info(is_leader=True),
            job_master_processes=[p.info for p in self.processes],
        )

    async def get_service_info(
        self, request: common_pb2.GetServiceInfoRequest, context: CallContext
    ) -> common_pb2.ServiceInfo:
        return self.identity.info(is_leader=self.session_id is not None)

    async def list_attempt_logs(
        self, request: jobs_pb2.ListAttemptLogsRequest, context: CallContext
    ) -> jobs_pb2.AttemptLogIndex:
        return await self.history.attempt_logs(self._job(request.job_id).job_id)

    async def get_attempt_log(
        self, request: jobs_pb2.GetAttemptLogRequest, context: CallContext
    ) -> jobs_pb2.AttemptLogChunk:
        self._job(request.job_id)
        return await self.history.attempt_log(request)

    async def get_leader_session(
        self, request: common_pb2.GetLeaderSessionRequest, context: CallContext
    ) -> common_pb2.LeaderSession:
        return leader_session(self.session_id, "dispatcher", self.identity.address)
