"""The scheduler of one job (Flink's ``DefaultScheduler``), for batch jobs.

Scheduling is by pipelined region: a region is scheduled once every blocking input it consumes
is finished (with blocking edges every subtask is its own region, so consumers start as soon as
all their producers finished, and slots are reused from one wave of subtasks to the next).

``allocate_slots_and_deploy``: every execution of the region goes SCHEDULED and
asks the slot pool for a slot; only when *all* slots of the region are assigned are the tasks
deployed. Each deployment remembers the vertex version it was made for: if the vertex was reset
meanwhile (a restart), the stale deployment is refused and its slot released. A deployment that
fails (RPC error or timeout) fails the attempt with a message naming the task and the executor.

Failures are classified first
(:mod:`~sparkmill.services.jobmaster.scheduler.failure_classifier`), then go to the restart
strategy (Flink's ``tryRestartOrFail``): restart the affected vertices after the back-off
(:mod:`~sparkmill.services.jobmaster.scheduler.pending_restarts`) or fail the job, cancelling
what still runs. Which subtasks a failure or a lost result touches (the failed region and those
downstream, the producers of lost inputs) is decided in
:mod:`sparkmill.services.jobmaster.scheduler.failover`.

All methods run on the job master's event loop. I/O goes through :class:`SchedulerActions`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from functools import partial

from sparkmill.common.core.errors import ResourceExhaustedError, RpcError
from sparkmill.common.core.ids import ExecutionAttemptID, ResourceID, short
from sparkmill.common.core.io_counters import NO_IO, IOCounters
from sparkmill.common.core.states import JOB_STATUS_TRANSITIONS, ExecutionState, JobStatus
from sparkmill.common.deployment.state_update import Written
from sparkmill.common.runtime.settings import SpeculativeSettings
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    Execution,
    ExecutionGraph,
    ExecutionVertex,
)
from sparkmill.services.jobmaster.executiongraph.execution_topology import PipelinedRegion
from sparkmill.services.jobmaster.scheduler.adaptive_parallelism import AdaptiveParallelism
from sparkmill.services.jobmaster.scheduler.failover import (
    no_data_results,
    producers_of_lost_partitions,
    results_lost_with,
    vertices_to_restart,
)
from sparkmill.services.jobmaster.scheduler.failure_classifier import (
    RepeatedFailureDetector,
    not_restarted,
)
from sparkmill.services.jobmaster.scheduler.pending_restarts import (
    PendingRestart,
    PendingRestarts,
)
from sparkmill.services.jobmaster.scheduler.restart_strategy import RestartStrategy
from sparkmill.services.jobmaster.scheduler.scheduler_interfaces import (
    ExceptionHistory,
    NoProgressListener,
    ProgressListener,
    SchedulerActions,
)
from sparkmill.services.jobmaster.scheduler.slot_waits import SlotOutcome, SlotWaits
from sparkmill.services.jobmaster.scheduler.speculative_execution import SpeculativeExecution
from sparkmill.services.jobmaster.slotpool.slot_pool import (
    PendingSlotRequest,
    PhysicalSlot,
    SlotPool,
)
from sparkmill.services.jobmaster.slotpool.slot_sharing import (
    SlotSharingManager,
    SlotSharingStrategy,
)

log = logging.getLogger(__name__)

ES = ExecutionState
# Regions scheduled per turn of the event loop. A burst - a wide job's sources, or every
# consumer of an ALL_TO_ALL edge once its last producer finished - costs about half a
# millisecond of CPU per region: 10,000 at once kept the loop from answering heartbeats and
# RPCs for seconds (tens of seconds on a loaded machine), and the job lost its peers. 500 per
# turn still kept a task executor's GetInputGate waiting past its deadline at load 38.
SCHEDULING_SLICE = 100


class DefaultScheduler:
    def __init__(
        self,
        graph: ExecutionGraph,
        slot_pool: SlotPool,
        actions: SchedulerActions,
        restart_strategy: RestartStrategy,
        *,
        failover_strategy: str = "region",
        progress: ProgressListener | None = None,
        fail_on_repeated_error: bool = True,
        adaptive: AdaptiveParallelism | None = None,
        speculative: SpeculativeSettings | None = None,
    ) -> None:
        self.graph = graph
        self.progress: ProgressListener = progress or NoProgressListener()
        # Decides the vertices left open until their producers finished.
        self.adaptive = adaptive or AdaptiveParallelism(graph)
        self.slot_pool = slot_pool
        # Subtasks of one slot sharing group share physical slots (Flink's slot sharing).
        self.slot_sharing = SlotSharingManager(slot_pool, SlotSharingStrategy(graph.job_vertices))
        self.actions = actions
        self.restart_strategy = restart_strategy
        self.failover_strategy = failover_strategy
        self.repeated_failures = RepeatedFailureDetector(fail_on_repeated_error)
        self.status = JobStatus.CREATED
        self.failure_cause = ""
        self.restarts = 0
        self.recovered_subtasks = 0
        self.exceptions = ExceptionHistory()
        self.accumulators: dict[str, dict[int, bytes]] = {}
        self.io: dict[str, IOCounters] = {}
        self._slots: dict[ExecutionAttemptID, PhysicalSlot] = {}
        self._requests: dict[ExecutionAttemptID, PendingSlotRequest] = {}
        self._restarts = PendingRestarts()
        self._slot_waits = SlotWaits(self._deploy_when_all_slots_assigned)
        self._closed = False  # the JobMaster let go of the job: nothing may change any more
        self.no_data_results = no_data_results(graph.job_graph)
        self.speculation = SpeculativeExecution(
            graph, speculative or SpeculativeSettings(), self, graph.now
        )

    # -- job status -----------------------------------------------------------------------------

    def _transition(self, target: JobStatus, cause: str = "") -> None:
        if self.status is target:
            return
        JOB_STATUS_TRANSITIONS.check(self.status, target, f"job {short(self.graph.job_id)}")
        log.info(
            "job %s: %s -> %s%s",
            short(self.graph.job_id),
            self.status.name,
            target.name,
            f" ({cause})" if cause else "",
        )
        self.status = target
        if cause:
            self.failure_cause = cause
        if target is not JobStatus.RUNNING:
            self.speculation.stop()
        self.actions.job_status_changed(target, cause)

    def restore_finished(self, vertex: ExecutionVertex, accumulator: bytes, io: IOCounters) -> None:
        """Take over what an earlier JobMaster's finished attempt of ``vertex`` reported (the
        graph has restored the attempt itself)."""
        name = vertex.job_vertex.name
        if accumulator:
            self.accumulators.setdefault(name, {})[vertex.subtask_index] = accumulator
        self.io[name] = self.io.get(name, NO_IO) + io
        self.adaptive.attempt_finished(vertex, io)
        self.recovered_subtasks += 1

    # -- scheduling -----------------------------------------------------------------------------

    def start_scheduling(self) -> None:
        self._transition(JobStatus.RUNNING)
        self.speculation.start()
        ready = [r for r in self.graph.pipelined_regions() if r.inputs_consumable]
        self._schedule_regions(ready + self.adaptive.decide(self.progress))
        self._check_job_finished()

    def _schedule_regions(self, regions: Iterable[PipelinedRegion]) -> None:
        ready = list(regions)
        for region in ready[:SCHEDULING_SLICE]:
            if all(v.current_execution.state is ES.CREATED for v in region):
                self.allocate_slots_and_deploy(list(region))
        if len(ready) > SCHEDULING_SLICE:
            later = [(r, [v.vertex_version for v in r]) for r in ready[SCHEDULING_SLICE:]]
            asyncio.get_running_loop().call_soon(self._schedule_deferred, later)

    def _schedule_deferred(self, queued: list[tuple[PipelinedRegion, list[int]]]) -> None:
        """The rest of a burst, a slice per loop turn. Whatever happened in between (a
        cancellation, a failover that reset a region or re-runs one of its producers, a
        restart that scheduled it already) is seen here: such a region is left to whoever
        changed it."""
        if self._closed or self.status is not JobStatus.RUNNING:
            return
        for region, versions in queued[:SCHEDULING_SLICE]:
            if (
                [v.vertex_version for v in region] == versions
                and all(v.current_execution.state is ES.CREATED for v in region)
                and region.inputs_consumable
            ):
                self.allocate_slots_and_deploy(list(region))
        if len(queued) > SCHEDULING_SLICE:
            asyncio.get_running_loop().call_soon(self._schedule_deferred, queued[SCHEDULING_SLICE:])

    def allocate_slots_and_deploy(self, vertices: list[ExecutionVertex]) -> None:
        batch: list[tuple[ExecutionVertex, int, Execution]] = []
        requests: list[PendingSlotRequest] = []
        for vertex in vertices:
            execution = vertex.current_execution
            execution.transition_to(ES.SCHEDULED)
            request = self.slot_sharing.allocate(execution.attempt_id, vertex.id)
            self._requests[execution.attempt_id] = request
            batch.append((vertex, vertex.vertex_version, execution))
            requests.append(request)
        self._slot_waits.wait(batch, requests)

    # -- speculative attempts (SpeculationHost) -------------------------------------------------

    def start_speculative_attempt(
        self, execution: Execution, excluded: frozenset[ResourceID]
    ) -> None:
        """Deploy a speculative attempt in a slot of its own, on none of ``excluded``."""
        vertex = execution.vertex
        execution.transition_to(ES.SCHEDULED)
        request = self.slot_sharing.allocate_exclusive(execution.attempt_id, vertex.id, excluded)
        self._requests[execution.attempt_id] = request
        self._slot_waits.wait([(vertex, vertex.vertex_version, execution)], [request])

    def cancel_attempt(self, execution: Execution) -> None:
        self._cancel_execution(execution)

    def blocklist_changed(self, blocked: frozenset[ResourceID]) -> None:
        self.slot_pool.block_task_executors(blocked)
        self.progress.blocklist_changed(self.speculation.blocklist.until)

    def _deploy_when_all_slots_assigned(
        self, batch: Sequence[tuple[ExecutionVertex, int, Execution]], results: list[SlotOutcome]
    ) -> None:
        assigned: list[tuple[Execution, PhysicalSlot]] = []
        for (vertex, version, execution), result in zip(batch, results, strict=True):
            self._requests.pop(execution.attempt_id, None)
            if isinstance(result, BaseException):
                if execution.is_current and execution.state is ES.SCHEDULED:
                    self._fail_execution(
                        execution,
                        f"could not allocate a slot: {result}",
                        type(result).__name__,
                        # The resource manager said the request can never be served.
                        suppress_restarts=isinstance(result, ResourceExhaustedError),
                    )
                continue
            stale = (
                vertex.vertex_version != version
                or not execution.is_current
                or execution.state is not ES.SCHEDULED
            )
            if stale:
                # A superseded deployment is refused: the vertex was reset or cancelled while
                # the slot was on its way, so the slot goes back instead of running old work.
                self.slot_sharing.release(execution.attempt_id)
                continue
            assigned.append((execution, result))
        for execution, slot in assigned:
            # Failing a later member of the batch above may have cancelled (or failed) this
            # one meanwhile: refuse that deployment too and give its slot back.
            if execution.is_current and execution.state is ES.SCHEDULED:
                self._deploy(execution, slot)
            else:
                self.slot_sharing.release(execution.attempt_id)

    def _deploy(self, execution: Execution, slot: PhysicalSlot) -> None:
        self._slots[execution.attempt_id] = slot
        execution.assigned_resource = slot
        execution.task_executor_id = slot.task_executor.resource_id
        execution.transition_to(ES.DEPLOYING)
        # A done callback, not a task per deployment: see slot_waits.
        deployed = self.actions.submit_task(execution, slot)
        deployed.add_done_callback(partial(self._deployment_answered, execution, slot))

    def _deployment_answered(
        self, execution: Execution, slot: PhysicalSlot, deployed: asyncio.Future[None]
    ) -> None:
        exc = None if deployed.cancelled() else deployed.exception()
        if self._closed or exc is None:
            return
        if not isinstance(exc, RpcError):
            log.error("BUG: deploying %s raised", execution.description, exc_info=exc)
        if execution.is_current and execution.state is ES.DEPLOYING:
            self._fail_execution(
                execution,
                f"could not deploy {execution.description} to task executor "
                f"{short(slot.task_executor.resource_id)} ({slot.task_executor.address}): "
                f"{type(exc).__name__}: {exc}",
                type(exc).__name__,
            )

    # -- state updates from task executors ------------------------------------------------------

    def update_task_execution_state(
        self,
        attempt_id: ExecutionAttemptID,
        state: ExecutionState,
        *,
        message: str = "",
        details: str = "",
        exception_type: str = "",
        suppress_restarts: bool = False,
        raised_by_task: bool = False,
        io: IOCounters | None = None,
        accumulator: bytes = b"",
        lost_partitions: Iterable[tuple[str, int, str]] = (),
        written: Written = (),
    ) -> bool:
        """Apply a reported state; False when the attempt is unknown or superseded (stale).

        ``lost_partitions`` (dataset id, partition number, producer attempt id) come with a
        FAILED report of a task that could not read those inputs; ``suppress_restarts`` with
        one whose task raised what no restart can fix
        (:func:`~sparkmill.common.core.errors.classify_task_exception`); ``raised_by_task`` with
        one whose task's own code raised the error (not its environment): a repeat of the same
        error fails the job (see
        :mod:`~sparkmill.services.jobmaster.scheduler.failure_classifier`)."""
        execution = self.graph.execution(attempt_id)
        if self._closed or execution is None or execution.state.is_terminal:
            return False
        if execution.state is ES.CANCELING and state in (ES.FAILED, ES.FINISHED):
            state = ES.CANCELED  # the cancellation wins (Flink does the same)
        if state is ES.DEPLOYING or not execution.can_transition_to(state):
            return False
        if io is not None and (state is ES.FINISHED or not execution.is_speculative):
            # A speculative attempt's work counts only if it wins (finishes first).
            name = execution.vertex.job_vertex.name
            self.io[name] = self.io.get(name, NO_IO) + io
        if state is ES.FAILED:
            self._fail_execution(
                execution,
                message or "the task failed",
                exception_type,
                details,
                suppress_restarts=suppress_restarts,
                raised_by_task=raised_by_task and not lost_partitions,
                lost_producers=producers_of_lost_partitions(self.graph, lost_partitions),
            )
        elif state is ES.FINISHED:
            self.speculation.before_finished(execution)
            execution.transition_to(ES.FINISHED)
            self.repeated_failures.finished(execution.vertex.id)
            self.progress.attempt_finished(execution, accumulator, io)
            self.adaptive.attempt_finished(execution.vertex, io, written)
            if accumulator:
                name = execution.vertex.job_vertex.name
                self.accumulators.setdefault(name, {})[execution.vertex.subtask_index] = accumulator
            self._release_slot(execution)
            self._on_finished(execution)
        elif state is ES.CANCELED:
            execution.transition_to(ES.CANCELED)
            self._release_slot(execution)
            self._after_terminal()
        else:
            execution.transition_to(state)
        return True

    def _release_slot(self, execution: Execution) -> None:
        # Returns the logical slot; the shared physical slot goes back with its last one.
        self._slots.pop(execution.attempt_id, None)
        self.slot_sharing.release(execution.attempt_id)

    def _on_finished(self, execution: Execution) -> None:
        if self.status is not JobStatus.RUNNING:
            self._after_terminal()
            return
        ready: dict[int, PipelinedRegion] = {}
        for group in self.graph.downstream_groups(execution.vertex):
            if not group.is_consumable:
                continue
            for consumer in group.consumer_vertex_group:
                region = self.graph.region_of(consumer)
                if region.index not in ready and region.inputs_consumable:
                    ready[region.index] = region
        ready.update((r.index, r) for r in self.adaptive.decide(self.progress))
        self._schedule_regions(ready.values())
        self._after_terminal()

    def _check_job_finished(self) -> None:
        if self.status is JobStatus.RUNNING and self.graph.all_vertices_finished:
            self._transition(JobStatus.FINISHED)

    # -- failures -------------------------------------------------------------------------------

    def _fail_execution(
        self,
        execution: Execution,
        message: str,
        exception_type: str = "",
        details: str = "",
        *,
        suppress_restarts: bool = False,
        raised_by_task: bool = False,
        lost_producers: list[ExecutionVertex] | None = None,
    ) -> None:
        slot = self._slots.get(execution.attempt_id)
        if slot is None and isinstance(execution.assigned_resource, PhysicalSlot):
            slot = execution.assigned_resource  # e.g. slot_lost already dropped it from _slots
        # Another attempt of the subtask still racing: this failure is this attempt's alone.
        absorbed = (
            not lost_producers
            and (execution.is_speculative or not suppress_restarts)
            and self.speculation.absorbs_failure(execution)
        )
        execution.transition_to(ES.FAILED, failure=message, exception_class=exception_type)
        self._release_slot(execution)
        te = slot.task_executor.resource_id if slot is not None else ""
        self.exceptions.add(
            execution.vertex, execution.attempt_number, te, message, details, exception_type
        )
        log.warning(
            "job %s: %s failed: %s",
            short(self.graph.job_id),
            execution.description,
            message.splitlines()[0] if message else "",
        )
        if absorbed:
            self._after_terminal()
            return
        repeats = (
            self.repeated_failures.repeated(
                execution.vertex.id, execution.attempt_number, exception_type, message
            )
            if raised_by_task and not suppress_restarts
            else None
        )
        if self.status is JobStatus.RUNNING:
            final = not_restarted(execution.description, message, suppress_restarts, repeats)
            if final is not None:
                self.fail_job(final)
            else:
                lost = lost_producers or []
                if lost:
                    log.info(
                        "job %s: %s lost results of %s; they run again",
                        short(self.graph.job_id),
                        execution.description,
                        ", ".join(v.current_execution.description for v in lost[:5]),
                    )
                self._handle_failure(
                    [execution.vertex, *lost], f"{execution.description} failed: {message}"
                )
        self._after_terminal()

    def results_lost_with_task_executor(self, resource_id: str, cause: str) -> None:
        """The finished results written on ``resource_id`` are gone (``exchange.storage:
        local``): produce again those a consumer still needs (one failure for the restart
        strategy, restarted after its back-off, before any consumer could read them)."""
        if self._closed or self.status is not JobStatus.RUNNING:
            return
        pending = self._restarts.vertex_ids()
        lost = results_lost_with(
            self.graph, resource_id, pending, self.no_data_results, self.failover_strategy
        )
        if not lost:
            return
        message = (
            f"the results of {len(lost)} finished subtask(s) were lost with task executor "
            f"{short(resource_id)}: {cause}"
        )
        described = "\n".join(v.current_execution.description for v in lost)
        first = lost[0]
        self.exceptions.add(
            first,
            first.current_execution.attempt_number,
            resource_id,
            message,
            described,
            "ResultPartitionLost",
        )
        log.warning("job %s: %s", short(self.graph.job_id), message)
        self._handle_failure(lost, message)
        self._after_terminal()

    def _handle_failure(self, origins: list[ExecutionVertex], cause: str) -> None:
        pending_backoff = self._restarts.remaining_backoff()
        concurrent = (
            pending_backoff is not None and self.restart_strategy.merges_concurrent_failures
        )
        if concurrent:
            assert pending_backoff is not None
            # A failure while a restart is still pending is part of the same incident (the
            # other tasks of a lost executor): restarted together, not counted again.
            backoff_s = pending_backoff
        else:
            self.restart_strategy.notify_failure(time.monotonic())
            if not self.restart_strategy.can_restart():
                self.fail_job(f"{cause} (no restart left: {self.restart_strategy.describe()})")
                return
            backoff_s = self.restart_strategy.backoff_s()  # once: it may be jittered per call
        pending = self._restarts.vertex_ids()
        # Vertices a restart already waits for are left to it (resetting them twice would
        # throw away the attempt the first restart starts).
        vertices = [
            v
            for v in vertices_to_restart(self.graph, origins, self.failover_strategy)
            if id(v) not in pending
        ]
        if not concurrent:
            self.restarts += 1
        log.info(
            "job %s: restarting %d subtasks after %.1fs (restart #%d%s, %s)",
            short(self.graph.job_id),
            len(vertices),
            backoff_s,
            self.restarts,
            ", joins the pending one" if concurrent else "",
            self.failover_strategy,
        )
        if self.failover_strategy == "full":
            self._transition(JobStatus.RESTARTING, cause)
        self.progress.attempts_invalidated(
            [v for v in vertices if v.current_execution.state is ES.FINISHED]
        )
        for vertex in vertices:
            self._cancel_vertex(vertex)
            # Its output is void from now on (the reset would do this only after the back-off):
            # no consumer may start reading it meanwhile and be left on superseded data.
            for partition in vertex.produced_partitions:
                partition.mark_unfinished()
        self._restarts.add(vertices, backoff_s)

    def _after_terminal(self) -> None:
        """Progress whatever waited for executions to become terminal."""
        self._restarts.start_ready(self._restart)
        if self.status is JobStatus.RUNNING:
            self._check_job_finished()
        elif (
            self.status in (JobStatus.FAILING, JobStatus.CANCELLING)
            and self.graph.all_vertices_terminal
            and not self._slots
        ):
            failing = self.status is JobStatus.FAILING
            self._transition(
                JobStatus.FAILED if failing else JobStatus.CANCELED, self.failure_cause
            )

    def _restart(self, restart: PendingRestart) -> None:
        self._restarts.take(restart)
        if self._closed or self.status not in (JobStatus.RUNNING, JobStatus.RESTARTING):
            return
        for vertex in restart.vertices:
            self.graph.reset_vertex_for_new_execution(vertex)
        if self.status is JobStatus.RESTARTING:
            self._transition(JobStatus.RUNNING)
        regions = {self.graph.region_of(v).index: self.graph.region_of(v) for v in restart.vertices}
        self._schedule_regions(r for r in regions.values() if r.inputs_consumable)

    def fail_job(self, cause: str) -> None:
        """Fail the job for good: cancel whatever still runs, then FAILED."""
        if self.status.is_terminal or self.status in (JobStatus.FAILING, JobStatus.CANCELLING):
            return
        self._restarts.clear()
        self._transition(JobStatus.FAILING, cause)
        self._cancel_all()
        self._after_terminal()

    def cancel(self) -> None:
        if self.status.is_terminal or self.status is JobStatus.CANCELLING:
            return
        self._restarts.clear()
        self._transition(JobStatus.CANCELLING, "cancelled on request")
        self._cancel_all()
        self._after_terminal()

    def _cancel_all(self) -> None:
        for vertex in self.graph.all_execution_vertices():
            self._cancel_vertex(vertex)

    def _cancel_vertex(self, vertex: ExecutionVertex) -> None:
        self._cancel_execution(vertex.current_execution)
        for execution in list(vertex.speculative_executions):
            self._cancel_execution(execution)

    def _cancel_execution(self, execution: Execution) -> None:
        state = execution.state
        if state.is_terminal or state is ES.CANCELING:
            return
        if state in (ES.CREATED, ES.SCHEDULED):
            request = self._requests.pop(execution.attempt_id, None)
            execution.transition_to(ES.CANCELED)
            if request is not None:
                # Withdraws the shared request only if no other member still waits for it.
                self.slot_sharing.release(execution.attempt_id)
            return
        slot = self._slots.get(execution.attempt_id)
        execution.transition_to(ES.CANCELING)
        if slot is None:
            execution.transition_to(ES.CANCELED)
            return
        answered = self.actions.cancel_task(execution, slot)
        answered.add_done_callback(partial(self._cancel_answered, execution))

    def _cancel_answered(
        self, execution: Execution, answered: asyncio.Future[RpcError | None]
    ) -> None:
        error = None if answered.cancelled() else answered.result()
        # The task is not there (never arrived, already gone) or its executor is unreachable:
        # either way it does not run for us any more.
        if (
            error is not None
            and not self._closed
            and execution.is_current
            and execution.state is ES.CANCELING
        ):
            log.info("cancel of %s: %s; treating it as cancelled", execution.description, error)
            execution.transition_to(ES.CANCELED)
            self._release_slot(execution)
            self._after_terminal()

    def slot_lost(self, slot: PhysicalSlot, cause: BaseException) -> None:
        """A slot in use vanished (its task executor died or freed it).

        Every logical slot of a shared physical slot fails with it.
        """
        self.slot_sharing.slot_lost(slot.allocation_id)
        for attempt_id, held in list(self._slots.items()):
            if held.allocation_id != slot.allocation_id:
                continue
            del self._slots[attempt_id]
            execution = self.graph.execution(attempt_id)
            if execution is None or execution.state.is_terminal:
                continue
            if execution.state is ES.CANCELING:
                execution.transition_to(ES.CANCELED)
                self._after_terminal()
            else:
                self._fail_execution(
                    execution,
                    f"lost its slot on task executor {short(slot.task_executor.resource_id)} "
                    f"({slot.task_executor.address}): {cause}",
                    type(cause).__name__,
                )

    async def close(self) -> None:
        self._closed = True
        self.speculation.stop()
        self._slot_waits.close()
