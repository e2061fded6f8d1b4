"""Unit tests of the DefaultScheduler.

A real :class:`DefaultScheduler` drives a real :class:`SlotPool` and a real
:class:`ExecutionGraph`; only the outside world is faked, by hand-written recorders:
:class:`TestingSchedulerActions` (task executor RPCs and job status notifications) and
:class:`TestingSlotPoolActions` (resource manager requests). Slot requests are fulfilled by
offering slots to the pool, exactly as a task executor would; task progress is reported through
``update_task_execution_state`` exactly as the job master does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from sparkmill.common.core.errors import NotFoundError, RpcError, UnavailableError
from sparkmill.common.core.ids import (
    AllocationID,
    new_attempt_id,
    new_dataset_id,
    new_job_id,
    new_resource_id,
    new_vertex_id,
    short,
)
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.common.jobgraph.model import (
    NOOP_OPERATOR_KIND,
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
    ResultPartitionType,
)
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    Execution,
    ExecutionGraph,
    ExecutionVertex,
)
from sparkmill.services.jobmaster.scheduler.default_scheduler import (
    SCHEDULING_SLICE,
    DefaultScheduler,
    ProgressListener,
)
from sparkmill.services.jobmaster.scheduler.restart_strategy import (
    FixedDelayRestartStrategy,
    NoRestartStrategy,
    RestartStrategy,
)
from sparkmill.services.jobmaster.slotpool.slot_pool import (
    PhysicalSlot,
    SlotOffer,
    SlotPool,
    TaskExecutorInfo,
)
from sparkmill.testing import noop_pipeline

ES = ExecutionState
REQUEST_TIMEOUT = 300.0
IDLE_TIMEOUT = 600.0
A2A = DistributionPattern.ALL_TO_ALL
POINTWISE = DistributionPattern.POINTWISE
BLOCKING = ResultPartitionType.BLOCKING
PIPELINED = ResultPartitionType.PIPELINED


# ------------------------------------------------------------------------------------ fakes


class TestingSchedulerActions:
    """Records the scheduler's RPCs; can be told to fail submissions or cancellations."""

    __test__ = False

    def __init__(self) -> None:
        self.submitted: list[tuple[Execution, PhysicalSlot]] = []
        self.cancelled: list[tuple[Execution, PhysicalSlot]] = []
        self.statuses: list[tuple[JobStatus, str]] = []
        # task name with subtask (e.g. "noop-0 (1/2)") -> the error its next submission raises
        self.submit_failures: dict[str, RpcError] = {}
        self.cancel_failure: RpcError | None = None

    def fail_submission(self, task: str, error: RpcError) -> None:
        self.submit_failures[task] = error

    async def submit_task(self, execution: Execution, slot: PhysicalSlot) -> None:
        self.submitted.append((execution, slot))
        error = self.submit_failures.pop(execution.vertex.task_name_with_subtask, None)
        if error is not None:
            raise error

    async def cancel_task(self, execution: Execution, slot: PhysicalSlot) -> None:
        self.cancelled.append((execution, slot))
        if self.cancel_failure is not None:
            raise self.cancel_failure

    def job_status_changed(self, status: JobStatus, cause: str) -> None:
        self.statuses.append((status, cause))

    @property
    def status_names(self) -> list[str]:
        return [status.name for status, _ in self.statuses]

    @property
    def submitted_tasks(self) -> list[str]:
        return [e.vertex.task_name_with_subtask for e, _ in self.submitted]


class TestingSlotPoolActions:
    """Records what the slot pool asks of the resource manager and the task executors.

    ``slot_lost`` is forwarded to the scheduler, as the job master does.
    """

    __test__ = False

    def __init__(self) -> None:
        self.requested: list[AllocationID] = []
        self.cancelled: list[AllocationID] = []
        self.freed: list[AllocationID] = []
        self.scheduler: DefaultScheduler | None = None

    def request_slot_from_resource_manager(
        self, allocation_id: AllocationID, resource_profile: ResourceProfile
    ) -> None:
        self.requested.append(allocation_id)

    def cancel_slot_request_at_resource_manager(self, allocation_id: AllocationID) -> None:
        self.cancelled.append(allocation_id)

    def free_slot_at_task_executor(
        self, task_executor: TaskExecutorInfo, allocation_id: AllocationID, cause: str
    ) -> None:
        self.freed.append(allocation_id)

    def slot_lost(self, slot: PhysicalSlot, cause: BaseException) -> None:
        assert self.scheduler is not None
        self.scheduler.slot_lost(slot, cause)


# ------------------------------------------------------------------------------------ harness


@dataclass
class Harness:
    graph: ExecutionGraph
    pool: SlotPool
    scheduler: DefaultScheduler
    actions: TestingSchedulerActions
    rm: TestingSlotPoolActions
    timers: ManualTimerService
    te: TaskExecutorInfo
    offered: list[AllocationID] = field(default_factory=list)
    accepted: int = 0

    # -- slots ---------------------------------------------------------------------------

    def open_requests(self) -> list[AllocationID]:
        """RM requests neither cancelled nor fulfilled by an offer yet, oldest first."""
        done = set(self.rm.cancelled) | set(self.offered)
        return [a for a in self.rm.requested if a not in done]

    def offer(self, count: int | None = None, te: TaskExecutorInfo | None = None) -> int:
        """Offer one slot for each of the ``count`` oldest open RM requests (all by default),
        from ``te`` (the harness's task executor by default)."""
        requests = self.open_requests()
        if count is not None:
            requests = requests[:count]
        offers = [
            SlotOffer(allocation_id, len(self.offered) + i, ResourceProfile())
            for i, allocation_id in enumerate(requests)
        ]
        self.offered.extend(requests)
        accepted = self.pool.offer_slots(te or self.te, offers)
        self.accepted += len(accepted)
        return len(accepted)

    def status(self) -> JobStatus:
        """The job status (a call, so that the type checker does not narrow it)."""
        return self.scheduler.status

    # -- graph access --------------------------------------------------------------------

    def vertex(self, name: str, index: int) -> ExecutionVertex:
        for job_vertex in self.graph.job_vertices:
            if job_vertex.name == name:
                return job_vertex.task_vertices[index]
        raise KeyError(name)

    def execution(self, name: str, index: int) -> Execution:
        return self.vertex(name, index).current_execution

    def state(self, name: str, index: int) -> ExecutionState:
        return self.execution(name, index).state

    def states(self, name: str) -> list[ExecutionState]:
        return [
            v.current_execution.state
            for jv in self.graph.job_vertices
            if jv.name == name
            for v in jv.task_vertices
        ]

    # -- reports from "task executors" ---------------------------------------------------

    def report(
        self,
        name: str,
        index: int,
        state: ExecutionState,
        *,
        message: str = "",
        details: str = "",
        exception_type: str = "",
        suppress_restarts: bool = False,
        io: IOCounters | None = None,
        accumulator: bytes = b"",
        lost_partitions: list[tuple[str, int, str]] | None = None,
    ) -> bool:
        """What the task executor reports about the current attempt of ``name`` #``index``."""
        return self.scheduler.update_task_execution_state(
            self.execution(name, index).attempt_id,
            state,
            message=message,
            details=details,
            exception_type=exception_type,
            suppress_restarts=suppress_restarts,
            io=io,
            accumulator=accumulator,
            lost_partitions=lost_partitions or (),
        )

    def run(self, name: str, index: int) -> None:
        """The deployed attempt starts: INITIALIZING, then RUNNING."""
        assert self.state(name, index) is ES.DEPLOYING, self.execution(name, index)
        assert self.report(name, index, ES.INITIALIZING)
        assert self.report(name, index, ES.RUNNING)

    def finish(self, name: str, index: int) -> None:
        """The deployed (or running) attempt runs to completion."""
        if self.state(name, index) is ES.DEPLOYING:
            self.run(name, index)
        assert self.report(name, index, ES.FINISHED)

    async def finish_all(self, *, max_rounds: int = 100) -> None:
        """Offer slots and finish deployed attempts, in topological order, until none is left."""
        for _ in range(max_rounds):
            self.offer()
            await settle()
            deployed = [
                v
                for v in self.graph.all_execution_vertices()
                if v.current_execution.state in (ES.DEPLOYING, ES.INITIALIZING, ES.RUNNING)
            ]
            if not deployed:
                return
            vertex = deployed[0]
            self.finish(vertex.job_vertex.name, vertex.subtask_index)
        raise AssertionError("the job did not finish")


async def settle(rounds: int = 20) -> None:
    """Let the scheduler's tasks (deploy, submit, cancel) and call_later(0) callbacks run."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def run(
    job_graph: JobGraph,
    scenario: Callable[[Harness], Awaitable[None]],
    *,
    restart_strategy: RestartStrategy | None = None,
    failover: str = "region",
    progress: ProgressListener | None = None,
) -> None:
    async def main() -> None:
        timers = ManualTimerService()
        rm = TestingSlotPoolActions()
        pool = SlotPool(job_graph.job_id, timers, rm, REQUEST_TIMEOUT, IDLE_TIMEOUT)
        pool.connect_to_resource_manager()
        graph = ExecutionGraph.build(job_graph)
        actions = TestingSchedulerActions()
        scheduler = DefaultScheduler(
            graph,
            pool,
            actions,
            restart_strategy or NoRestartStrategy(),
            failover_strategy=failover,
            progress=progress,
        )
        rm.scheduler = scheduler
        te = TaskExecutorInfo(new_resource_id(), "te-1:6123")
        harness = Harness(graph, pool, scheduler, actions, rm, timers, te)
        try:
            await asyncio.wait_for(scenario(harness), timeout=5)
        finally:
            await scheduler.close()

    asyncio.run(main())


def build_graph(
    vertices: dict[str, int],
    edges: list[tuple[str, str, DistributionPattern, ResultPartitionType]],
    *,
    groups: dict[str, str] | None = None,
) -> JobGraph:
    """A job graph of noop vertices ``name -> parallelism`` wired by ``edges``.

    All vertices share the default slot sharing group unless ``groups`` names another one.
    """
    graph = JobGraph(new_job_id(), "test-job")
    by_name: dict[str, JobVertex] = {}
    for name, parallelism in vertices.items():
        vertex = JobVertex(new_vertex_id(), name, parallelism, OperatorSpec(NOOP_OPERATOR_KIND))
        if groups and name in groups:
            vertex.slot_sharing_group = groups[name]
        by_name[name] = vertex
        graph.vertices.append(vertex)
    for source, target, pattern, result_type in edges:
        producer, consumer = by_name[source], by_name[target]
        dataset = IntermediateDataSet(new_dataset_id(), producer.id, result_type)
        producer.produced.append(dataset)
        consumer.inputs.append(JobEdge(dataset.id, consumer.id, pattern))
    return graph


def chain(parallelism: int, vertices: int) -> JobGraph:
    """noop-0 -> noop-1 -> ...: BLOCKING, ALL_TO_ALL, every vertex with ``parallelism``."""
    return noop_pipeline("chain", parallelism, vertices=vertices).build_job_graph()


# ------------------------------------------------------------------------------------ scheduling


def test_sources_first_then_consumers_once_all_blocking_producers_finished() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert h.status() is JobStatus.RUNNING
        # Only the sources ask for slots; everything downstream waits.
        assert h.states("noop-0") == [ES.SCHEDULED, ES.SCHEDULED]
        assert h.states("noop-1") == [ES.CREATED, ES.CREATED]
        assert h.states("noop-2") == [ES.CREATED, ES.CREATED]
        assert len(h.rm.requested) == 2
        assert h.actions.submitted == []

        assert h.offer() == 2
        await settle()
        assert h.actions.submitted_tasks == ["noop-0 (1/2)", "noop-0 (2/2)"]
        assert h.states("noop-0") == [ES.DEPLOYING, ES.DEPLOYING]

        # ALL_TO_ALL: one finished producer is not enough for any consumer.
        h.finish("noop-0", 0)
        await settle()
        assert h.states("noop-1") == [ES.CREATED, ES.CREATED]
        assert len(h.actions.submitted) == 2

        h.finish("noop-0", 1)
        await settle()
        # Both consumers go, in the slots the producers gave back: no new RM request.
        assert h.states("noop-1") == [ES.DEPLOYING, ES.DEPLOYING]
        assert h.states("noop-2") == [ES.CREATED, ES.CREATED]
        assert len(h.rm.requested) == 2
        assert h.actions.submitted_tasks[2:] == ["noop-1 (1/2)", "noop-1 (2/2)"]

        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert h.actions.status_names == ["RUNNING", "FINISHED"]
        assert len(h.actions.submitted) == 6
        assert h.pool.num_allocated_slots() == 0
        assert h.pool.num_available_slots() == 2

    run(chain(2, 3), scenario)


def test_a_burst_of_regions_is_scheduled_a_slice_per_loop_turn() -> None:
    sources = 2 * SCHEDULING_SLICE + 10

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        # The loop gets control back after each slice (heartbeats, RPCs are answered).
        assert h.states("noop-0").count(ES.SCHEDULED) == SCHEDULING_SLICE
        await asyncio.sleep(0)
        assert h.states("noop-0").count(ES.SCHEDULED) == 2 * SCHEDULING_SLICE
        await settle()
        assert h.states("noop-0") == [ES.SCHEDULED] * sources
        assert len(h.rm.requested) == sources
        assert h.offer() == sources
        await settle()
        assert len(h.actions.submitted) == sources

    run(chain(sources, 1), scenario)


def test_regions_cancelled_before_their_slice_came_are_never_scheduled() -> None:
    sources = SCHEDULING_SLICE + 10

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.scheduler.cancel()
        await settle()
        assert h.status() is JobStatus.CANCELED
        assert h.states("noop-0") == [ES.CANCELED] * sources
        assert len(h.rm.requested) == SCHEDULING_SLICE  # the rest never asked for a slot
        assert h.offer() == 0

    run(chain(sources, 1), scenario)


@pytest.mark.parametrize(
    ("producers", "consumers", "reads", "finish_order"),
    [
        # S < T: partition p is read by consumers [ceil(p*T/S), ceil((p+1)*T/S)).
        (3, 7, {0: {0}, 1: {0}, 2: {0}, 3: {1}, 4: {1}, 5: {2}, 6: {2}}, [1, 2, 0]),
        # S > T: consumer i reads partitions [i*S//T, (i+1)*S//T).
        (7, 3, {0: {0, 1}, 1: {2, 3}, 2: {4, 5, 6}}, [0, 2, 4, 5, 1, 6, 3]),
    ],
    ids=["3-to-7", "7-to-3"],
)
def test_pointwise_consumers_start_when_their_own_producers_finished(
    producers: int, consumers: int, reads: dict[int, set[int]], finish_order: list[int]
) -> None:
    job_graph = build_graph(
        {"src": producers, "dst": consumers}, [("src", "dst", POINTWISE, BLOCKING)]
    )

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert h.states("src") == [ES.DEPLOYING] * producers
        assert h.states("dst") == [ES.CREATED] * consumers
        finished: set[int] = set()
        for producer in finish_order:
            h.finish("src", producer)
            finished.add(producer)
            h.offer()
            await settle()
            expected = {c for c, needs in reads.items() if needs <= finished}
            started = {c for c in range(consumers) if h.state("dst", c) is not ES.CREATED}
            assert started == expected, f"after producers {sorted(finished)} finished"
            for c in started:
                assert h.state("dst", c) is ES.DEPLOYING
        assert started == set(range(consumers))
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario)


# src and dst in slot sharing groups of their own: every subtask needs a slot of its own.
SEPARATE = {"src": "src-group", "dst": "dst-group"}


def test_a_region_is_deployed_only_once_all_its_slots_are_assigned() -> None:
    # PIPELINED: the four subtasks form one region and must run together.
    job_graph = build_graph({"src": 2, "dst": 2}, [("src", "dst", A2A, PIPELINED)], groups=SEPARATE)

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert len(h.graph.pipelined_regions()) == 1
        assert len(h.rm.requested) == 4
        assert h.states("src") + h.states("dst") == [ES.SCHEDULED] * 4

        assert h.offer(3) == 3
        await settle()
        assert h.pool.num_allocated_slots() == 3
        assert h.actions.submitted == []
        assert h.states("src") + h.states("dst") == [ES.SCHEDULED] * 4

        assert h.offer(1) == 1
        await settle()
        assert sorted(h.actions.submitted_tasks) == [
            "dst (1/2)",
            "dst (2/2)",
            "src (1/2)",
            "src (2/2)",
        ]
        assert h.states("src") + h.states("dst") == [ES.DEPLOYING] * 4
        slots = {slot.allocation_id for _, slot in h.actions.submitted}
        assert len(slots) == 4  # each subtask in a slot of its own
        for execution, slot in h.actions.submitted:
            assert execution.assigned_resource is slot

        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario)


def test_more_subtasks_than_slots_finish_by_reusing_released_slots() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert len(h.rm.requested) == 4  # one per source subtask
        assert h.offer(2) == 2  # ... but the cluster only ever has two slots
        await settle()
        assert h.actions.submitted_tasks == ["noop-0 (1/4)", "noop-0 (2/4)"]

        h.finish("noop-0", 0)
        await settle()
        # The released slot serves the oldest pending request at once; its RM request goes.
        assert h.state("noop-0", 2) is ES.DEPLOYING
        assert h.actions.submitted[2][1].allocation_id == h.actions.submitted[0][1].allocation_id
        assert h.rm.cancelled == [h.rm.requested[2]]

        # Never offer again: everything else must run in the two slots already held.
        while h.status() is JobStatus.RUNNING:
            deployed = [
                v
                for v in h.graph.all_execution_vertices()
                if v.current_execution.state is ES.DEPLOYING
            ]
            assert deployed, "no progress possible"
            h.finish(deployed[0].job_vertex.name, deployed[0].subtask_index)
            await settle()

        assert h.status() is JobStatus.FINISHED
        assert h.accepted == 2
        assert len(h.actions.submitted) == 8
        assert len({slot.allocation_id for _, slot in h.actions.submitted}) == 2
        # 4 source requests + 2 sink requests the idle slots could not serve at once; every RM
        # request was either fulfilled by one of the two offers or cancelled by slot reuse.
        assert len(h.rm.requested) == 6
        assert len(h.rm.cancelled) == 4
        assert len(h.rm.requested) - len(h.rm.cancelled) == h.accepted
        assert h.pool.num_pending_requests() == 0
        assert h.pool.num_available_slots() == 2

    run(chain(4, 2), scenario)


def test_deployment_superseded_by_cancel_releases_its_slot_and_deploys_nothing() -> None:
    job_graph = build_graph({"src": 1, "dst": 1}, [("src", "dst", A2A, PIPELINED)], groups=SEPARATE)

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        src_request, dst_request = h.rm.requested
        assert h.offer(1) == 1  # src's slot arrives; dst's is still pending
        await settle()
        assert h.pool.num_allocated_slots() == 1
        assert h.actions.submitted == []

        h.scheduler.cancel()
        await settle()
        assert h.state("src", 0) is ES.CANCELED
        assert h.state("dst", 0) is ES.CANCELED
        assert h.status() is JobStatus.CANCELED
        assert h.actions.submitted == []
        assert h.actions.cancelled == []  # nothing was deployed, nothing to cancel remotely
        # The pending request is withdrawn at the RM; the granted slot is handed back.
        assert h.rm.cancelled == [dst_request]
        assert h.pool.num_pending_requests() == 0
        assert h.pool.num_allocated_slots() == 0
        assert [s.allocation_id for s in h.pool.available_slots()] == [src_request]

    run(job_graph, scenario)


def test_deployment_superseded_by_a_restart_releases_its_slot_and_deploys_nothing() -> None:
    # src got its slot, dst's request times out: dst fails, the region {src, dst} restarts, and
    # src's already granted slot must go back instead of deploying the cancelled attempt.
    job_graph = build_graph({"src": 1, "dst": 1}, [("src", "dst", A2A, PIPELINED)], groups=SEPARATE)

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert h.offer(1) == 1
        await settle()
        old_src, old_dst = h.execution("src", 0), h.execution("dst", 0)

        h.timers.advance(REQUEST_TIMEOUT)
        await settle()
        assert old_dst.state is ES.FAILED
        assert old_dst.failure_info is not None
        assert "could not allocate a slot" in old_dst.failure_info.message
        assert old_dst.failure_info.exception_class == "DeadlineExceededError"
        assert old_src.state is ES.CANCELED
        assert h.actions.submitted == []
        assert h.scheduler.restarts == 1

        # Restarted (back-off 0): the new src attempt gets the slot given back, dst asks anew.
        new_src, new_dst = h.execution("src", 0), h.execution("dst", 0)
        assert (new_src.attempt_number, new_dst.attempt_number) == (1, 1)
        assert h.vertex("src", 0).vertex_version == 1
        assert new_src.state is ES.SCHEDULED and new_dst.state is ES.SCHEDULED
        assert h.pool.num_allocated_slots() == 1
        assert h.pool.num_available_slots() == 0
        assert len(h.rm.requested) == 3

        assert h.offer() == 1
        await settle()
        assert [e.attempt_number for e, _ in h.actions.submitted] == [1, 1]
        assert {e.attempt_id for e, _ in h.actions.submitted} == {
            new_src.attempt_id,
            new_dst.attempt_id,
        }
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert h.actions.status_names == ["RUNNING", "FINISHED"]

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.0))


def test_slot_request_timeout_without_restarts_fails_the_job() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        h.timers.advance(REQUEST_TIMEOUT)
        await settle()
        assert h.status() is JobStatus.FAILED
        assert "could not allocate a slot" in h.scheduler.failure_cause
        assert h.states("noop-1") == [ES.CANCELED]
        assert h.actions.submitted == []

    run(chain(1, 2), scenario)


def test_deploy_rpc_failure_fails_the_attempt_naming_task_and_task_executor() -> None:
    async def scenario(h: Harness) -> None:
        h.actions.fail_submission("noop-0 (2/2)", UnavailableError("connection refused"))
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        failed = h.execution("noop-0", 1)
        assert failed.state is ES.FAILED
        assert failed.failure_info is not None
        message = failed.failure_info.message
        assert "could not deploy noop-0 (2/2) attempt #0" in message
        assert short(failed.attempt_id) in message
        assert short(h.te.resource_id) in message
        assert "te-1:6123" in message
        assert "UnavailableError: connection refused" in message
        assert failed.failure_info.exception_class == "UnavailableError"

        record = h.scheduler.exceptions[0]
        assert (record.vertex_name, record.subtask_index, record.attempt_number) == ("noop-0", 1, 0)
        assert record.task_executor == h.te.resource_id
        assert record.exception_type == "UnavailableError"
        # No restarts: the job fails, the other (deployed) subtask is cancelled remotely.
        assert h.status() is JobStatus.FAILING
        assert [e.vertex.subtask_index for e, _ in h.actions.cancelled] == [0]
        assert h.report("noop-0", 0, ES.CANCELED)
        assert h.status() is JobStatus.FAILED
        assert "could not deploy noop-0 (2/2)" in h.scheduler.failure_cause
        assert h.pool.num_allocated_slots() == 0

    run(chain(2, 1), scenario)


# ------------------------------------------------------------------------------------ outcomes


def test_job_finishes_when_every_subtask_finished_collecting_io_and_accumulators() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        for index in range(2):
            h.run("noop-0", index)
            assert h.report(
                "noop-0",
                index,
                ES.FINISHED,
                io=IOCounters(records_in=1, records_out=2, bytes_in=10, bytes_out=20),
                accumulator=b"acc-%d" % index,
            )
            await settle()
        assert h.status() is JobStatus.RUNNING  # noop-1 still to run
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert h.actions.status_names == ["RUNNING", "FINISHED"]
        assert h.scheduler.failure_cause == ""
        assert h.scheduler.exceptions == []
        assert h.scheduler.io["noop-0"] == IOCounters(2, 4, 20, 40)
        assert h.scheduler.accumulators == {"noop-0": {0: b"acc-0", 1: b"acc-1"}}
        assert h.graph.all_vertices_finished

    run(chain(2, 2), scenario)


def test_failure_without_restart_strategy_fails_the_job_with_its_cause() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.run("noop-0", 1)
        assert h.report(
            "noop-0",
            0,
            ES.FAILED,
            message="boom",
            exception_type="ValueError",
            details="Traceback (most recent call last): ...",
        )
        await settle()
        # The job fails; what still runs is cancelled first.
        assert h.status() is JobStatus.FAILING
        assert h.state("noop-0", 1) is ES.CANCELING
        assert [e.vertex.subtask_index for e, _ in h.actions.cancelled] == [1]
        assert h.states("noop-1") == [ES.CANCELED, ES.CANCELED]

        assert h.report("noop-0", 1, ES.CANCELED)
        assert h.status() is JobStatus.FAILED
        assert h.actions.status_names == ["RUNNING", "FAILING", "FAILED"]
        cause = h.scheduler.failure_cause
        assert "noop-0 (1/2) attempt #0" in cause
        assert "boom" in cause
        assert "no restart left" in cause
        assert h.actions.statuses[-1] == (JobStatus.FAILED, cause)
        assert h.scheduler.restarts == 0

        [record] = h.scheduler.exceptions
        assert record.vertex_name == "noop-0"
        assert record.subtask_index == 0
        assert record.attempt_number == 0
        assert record.message == "boom"
        assert record.exception_type == "ValueError"
        assert record.details.startswith("Traceback")
        assert record.task_executor == h.te.resource_id
        assert len(h.actions.submitted) == 2
        assert h.pool.num_allocated_slots() == 0

    run(chain(2, 2), scenario)


# ------------------------------------------------------------------------------------ restarts


def test_a_failure_that_suppresses_restarts_fails_the_job_despite_restarts_left() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.run("noop-0", 1)
        # The report carries the decision; the exception's name plays no part in it.
        assert h.report(
            "noop-0",
            0,
            ES.FAILED,
            message="cannot load",
            exception_type="MyError",
            suppress_restarts=True,
        )
        await settle()
        assert h.status() is JobStatus.FAILING
        assert h.report("noop-0", 1, ES.CANCELED)
        assert h.status() is JobStatus.FAILED
        assert h.scheduler.restarts == 0
        assert "restarting cannot help" in h.scheduler.failure_cause

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))


def test_a_failure_named_like_suppress_restarts_without_the_flag_is_restarted() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        assert h.report("noop-0", 0, ES.FAILED, message="x", exception_type="SuppressRestartsError")
        await settle()
        assert h.scheduler.restarts == 1
        assert h.status() is JobStatus.RUNNING

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))


def test_fixed_delay_region_failover_retries_only_the_failed_subtask() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.run("noop-0", 1)
        untouched = h.execution("noop-0", 1)
        failed = h.execution("noop-0", 0)
        assert h.report("noop-0", 0, ES.FAILED, message="flaky")
        await settle()
        # The back-off (50 ms) has not passed yet.
        assert h.execution("noop-0", 0) is failed
        assert h.scheduler.restarts == 1
        await asyncio.sleep(0.1)
        await settle()

        retried = h.execution("noop-0", 0)
        assert retried is not failed
        assert retried.attempt_number == 1
        assert h.vertex("noop-0", 0).prior_executions == [failed]
        assert retried.state is ES.DEPLOYING  # in the slot its failed attempt gave back
        assert len(h.rm.requested) == 2
        # The other subtask is not part of the failed region: it keeps running undisturbed.
        assert h.execution("noop-0", 1) is untouched
        assert untouched.state is ES.RUNNING
        assert h.actions.cancelled == []
        assert h.states("noop-1") == [ES.CREATED, ES.CREATED]
        assert h.status() is JobStatus.RUNNING
        assert "RESTARTING" not in h.actions.status_names

        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert len(h.scheduler.exceptions) == 1
        assert h.actions.status_names == ["RUNNING", "FINISHED"]

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.05))


def test_region_failover_restarts_the_region_and_started_downstream_regions_only() -> None:
    # Region R = {a0, b0, b1} (PIPELINED); c0 and c1 are regions of their own (BLOCKING), c0
    # reading b0 and c1 reading b1.
    job_graph = build_graph(
        {"a": 1, "b": 2, "c": 2},
        [("a", "b", POINTWISE, PIPELINED), ("b", "c", POINTWISE, BLOCKING)],
    )

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert len(h.graph.pipelined_regions()) == 3
        for name, index in (("a", 0), ("b", 0), ("b", 1)):
            h.run(name, index)
        h.finish("b", 0)
        await settle()
        h.run("c", 0)  # c0 started: its input is complete
        assert h.state("c", 1) is ES.CREATED
        requests_before = len(h.rm.requested)
        old = {(n, i): h.execution(n, i) for n, i in (("a", 0), ("b", 0), ("b", 1), ("c", 0))}

        assert h.report("b", 1, ES.FAILED, message="disk full")
        await settle()
        assert h.status() is JobStatus.RUNNING
        assert h.state("a", 0) is ES.CANCELING
        assert h.state("c", 0) is ES.CANCELING
        assert sorted(e.vertex.task_name_with_subtask for e, _ in h.actions.cancelled) == [
            "a (1/1)",
            "c (1/2)",
        ]
        # Nothing restarts before every attempt of the restarted set is terminal.
        assert h.report("a", 0, ES.CANCELED)
        await settle()
        assert h.execution("a", 0) is old["a", 0]
        assert h.report("c", 0, ES.CANCELED)
        await settle()

        for key, execution in old.items():
            assert h.execution(*key).attempt_number == 1, key
            assert h.execution(*key) is not execution
        assert h.execution("c", 1).attempt_number == 0  # never started: left alone
        assert h.state("c", 1) is ES.CREATED
        # Region R runs again in the slots it gave back; c0 waits for b0 to finish again.
        assert [h.state("a", 0), h.state("b", 0), h.state("b", 1)] == [ES.DEPLOYING] * 3
        assert h.state("c", 0) is ES.CREATED
        assert len(h.rm.requested) == requests_before
        assert "RESTARTING" not in h.actions.status_names

        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert h.scheduler.restarts == 1

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.0))


def test_full_failover_restarts_everything_passing_restarting() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.finish("noop-0", 0)
        h.run("noop-0", 1)
        h.run("noop-0", 2)
        await settle()

        assert h.report("noop-0", 2, ES.FAILED, message="oops")
        await settle()
        assert h.status() is JobStatus.RESTARTING
        assert h.state("noop-0", 1) is ES.CANCELING
        assert [e.vertex.subtask_index for e, _ in h.actions.cancelled] == [1]
        assert h.states("noop-1") == [ES.CANCELED] * 3
        assert h.report("noop-0", 1, ES.CANCELED)
        await settle()

        assert h.status() is JobStatus.RUNNING
        assert h.actions.status_names == ["RUNNING", "RESTARTING", "RUNNING"]
        assert h.actions.statuses[1][1].startswith("noop-0 (3/3) attempt #0")
        # Every subtask restarts - also the finished one and the never started consumers.
        for vertex in h.graph.all_execution_vertices():
            assert vertex.current_execution.attempt_number == 1, vertex
        assert h.states("noop-0") == [ES.DEPLOYING] * 3
        assert h.states("noop-1") == [ES.CREATED] * 3

        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert h.actions.status_names == ["RUNNING", "RESTARTING", "RUNNING", "FINISHED"]

    run(
        chain(3, 2),
        scenario,
        restart_strategy=FixedDelayRestartStrategy(2, 0.0),
        failover="full",
    )


def test_job_fails_once_the_fixed_delay_attempts_are_used_up() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert h.report("noop-0", 0, ES.FAILED, message="first")
        await settle()
        assert h.execution("noop-0", 0).attempt_number == 1
        assert h.status() is JobStatus.RUNNING

        assert h.report("noop-0", 0, ES.FAILED, message="second")
        await settle()
        assert h.status() is JobStatus.FAILED
        assert h.execution("noop-0", 0).attempt_number == 1  # no third attempt
        assert "second" in h.scheduler.failure_cause
        assert "fixed-delay (1 restart attempts" in h.scheduler.failure_cause
        assert [r.message for r in h.scheduler.exceptions] == ["first", "second"]
        assert [r.attempt_number for r in h.scheduler.exceptions] == [0, 1]
        assert h.scheduler.restarts == 1

    run(chain(1, 1), scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.0))


# ------------------------------------------------------------------------------------ cancel


@pytest.mark.parametrize("late_report", [ES.FAILED, ES.FINISHED, ES.CANCELED])
def test_cancel_while_running(late_report: ExecutionState) -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        assert h.offer(1) == 1  # noop-0 #0 gets a slot, noop-0 #1 keeps waiting
        await settle()
        h.run("noop-0", 0)
        pending_request = h.open_requests()[0]

        h.scheduler.cancel()
        await settle()
        assert h.status() is JobStatus.CANCELLING
        # Deployed: a cancel RPC; waiting for a slot: withdrawn; never scheduled: cancelled.
        assert h.state("noop-0", 0) is ES.CANCELING
        assert [e.attempt_id for e, _ in h.actions.cancelled] == [
            h.execution("noop-0", 0).attempt_id
        ]
        assert h.state("noop-0", 1) is ES.CANCELED
        assert h.rm.cancelled == [pending_request]
        assert h.pool.num_pending_requests() == 0
        assert h.states("noop-1") == [ES.CANCELED, ES.CANCELED]

        # Whatever the task executor reports now, the cancellation wins.
        assert h.report("noop-0", 0, late_report, message="interrupted")
        assert h.state("noop-0", 0) is ES.CANCELED
        assert h.status() is JobStatus.CANCELED
        assert h.actions.status_names == ["RUNNING", "CANCELLING", "CANCELED"]
        assert h.scheduler.exceptions == []
        assert h.scheduler.restarts == 0
        assert h.pool.num_allocated_slots() == 0
        assert h.pool.num_available_slots() == 1

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(5, 0.0))


def test_cancel_rpc_failure_counts_as_cancelled() -> None:
    async def scenario(h: Harness) -> None:
        h.actions.cancel_failure = NotFoundError("no such task")
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.scheduler.cancel()
        await settle()
        assert h.state("noop-0", 0) is ES.CANCELED
        assert h.status() is JobStatus.CANCELED
        assert h.pool.num_allocated_slots() == 0

    run(chain(1, 1), scenario)


def test_cancel_before_any_slot_arrived_cancels_at_once() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        requests = list(h.rm.requested)
        h.scheduler.cancel()
        await settle()
        assert h.status() is JobStatus.CANCELED
        assert sorted(h.rm.cancelled) == sorted(requests)
        # A slot arriving late is not wanted any more.
        assert h.offer() == 0
        assert h.actions.submitted == []
        h.scheduler.cancel()  # idempotent
        assert h.actions.status_names == ["RUNNING", "CANCELLING", "CANCELED"]

    run(chain(2, 1), scenario)


# ------------------------------------------------------------------------------------ reports


def test_stale_and_illegal_state_updates_are_ignored() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        old = h.execution("noop-0", 0)
        h.run("noop-0", 0)
        assert h.report("noop-0", 0, ES.FAILED, message="first")
        await settle()
        new = h.execution("noop-0", 0)
        assert new is not old
        assert new.state is ES.DEPLOYING

        # Reports about the superseded attempt change nothing.
        for state in (ES.RUNNING, ES.FINISHED, ES.FAILED, ES.CANCELED):
            assert h.scheduler.update_task_execution_state(old.attempt_id, state) is False
        assert old.state is ES.FAILED
        assert new.state is ES.DEPLOYING
        # Unknown attempts, DEPLOYING (the job master's own state) and illegal moves neither.
        assert h.scheduler.update_task_execution_state(new_attempt_id(), ES.RUNNING) is False
        assert h.report("noop-0", 0, ES.DEPLOYING) is False
        h.run("noop-0", 0)
        assert h.report("noop-0", 0, ES.INITIALIZING) is False
        assert h.state("noop-0", 0) is ES.RUNNING
        assert h.report("noop-0", 0, ES.FINISHED) is True
        assert h.report("noop-0", 0, ES.FINISHED) is False  # a duplicate
        assert h.report("noop-0", 0, ES.FAILED) is False  # terminal stays terminal
        assert h.state("noop-0", 0) is ES.FINISHED
        assert h.status() is JobStatus.FINISHED
        assert len(h.scheduler.exceptions) == 1

    run(chain(1, 1), scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.0))


def test_a_fast_task_may_finish_before_reporting_running() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert h.report("noop-0", 0, ES.FINISHED)  # straight from DEPLOYING
        assert h.status() is JobStatus.FINISHED

    run(chain(1, 1), scenario)


# ------------------------------------------------------------------------------------ slot loss


def test_slot_lost_fails_the_running_attempt() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        _, slot = h.actions.submitted[0]

        lost = h.pool.fail_slot(slot.allocation_id, ConnectionError("task executor vanished"))
        assert lost is slot
        await settle()
        execution = h.execution("noop-0", 0)
        assert execution.state is ES.FAILED
        assert execution.failure_info is not None
        message = execution.failure_info.message
        assert "lost its slot on task executor" in message
        assert short(h.te.resource_id) in message
        assert "te-1:6123" in message
        assert "task executor vanished" in message
        assert execution.failure_info.exception_class == "ConnectionError"
        assert h.status() is JobStatus.FAILED
        assert h.scheduler.exceptions[0].task_executor == h.te.resource_id
        assert h.pool.num_allocated_slots() == 0
        assert h.pool.num_available_slots() == 0  # the lost slot is gone, not reused

    run(chain(1, 1), scenario)


def test_slot_lost_with_restart_reruns_the_attempt_in_a_new_slot() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.pool.release_task_executor(h.te.resource_id, ConnectionError("heartbeat timeout"))
        await settle()
        assert h.execution("noop-0", 0).attempt_number == 1
        assert h.state("noop-0", 0) is ES.SCHEDULED
        assert len(h.rm.requested) == 2  # the lost slot cannot be reused
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(chain(1, 1), scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.0))


def test_slot_lost_while_canceling_completes_the_cancellation() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.scheduler.cancel()
        await settle()
        assert h.state("noop-0", 0) is ES.CANCELING
        _, slot = h.actions.submitted[0]
        h.pool.fail_slot(slot.allocation_id, ConnectionError("gone"))
        assert h.state("noop-0", 0) is ES.CANCELED
        assert h.status() is JobStatus.CANCELED
        assert h.scheduler.exceptions == []

    run(chain(1, 1), scenario)


# ------------------------------------------------------------------------------------ back-off


class ChangingBackoffStrategy:
    """Restarts forever; each ``backoff_s`` call answers the next value (like a jittered one)."""

    def __init__(self, backoffs: list[float]) -> None:
        self.backoffs = list(backoffs)
        self.failures: list[float] = []

    def notify_failure(self, timestamp: float) -> None:
        self.failures.append(timestamp)

    def can_restart(self) -> bool:
        return True

    def backoff_s(self) -> float:
        return self.backoffs.pop(0)

    def describe(self) -> str:
        return "changing back-off"


def test_restart_waits_the_back_off_it_asked_for_once() -> None:
    strategy = ChangingBackoffStrategy([0.0, 60.0, 60.0])

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert h.report("noop-0", 0, ES.FAILED, message="x")
        await settle()
        assert len(strategy.failures) == 1
        assert len(strategy.backoffs) == 2  # asked exactly once per failure
        assert h.execution("noop-0", 0).attempt_number == 1  # restarted after 0 s, not 60 s

    run(chain(1, 1), scenario, restart_strategy=strategy)


def test_cancel_during_restart_back_off_cancels_and_never_restarts() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert h.report("noop-0", 0, ES.FAILED, message="x")
        await settle()
        assert h.status() is JobStatus.RESTARTING
        h.scheduler.cancel()
        assert h.status() is JobStatus.CANCELED
        await asyncio.sleep(0.1)  # past the back-off
        await settle()
        assert h.execution("noop-0", 0).attempt_number == 0
        assert h.actions.status_names == ["RUNNING", "RESTARTING", "CANCELLING", "CANCELED"]
        assert len(h.actions.submitted) == 1

    run(
        chain(1, 1),
        scenario,
        restart_strategy=FixedDelayRestartStrategy(3, 0.05),
        failover="full",
    )


def test_no_consumer_starts_on_the_output_of_a_producer_awaiting_restart() -> None:
    # c0 reads b0 (in region R = {a0, b0, b1}) and x0. b1 fails after b0 finished; c0 had not
    # started, so it is not restarted - but it must not start during the back-off either, on
    # b0's superseded output: only once b0's new attempt finished.
    job_graph = build_graph(
        {"a": 1, "b": 2, "x": 2, "c": 2},
        [
            ("a", "b", POINTWISE, PIPELINED),
            ("b", "c", POINTWISE, BLOCKING),
            ("x", "c", POINTWISE, BLOCKING),
        ],
    )

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        for name, index in (("a", 0), ("b", 0), ("b", 1), ("x", 0), ("x", 1)):
            h.run(name, index)
        h.finish("b", 0)
        assert h.report("b", 1, ES.FAILED, message="y")
        assert h.report("a", 0, ES.CANCELED)
        await settle()
        assert h.execution("b", 0).attempt_number == 0  # back-off still running

        h.finish("x", 0)  # c0's other input completes during the back-off
        h.offer()
        await settle()
        assert h.state("c", 0) is ES.CREATED

        await asyncio.sleep(0.1)
        await settle()
        assert h.execution("b", 0).attempt_number == 1
        assert h.state("c", 0) is ES.CREATED
        h.run("a", 0)
        h.run("b", 1)
        h.finish("b", 0)
        h.offer()
        await settle()
        assert h.state("c", 0) is ES.DEPLOYING
        assert h.execution("c", 0).attempt_number == 0
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.05))
