"""The task executor service: a worker with a fixed number of slots (Flink's ``TaskExecutor``).

It registers at the resource manager leader (retrying with back-off, again whenever the leader
changes or stops heartbeating), reports its slots, and then follows Flink's slot protocol:

1. the RM asks for a slot (``RequestSlot``) → the TaskSlotTable allocates it (inactive);
2. the task executor connects to the job's JobMaster and *offers* its allocated slots
   (batched per job) → accepted slots become ACTIVE, rejected ones are freed;
3. the JobMaster deploys tasks (``SubmitTask``) into active slots; each task runs on its own
   thread and every state change is reported back, batched per job;
4. ``FreeSlot`` / heartbeat loss / disconnect free slots; the RM is told.

Fencing: RM-originated calls must carry the session id of the RM this executor is registered
with; JobMaster-originated calls the session id of that job's JobMaster.
"""

from __future__ import annotations

import asyncio
import logging

from sparkmill.common.core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    FencingMismatchError,
    IllegalStateBug,
    InvalidArgumentError,
    NotFoundError,
    RpcError,
)
from sparkmill.common.core.ids import AllocationID, ExecutionAttemptID, JobID, ResourceID, short
from sparkmill.common.core.partitions import InputGateInfo
from sparkmill.common.core.proto_convert import (
    profile_from_proto,
    profile_to_proto,
    refusal_to_proto,
    slot_report_to_proto,
    slot_status_to_proto,
)
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.slots import SlotStatus
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.deployment.descriptor import SharedGateKey, shared_gate_keys
from sparkmill.common.deployment.state_update import TaskFailure, TaskStateUpdate
from sparkmill.common.ha.job_leaders import JobLeaderRetrievalFactory, JobLeaderTracker
from sparkmill.common.ha.leader import LeaderInfo, LeaderRetrievalService
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.server import CallContext, MethodSpec
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.heartbeat import HeartbeatManager
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.runtime.timers import AsyncioTimerService
from sparkmill.common.v1 import (
    common_pb2,
    job_master_pb2,
    jobs_pb2,
    resource_manager_pb2,
    task_executor_pb2,
)
from sparkmill.common.v1.gateways import (
    JobMasterClient,
    TaskExecutorServicer,
)
from sparkmill.services.taskexecutor.attempt_log_service import (
    get_attempt_log,
    list_attempt_logs,
    start_attempt_logs,
)
from sparkmill.services.taskexecutor.context import TaskOutcome
from sparkmill.services.taskexecutor.job_connection import JobConnection, job_id_of, offer_slots
from sparkmill.services.taskexecutor.operators import OPERATOR_KINDS, invokable_factory
from sparkmill.services.taskexecutor.resource_manager_link import (
    HEARTBEAT_TARGET as RM_HEARTBEAT_TARGET,
)
from sparkmill.services.taskexecutor.resource_manager_link import ResourceManagerLink
from sparkmill.services.taskexecutor.shared_gates import Resolved, SharedGateCache
from sparkmill.services.taskexecutor.slot_table import TaskSlotTable
from sparkmill.services.taskexecutor.table_actions import TableActions
from sparkmill.services.taskexecutor.task import LoopMailbox, StateListener, Task
from sparkmill.services.taskexecutor.task_services import (
    close_task_services,
    install_task_services,
    spark_ui_url,
)

log = logging.getLogger(__name__)

_RM_METHODS = frozenset(
    {"RequestSlot", "HeartbeatFromResourceManager", "DisconnectResourceManager"}
)
# What the resource manager leader may already ask while this task executor's registration
# with it is under way (see ResourceManagerLink.session_id); a disconnect waits for its end.
_RM_METHODS_WHILE_REGISTERING = frozenset({"RequestSlot", "HeartbeatFromResourceManager"})


class TaskExecutor(TaskExecutorServicer):
    def __init__(
        self,
        settings: ClusterSettings,
        runtime: ServiceRuntime,
        rm_retrieval: LeaderRetrievalService,
        clients: RpcClientPool,
        identity: ServiceIdentity,
        job_leader_retrieval: JobLeaderRetrievalFactory | None = None,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.rm_retrieval = rm_retrieval
        # A job's connection goes only to the JobMaster its job's leader retrieval names (Flink's
        # JobLeaderService); without HA the resource manager's word is all there is.
        self.job_leaders = JobLeaderTracker(job_leader_retrieval, self._on_job_leader_change)
        self.clients = clients
        self.identity = identity
        self.resource_id = ResourceID(identity.id)
        slots = settings.number_of_slots
        cores = settings.task_executor_cpu_cores or float(slots)
        self.total_resources = ResourceProfile(cores, settings.task_executor_memory_mb)
        self.default_slot_profile = ResourceProfile(
            cores / slots, settings.task_executor_memory_mb // slots
        )
        self.slot_table: TaskSlotTable[Task] | None = None
        self.jobs: dict[JobID, JobConnection] = {}
        self.tasks_started = 0
        self._mailbox: LoopMailbox | None = None
        self.shared_gates = SharedGateCache()
        # Process-wide facilities tasks may use (the data plane adds its SparkSession here).
        self.task_services: dict[str, object] = {}
        self.task_state_listener: StateListener | None = None  # set by the metrics
        self.heartbeats = HeartbeatManager(
            "te",
            interval_s=settings.heartbeat_interval_s,
            timeout_s=settings.heartbeat_timeout_s,
            rpc_failure_threshold=0,  # the receiving side has no RPCs to count
            on_timeout=self._on_heartbeat_timeout,
        )
        self.rm_link = ResourceManagerLink(
            settings=settings,
            runtime=runtime,
            clients=clients,
            heartbeats=self.heartbeats,
            resource_id=self.resource_id,
            registration_request=self._registration_request,
            slot_report=self._slot_report,
        )

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        timers = AsyncioTimerService()
        self.slot_table = TaskSlotTable(
            self.settings.number_of_slots, self.total_resources, self.default_slot_profile, timers
        )
        self.slot_table.start(TableActions(self))
        install_task_services(self.task_services, self.settings, self.runtime)
        start_attempt_logs(self.task_services, self.settings, self.resource_id, self.runtime)
        self.heartbeats.start()
        self.rm_link.start()
        await self.rm_retrieval.start(self.rm_link.on_leader)

    async def stop(self) -> None:
        await self.rm_retrieval.stop()
        await self._close_slot_table()
        await self.job_leaders.close()
        for job_id in list(self.jobs):
            self._drop_job_connection(job_id)
        await self.rm_link.close()
        await self.heartbeats.stop()
        await close_task_services(self.task_services, self.runtime)

    async def _close_slot_table(self) -> None:
        """Cancel every task and wait (bounded by task.cancellation.timeout) until each has
        ended and reported its final state, as Flink's TaskExecutor waits for its slot table."""
        table = self._table()
        closed = asyncio.Event()
        table.close(FailedPreconditionError("the task executor is shutting down"))
        table.when_closed(closed.set)
        timeout = self.settings.task_cancellation_timeout_s
        try:
            async with asyncio.timeout(timeout):
                await closed.wait()
        except TimeoutError:
            lingering = table.force_close()
            log.error(
                "%d task(s) did not end within task.cancellation.timeout (%g s): %s",
                len(lingering),
                timeout,
                ", ".join(task.name for task in lingering),
            )

    def _table(self) -> TaskSlotTable[Task]:
        assert self.slot_table is not None, "task executor not started"
        return self.slot_table

    def expected_fencing_token(self, spec: MethodSpec, request: object) -> str:
        if spec.name in _RM_METHODS:
            return self.rm_link.session_id(registering=spec.name in _RM_METHODS_WHILE_REGISTERING)
        job_id = job_id_of(request)
        connection = self.jobs.get(job_id)
        if connection is None:
            raise NotFoundError(f"this task executor has no connection to job {short(job_id)}")
        return connection.session_id

    # -- resource manager connection -------------------------------------------------------------

    def _registration_request(self) -> resource_manager_pb2.RegisterTaskExecutorRequest:
        return resource_manager_pb2.RegisterTaskExecutorRequest(
            resource_id=self.resource_id,
            address=self.identity.address,
            total_resources=profile_to_proto(self.total_resources),
            default_slot_profile=profile_to_proto(self.default_slot_profile),
            number_slots=self.settings.number_of_slots,
            info=self.identity.info(spark_ui_url=spark_ui_url(self.task_services)),
        )

    def _slot_report(self) -> common_pb2.SlotReport:
        report = slot_report_to_proto(
            self.resource_id, self._table().create_slot_report(self.resource_id)
        )
        report.spark_ui_url = spark_ui_url(self.task_services)
        # The resource manager keeps an idle task executor that still holds results a
        # connected job may read (it asks here, as Flink's asks TaskExecutor.canBeReleased).
        report.holds_result_partitions = any(c.holds_results() for c in self.jobs.values())
        return report

    async def heartbeat_from_resource_manager(
        self, request: common_pb2.HeartbeatRequest, context: CallContext
    ) -> common_pb2.SlotReport:
        self.heartbeats.receive_heartbeat(RM_HEARTBEAT_TARGET)
        return self._slot_report()

    async def disconnect_resource_manager(
        self,
        request: task_executor_pb2.TaskExecutorDisconnectResourceManagerRequest,
        context: CallContext,
    ) -> common_pb2.Empty:
        self.rm_link.reconnect(f"the resource manager disconnected us: {request.cause}")
        return common_pb2.Empty()

    # -- slots -------------------------------------------------------------------------------

    async def request_slot(
        self, request: task_executor_pb2.TaskExecutorRequestSlotRequest, context: CallContext
    ) -> common_pb2.Empty:
        job_id = JobID(request.job_id)
        await self._verify_job_leader(job_id, request.job_master_session_id)
        table = self._table()
        allocation_id = AllocationID(request.allocation_id)
        index = request.slot_index if request.slot_index >= 0 else None
        if index is not None and index >= table.number_slots:
            raise InvalidArgumentError(
                f"slot index {index} does not exist (this executor has {table.number_slots})"
            )
        previous = self.jobs.get(job_id)
        if previous is not None and previous.session_id != request.job_master_session_id:
            # A new JobMaster leads the job (verified above): what the old one had here is void.
            # Closed before the new slot is allocated: closing frees every slot of the job.
            self._close_job(job_id, "a new JobMaster took over the job")
        allocated = table.allocate_slot(
            index,
            job_id,
            allocation_id,
            profile_from_proto(request.resource_profile),
            self.settings.slot_timeout_s,
        )
        if not allocated:
            holder = table.current_allocation(index) if index is not None else None
            if holder is not None and holder != allocation_id:
                raise AlreadyExistsError(
                    f"slot {index} is already allocated to {short(holder)}, "
                    f"cannot allocate it to {short(allocation_id)}"
                )
            raise FailedPreconditionError(
                f"cannot allocate slot {request.slot_index} for {short(allocation_id)}: "
                f"not enough resources left ({table.available_resources})"
            )
        connection = self._job_connection(
            job_id, request.job_master_address, request.job_master_session_id
        )
        connection.pending_offers.add(allocation_id)
        if connection.offer_task is None or connection.offer_task.done():
            connection.offer_task = self.runtime.spawn(self._offer_slots(connection), "offer")
        return common_pb2.Empty()

    async def _verify_job_leader(self, job_id: JobID, session_id: str) -> None:
        """Refuse a JobMaster session that does not lead its job (when HA can tell)."""
        connection = self.jobs.get(job_id)
        if connection is not None and connection.session_id == session_id:
            return  # this connection was verified when it was made
        leads = await self.job_leaders.verify(job_id, session_id, self.settings.rpc_timeout_s / 2)
        if leads is False:
            raise FencingMismatchError(
                f"JobMaster session {short(session_id)} does not lead job {short(job_id)}: "
                "slot request refused"
            )

    def _on_job_leader_change(self, job_id: JobID, leader: LeaderInfo | None) -> None:
        connection = self.jobs.get(job_id)
        if (
            connection is not None
            and leader is not None
            and leader.session_id != connection.session_id
        ):
            self._close_job(job_id, "the JobMaster lost its job's leadership")

    def _job_connection(self, job_id: JobID, address: str, session_id: str) -> JobConnection:
        """The job's connection to the JobMaster of ``session_id``, made if there is none
        (``request_slot`` has closed one to an earlier JobMaster already)."""
        connection = self.jobs.get(job_id)
        if connection is not None and connection.session_id != session_id:
            raise IllegalStateBug(
                f"job {short(job_id)} still has a connection to JobMaster session "
                f"{short(connection.session_id)}, not {short(session_id)}"
            )
        if connection is None:
            client = JobMasterClient(self.clients.get(address), fencing_token=session_id)
            connection = JobConnection(job_id, address, session_id, client)
            self.jobs[job_id] = connection
            self.heartbeats.monitor(job_id)
        return connection

    async def _offer_slots(self, connection: JobConnection) -> None:
        await offer_slots(
            connection,
            self._table(),
            self.resource_id,
            self.identity.address,
            is_current=lambda: self.jobs.get(connection.job_id) is connection,
            free_slot=self._free_slot,
        )

    async def free_slot(
        self, request: task_executor_pb2.FreeSlotRequest, context: CallContext
    ) -> common_pb2.Empty:
        self._free_slot(
            AllocationID(request.allocation_id), request.cause or "the JobMaster freed the slot"
        )
        return common_pb2.Empty()

    def _free_slot(self, allocation_id: AllocationID, cause: str) -> None:
        table = self._table()
        info = table.slot_info(allocation_id)
        if info is None:
            return
        index = table.free_slot(allocation_id, FailedPreconditionError(cause))
        if index >= 0 or info.is_dynamic:
            self._slot_gone(info.job_id, info.index if index >= 0 else -1, allocation_id)

    def _slot_gone(self, job_id: JobID, index: int, allocation_id: AllocationID) -> None:
        self.rm_link.notify_slot_free(index, allocation_id)
        connection = self.jobs.get(job_id)
        # Nothing of the job is left here: drop the JobMaster connection (Flink's TaskExecutor
        # does the same once it has neither slots nor partitions of the job), after the last
        # state updates went out.
        if (
            connection is not None
            and self._holds_nothing_of(connection)
            and not connection.updates
            and (connection.flush_task is None or connection.flush_task.done())
        ):
            self._drop_job_connection(job_id)

    def _holds_nothing_of(self, connection: JobConnection) -> bool:
        return not connection.holds_results() and not self._table().allocation_ids_of_job(
            connection.job_id
        )

    # SlotActions (called by the TaskSlotTable through TableActions) ----------------------------

    def timeout_slot_action(self, allocation_id: AllocationID, ticket: object) -> None:
        if self._table().is_valid_timeout(allocation_id, ticket):
            self._free_slot(
                allocation_id,
                "the slot was not activated within "
                f"taskmanager.slot.timeout ({self.settings.slot_timeout_s:g}s)",
            )

    def free_slot_action(self, allocation_id: AllocationID) -> None:
        self._free_slot(allocation_id, "its last task ended while it was being released")

    # -- tasks -----------------------------------------------------------------------------------

    async def submit_task(
        self, request: task_executor_pb2.SubmitTaskRequest, context: CallContext
    ) -> common_pb2.Empty:
        tdd = request.tdd
        shared = await self._fetch_shared_gates(JobID(tdd.job_id), [tdd])
        self._deploy(tdd, shared)
        return common_pb2.Empty()

    async def submit_tasks(
        self, request: task_executor_pb2.SubmitTasksRequest, context: CallContext
    ) -> task_executor_pb2.SubmitTasksResponse:
        reply = task_executor_pb2.SubmitTasksResponse()
        tdds = [one.tdd for one in request.tasks]
        # One batch is one job's (see job_id_of); every gate it refers to is fetched once.
        shared = await self._fetch_shared_gates(JobID(tdds[0].job_id), tdds) if tdds else {}
        for tdd in tdds:
            try:
                self._deploy(tdd, shared)
            except RpcError as exc:
                reply.refused.add(attempt_id=tdd.attempt_id, error=refusal_to_proto(exc))
        return reply

    async def _fetch_shared_gates(
        self, job_id: JobID, tdds: list[task_executor_pb2.TaskDeploymentDescriptor]
    ) -> Resolved:
        """The offloaded input gates ``tdds`` refer to, from the cache or their JobMaster."""
        keys = [key for tdd in tdds for key in shared_gate_keys(tdd)]
        if not keys:
            return {}
        connection = self.jobs.get(job_id)
        if connection is None:  # fencing found it; only a disconnect in between gets here
            raise FailedPreconditionError(f"job {short(job_id)} left this task executor")
        client = connection.client

        async def fetch(key: SharedGateKey) -> task_executor_pb2.InputGate:
            return await client.get_input_gate(
                job_master_pb2.GetInputGateRequest(
                    job_id=job_id, shared_gate_id=key[0], generation=key[1]
                ),
                # Within the JobMaster's deadline for the deployment waiting for it (its
                # SubmitTasks), leaving time to answer that.
                timeout=self.settings.rpc_timeout_s * 0.75,
            )

        return await self.shared_gates.resolve(job_id, keys, fetch)

    def _deploy(self, tdd: task_executor_pb2.TaskDeploymentDescriptor, shared: Resolved) -> None:
        factory = invokable_factory(tdd.operator.kind, self.task_services)
        if factory is None:
            raise InvalidArgumentError(
                f"unknown operator kind {tdd.operator.kind!r} for task {tdd.vertex_name} "
                f"(known: {sorted(OPERATOR_KINDS)})"
            )
        gates: dict[SharedGateKey, InputGateInfo] = {}
        for key in shared_gate_keys(tdd):
            gate = shared[key]
            if isinstance(gate, RpcError):
                raise gate
            gates[key] = gate
        # The deployment may overtake the reply to our slot offer: the JobMaster (fenced above)
        # evidently accepted the slot, so activate it for this job (Flink does the same).
        self._table().try_mark_slot_active(JobID(tdd.job_id), AllocationID(tdd.allocation_id))
        loop = asyncio.get_running_loop()
        self._mailbox = self._mailbox or LoopMailbox(loop)  # one for all tasks: batched wakeups
        task = Task(tdd, factory, self._on_task_state, loop, gates, self._mailbox)
        task.context.resource_id = self.resource_id
        task.context.allocation_id = tdd.allocation_id
        slot = self._table().slot_info(AllocationID(tdd.allocation_id))
        task.context.slot_index = slot.index if slot is not None else None
        task.context.exchange_dir = self.settings.exchange_dir
        task.context.protected_dirs = self.settings.protected_dirs
        task.context.services = self.task_services
        # Raises SlotNotFoundError / SlotNotActiveError: a task is never run in a slot that is
        # missing, inactive or another job's (Flink's TaskSlotTable#addTask contract).
        if not self._table().add_task(task):
            raise AlreadyExistsError(f"task attempt {short(tdd.attempt_id)} is already deployed")
        self.tasks_started += 1
        task.start()

    async def cancel_task(
        self, request: task_executor_pb2.CancelTaskRequest, context: CallContext
    ) -> common_pb2.Empty:
        task = self._table().get_task(ExecutionAttemptID(request.attempt_id))
        if task is None:
            raise NotFoundError(f"no task attempt {short(request.attempt_id)} runs here")
        task.cancel()
        return common_pb2.Empty()

    def _on_task_state(
        self,
        task: Task,
        state: ExecutionState,
        failure: TaskFailure | None,
        outcome: TaskOutcome | None,
    ) -> None:
        if self.task_state_listener is not None:
            self.task_state_listener(task, state, failure, outcome)
        update = TaskStateUpdate(
            attempt_id=task.attempt_id,
            state=state,
            failure=failure,
            io=outcome.io if outcome is not None else None,
            accumulator=outcome.accumulator if outcome is not None else b"",
            written=outcome.written if outcome is not None else (),
        ).to_proto()
        if state.is_terminal:
            self._table().remove_task(task.attempt_id)
        connection = self.jobs.get(task.job_id)
        if connection is None:
            return  # the job was disconnected; its JobMaster has written the task off
        if state is ExecutionState.FINISHED and task.context.produced_dataset_ids:
            connection.result_partitions.add(update.attempt_id)
        connection.queue_update(update, final=state.is_terminal)
        if state.is_terminal:
            connection.unacknowledged.add(update.attempt_id)
        if connection.flush_task is None or connection.flush_task.done():
            connection.flush_task = self.runtime.spawn(self._flush_updates(connection), "flush")

    async def _flush_updates(self, connection: JobConnection) -> None:
        await connection.batching_window()  # coalesce the transitions of many tasks
        delay = 0.1
        while connection.updates and self.jobs.get(connection.job_id) is connection:
            batch = connection.take_updates()
            try:
                await connection.client.update_task_execution_state(
                    job_master_pb2.UpdateTaskExecutionStateRequest(
                        job_id=connection.job_id, resource_id=self.resource_id, updates=batch
                    )
                )
            except RpcError as exc:
                if isinstance(exc, NotFoundError | FailedPreconditionError):
                    log.info("JobMaster of %s refused updates: %s", short(connection.job_id), exc)
                    connection.unacknowledged.difference_update(u.attempt_id for u in batch)
                    break
                if isinstance(exc, InvalidArgumentError):
                    # Sending the same batch again cannot help: its updates are written off, and
                    # heartbeat reconciliation tells the JobMaster what became of the attempts.
                    log.error(
                        "BUG: JobMaster of %s refused updates: %s", short(connection.job_id), exc
                    )
                    connection.unacknowledged.difference_update(u.attempt_id for u in batch)
                    continue
                log.info("state updates to %s failed (%s); retrying", short(connection.job_id), exc)
                connection.requeue_updates(batch)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            else:
                connection.unacknowledged.difference_update(u.attempt_id for u in batch)
        if self.jobs.get(connection.job_id) is connection and self._holds_nothing_of(connection):
            self._drop_job_connection(connection.job_id)

    # -- job masters -----------------------------------------------------------------------------

    async def heartbeat_from_job_master(
        self, request: task_executor_pb2.TaskExecutorJobHeartbeatRequest, context: CallContext
    ) -> task_executor_pb2.AllocatedSlotReport:
        job_id = JobID(request.job_id)
        self.heartbeats.receive_heartbeat(job_id)
        report = task_executor_pb2.AllocatedSlotReport(resource_id=self.resource_id)
        hosted: set[str] = {task.attempt_id for task in self._table().tasks_of_job(job_id)}
        connection = self.jobs.get(job_id)
        if connection is not None:
            hosted |= connection.unacknowledged
        report.hosted_attempt_ids.extend(sorted(hosted))
        for info in self._table().slots_of_job(job_id):
            report.slots.append(
                slot_status_to_proto(
                    SlotStatus(info.index, info.resource_profile, info.allocation_id, info.job_id)
                )
            )
        return report

    async def disconnect_job_master(
        self,
        request: task_executor_pb2.DisconnectJobMasterFromTaskExecutorRequest,
        context: CallContext,
    ) -> common_pb2.Empty:
        self._close_job(JobID(request.job_id), f"the JobMaster disconnected: {request.cause}")
        return common_pb2.Empty()

    def _on_heartbeat_timeout(self, target: str, reason: str) -> None:
        if target == RM_HEARTBEAT_TARGET:
            self.rm_link.reconnect(f"resource manager heartbeat timeout: {reason}")
        else:
            self._close_job(JobID(target), f"lost the JobMaster: {reason}")

    def _close_job(self, job_id: JobID, cause: str) -> None:
        """Fail the job's tasks and free its slots (a task executor that loses its JobMaster)."""
        table = self._table()
        allocations = table.allocation_ids_of_job(job_id)
        if allocations:
            log.warning("job %s: freeing %d slots: %s", short(job_id), len(allocations), cause)
        self._drop_job_connection(job_id)
        for allocation_id in allocations:
            self._free_slot(allocation_id, cause)

    def _drop_job_connection(self, job_id: JobID) -> None:
        connection = self.jobs.pop(job_id, None)
        if connection is None:
            return
        self.runtime.spawn(self.job_leaders.remove_job(job_id), "job-leader-untrack")
        self.heartbeats.unmonitor(job_id)
        self.shared_gates.drop_job(job_id)
        if connection.offer_task is not None:
            connection.offer_task.cancel()

    async def get_service_info(
        self, request: common_pb2.GetServiceInfoRequest, context: CallContext
    ) -> common_pb2.ServiceInfo:
        return self.identity.info(spark_ui_url=spark_ui_url(self.task_services))

    async def list_attempt_logs(
        self, request: jobs_pb2.ListAttemptLogsRequest, context: CallContext
    ) -> jobs_pb2.AttemptLogIndex:
        return await self.runtime.run_blocking(
            list_attempt_logs, self.task_services, self.resource_id, request
        )

    async def get_attempt_log(
        self, request: jobs_pb2.GetAttemptLogRequest, context: CallContext
    ) -> jobs_pb2.AttemptLogChunk:
        return await self.runtime.run_blocking(
            get_attempt_log, self.task_services, self.resource_id, request
        )
