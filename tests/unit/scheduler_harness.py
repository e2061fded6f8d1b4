"""The DefaultScheduler's test harness.

A real :class:`DefaultScheduler` drives a real :class:`SlotPool` and a real
:class:`ExecutionGraph`; only the outside world is faked, by hand-written recorders:
:class:`TestingSchedulerActions` (task executor RPCs and job status notifications) and
:class:`TestingSlotPoolActions` (resource manager requests). Slot requests are fulfilled by
offering slots to the pool, exactly as a task executor would; task progress is reported through
``update_task_execution_state`` exactly as the job master does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sparkmill.common.core.errors import RpcError
from sparkmill.common.core.ids import (
    AllocationID,
    JobVertexID,
    ResourceID,
    new_dataset_id,
    new_job_id,
    new_resource_id,
    new_vertex_id,
)
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.common.jobgraph.auto_parallelism import AutoParallelismSettings
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
from sparkmill.common.runtime.settings import SpeculativeSettings
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    Execution,
    ExecutionGraph,
    ExecutionVertex,
)
from sparkmill.services.jobmaster.scheduler.adaptive_parallelism import AdaptiveParallelism
from sparkmill.services.jobmaster.scheduler.default_scheduler import DefaultScheduler
from sparkmill.services.jobmaster.scheduler.restart_strategy import (
    NoRestartStrategy,
    RestartStrategy,
)
from sparkmill.services.jobmaster.scheduler.scheduler_interfaces import ProgressListener
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

    def submit_task(self, execution: Execution, slot: PhysicalSlot) -> asyncio.Future[None]:
        self.submitted.append((execution, slot))
        answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        error = self.submit_failures.pop(execution.vertex.task_name_with_subtask, None)
        if error is not None:
            answered.set_exception(error)
        else:
            answered.set_result(None)
        return answered

    def cancel_task(
        self, execution: Execution, slot: PhysicalSlot
    ) -> asyncio.Future[RpcError | None]:
        self.cancelled.append((execution, slot))
        answered: asyncio.Future[RpcError | None] = asyncio.get_running_loop().create_future()
        answered.set_result(self.cancel_failure)
        return answered

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
        self.excluded: dict[AllocationID, frozenset[ResourceID]] = {}
        self.scheduler: DefaultScheduler | None = None

    def request_slot_from_resource_manager(
        self,
        allocation_id: AllocationID,
        resource_profile: ResourceProfile,
        excluded: frozenset[ResourceID] = frozenset(),
    ) -> None:
        self.requested.append(allocation_id)
        self.excluded[allocation_id] = excluded

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
    late_bounds: dict[JobVertexID, int] | None = None,
    auto_settings: AutoParallelismSettings | None = None,
    speculative: SpeculativeSettings | None = None,
    clock: Callable[[], float] = time.time,
) -> None:
    """Run ``scenario`` against a real scheduler of ``job_graph``. With ``late_bounds`` (and
    ``auto_settings``) those vertices are decided from what their producers wrote;
    ``speculative`` configures speculative execution, ``clock`` the graph's timestamps."""

    async def main() -> None:
        timers = ManualTimerService()
        rm = TestingSlotPoolActions()
        pool = SlotPool(job_graph.job_id, timers, rm, REQUEST_TIMEOUT, IDLE_TIMEOUT)
        pool.connect_to_resource_manager()
        graph = ExecutionGraph.build(job_graph, late_bounds=late_bounds, clock=clock)
        actions = TestingSchedulerActions()
        scheduler = DefaultScheduler(
            graph,
            pool,
            actions,
            restart_strategy or NoRestartStrategy(),
            failover_strategy=failover,
            progress=progress,
            adaptive=AdaptiveParallelism(graph, auto_settings) if late_bounds else None,
            speculative=speculative,
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


# src and dst in slot sharing groups of their own: every subtask needs a slot of its own.
SEPARATE = {"src": "src-group", "dst": "dst-group"}


# ------------------------------------------------------------------------------------ back-off


class ChangingBackoffStrategy:
    """Restarts forever; each ``backoff_s`` call answers the next value (like a jittered one)."""

    merges_concurrent_failures = False

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
