"""The execution graph: the parallel, run-time form of a
:class:`~sparkmill.common.jobgraph.model.JobGraph`.

:meth:`ExecutionGraph.build` expands the job graph, vertex by vertex in topological order:

* one :class:`ExecutionJobVertex` per job vertex, holding one :class:`ExecutionVertex` per
  subtask (``parallelism`` of them) and one :class:`IntermediateResult` per produced data set,
  which has one partition per producer subtask;
* each consumer is connected to the results it reads, POINTWISE or ALL_TO_ALL (see
  :mod:`sparkmill.services.jobmaster.executiongraph.edge_manager`);
* each execution vertex starts with one :class:`Execution` (attempt 0) in state CREATED.

:meth:`ExecutionGraph.build_in_steps` does the same a chunk of work at a time (a generator), so
the JobMaster can build a 10,000 x 10,000 job without holding its event loop for long (see
:mod:`~sparkmill.services.jobmaster.executiongraph.graph_building`).

An :class:`Execution` is one attempt to run a subtask. Its state changes are checked against
:data:`~sparkmill.common.core.states.EXECUTION_STATE_TRANSITIONS`; the graph reacts to each change
in O(1) per affected group: it keeps the per-state counts, marks the produced partitions finished
when an attempt FINISHES (so consumability checks are O(1)), and indexes current attempts by id.
:meth:`ExecutionGraph.reset_vertex_for_new_execution` replaces a terminal attempt with a new one.

The job status is not kept here: it belongs to the job master, which uses :meth:`state_counts`
and the ``all_vertices_*`` properties to decide it.

Nothing here is thread-safe: the graph lives on the job master's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import (
    ExecutionAttemptID,
    IntermediateDataSetID,
    JobID,
    JobVertexID,
    short,
)
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.jobgraph.model import (
    DistributionPattern,
    JobEdge,
    JobGraph,
    JobVertex,
    ResultPartitionType,
)
from sparkmill.services.jobmaster.executiongraph.edge_manager import connect_in_steps
from sparkmill.services.jobmaster.executiongraph.execution_topology import (
    ConsumedPartitionGroup,
    ConsumerVertexGroup,
    Execution,
    ExecutionJobVertex,
    ExecutionVertex,
    ExecutionVertexID,
    FailureInfo,
    IntermediateResult,
    IntermediateResultPartition,
    PartitionID,
    PipelinedRegion,
)
from sparkmill.services.jobmaster.executiongraph.pipelined_regions import (
    compute_pipelined_regions,
    compute_pipelined_regions_in_steps,
)

MAX_PRIOR_ATTEMPTS_KEPT = 16
"""How many superseded attempts an execution vertex remembers (for failure history displays)."""

BUILD_CHUNK = 512
"""Units of work between two pauses of :meth:`ExecutionGraph.build_in_steps`: about 2-5 ms of
CPU on an idle core."""

_TERMINAL_STATES = tuple(s for s in ExecutionState if s.is_terminal)


class ExecutionGraph:
    """All execution vertices of one job, their wiring, and their current attempts."""

    def __init__(
        self,
        job_graph: JobGraph,
        clock: Callable[[], float] = time.time,
        late_bounds: Mapping[JobVertexID, int] | None = None,
    ) -> None:
        """An empty graph; use :meth:`build`."""
        self.job_graph = job_graph
        self._clock = clock
        # Vertices decided after their producers ran -> the sub-partitions those write.
        self.late_bounds: dict[JobVertexID, int] = dict(late_bounds or {})
        # The one edge reading each data set (its consumer and how it reads).
        self._reader: dict[IntermediateDataSetID, JobEdge] = {
            edge.source: edge for vertex in job_graph.vertices for edge in vertex.inputs
        }
        self._parallelism = {vertex.id: vertex.parallelism for vertex in job_graph.vertices}
        self._job_vertices: dict[JobVertexID, ExecutionJobVertex] = {}
        # Not initialized yet (no subtasks, no wiring), in topological order.
        self._uninitialized: dict[JobVertexID, ExecutionJobVertex] = {}
        self._vertices: list[ExecutionVertex] = []  # all of them, in topological order
        self._results: dict[IntermediateDataSetID, IntermediateResult] = {}
        self._groups: list[ConsumedPartitionGroup] = []  # every group once
        self._executions: dict[ExecutionAttemptID, Execution] = {}  # live and current attempts
        self._state_counts: dict[ExecutionState, int] = dict.fromkeys(ExecutionState, 0)
        self._regions: list[PipelinedRegion] | None = None
        # Why each vertex the pipeline left open got its parallelism (for the status views).
        self.parallelism_decisions: dict[JobVertexID, str] = {}

    @classmethod
    def build(
        cls,
        job_graph: JobGraph,
        *,
        clock: Callable[[], float] = time.time,
        late_bounds: Mapping[JobVertexID, int] | None = None,
    ) -> ExecutionGraph:
        """Expand ``job_graph`` in one go. ``clock`` gives the wall-clock state timestamps.

        The vertices of ``late_bounds`` (left at ``AUTO_PARALLELISM``), and every vertex
        reading from one of them, stay uninitialized until :meth:`initialize_vertices`.
        Raises ``ValueError`` on a cycle, on an input whose data set is unknown, or on a
        parallelism below 1 (the dispatcher's validation should have refused such a graph).
        """
        steps = cls.build_in_steps(job_graph, clock=clock, late_bounds=late_bounds)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                graph: ExecutionGraph = done.value
                return graph

    @classmethod
    def build_in_steps(
        cls,
        job_graph: JobGraph,
        *,
        clock: Callable[[], float] = time.time,
        chunk: int = BUILD_CHUNK,
        late_bounds: Mapping[JobVertexID, int] | None = None,
    ) -> Generator[None, None, ExecutionGraph]:
        """:meth:`build` as a generator that pauses (yields) after about ``chunk`` units of work
        (a subtask with its partitions, or a subtask or partition wired into a group) and
        returns the graph when exhausted; the same errors are raised while it runs.

        The graph is complete only at the end: whoever drives the steps must not hand it to
        anyone before, and may drop it (closing the generator) at any pause.
        """
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, not {chunk}")
        graph = cls(job_graph, clock, late_bounds)
        for job_vertex in job_graph.topological_order():
            yield from graph._attach_in_steps(job_vertex, chunk)
        # The regions too: the scheduler and the recovery ask for them first thing.
        graph._regions = yield from compute_pipelined_regions_in_steps(
            graph._vertices, graph._groups, chunk=chunk
        )
        return graph

    def _attach_in_steps(self, job_vertex: JobVertex, chunk: int) -> Iterator[None]:
        if job_vertex.id in self._job_vertices:
            raise ValueError(f"vertex '{job_vertex.name}' appears twice in the job graph")
        for edge in job_vertex.inputs:
            if edge.source not in self._results:  # topological_order() checked this already
                raise ValueError(f"vertex '{job_vertex.name}' reads unknown data set {edge.source}")
        ready = job_vertex.id not in self.late_bounds and all(
            self._results[edge.source].producer.initialized for edge in job_vertex.inputs
        )
        ejv = ExecutionJobVertex(
            self, job_vertex, len(self._vertices), create_subtasks=False, initialized=ready
        )
        for result in ejv.produced_results:
            if result.id in self._results:
                raise ValueError(f"data set {result.id} is produced twice")
            self._results[result.id] = result
        self._job_vertices[job_vertex.id] = ejv
        if ready:
            yield from self._initialize_in_steps(ejv, chunk)
        else:
            self._uninitialized[job_vertex.id] = ejv
        yield

    def _initialize_in_steps(self, ejv: ExecutionJobVertex, chunk: int) -> Iterator[None]:
        """Create the subtasks of ``ejv`` (whose producers are all initialized) and wire them."""
        ejv._first_index = len(self._vertices)
        ejv.initialized = True
        for result in ejv.produced_results:
            result.subpartitions = self._subpartitions_of(result.id)
        while not ejv.has_all_subtasks:
            created = ejv.add_subtasks(chunk)
            self._vertices.extend(created)
            executions = self._executions
            for ev in created:
                execution = ev.current_execution
                executions[execution.attempt_id] = execution
            self._state_counts[ExecutionState.CREATED] += len(created)
            yield
        for edge in ejv.job_vertex.inputs:
            result = self._results[edge.source]
            ejv.inputs.append(result)
            wired = 0
            for group in connect_in_steps(ejv, result, edge.pattern):
                self._groups.append(group)
                wired += len(group.partitions) + len(group.consumer_vertex_group.vertices)
                if wired >= chunk:
                    wired = 0
                    yield

    def _subpartitions_of(self, dataset_id: IntermediateDataSetID) -> int:
        """How many sub-partitions the producers of ``dataset_id`` write: the consumer's
        parallelism, or its bound when it is decided only after they ran (0: no consumer)."""
        edge = self._reader.get(dataset_id)
        if edge is None:
            return 0
        if edge.pattern is DistributionPattern.ALL_TO_ALL and edge.target in self.late_bounds:
            return self.late_bounds[edge.target]
        consumer = self._job_vertices.get(edge.target)
        # While the graph is built, the consumer (later in topological order) is not yet here.
        parallelism = (
            consumer.parallelism if consumer is not None else self._parallelism[edge.target]
        )
        if parallelism < 1:
            raise IllegalStateBug(
                f"data set {short(dataset_id)} is read POINTWISE by a vertex whose parallelism "
                "is not decided yet: its producers cannot be wired"
            )
        return parallelism

    # ---------------------------------------------------------------- late initialization

    @property
    def uninitialized_job_vertices(self) -> list[ExecutionJobVertex]:
        """The job vertices without subtasks yet, in topological order."""
        return list(self._uninitialized.values())

    def initialize_vertices(self, decided: Mapping[JobVertexID, int]) -> list[ExecutionVertex]:
        """Give the open vertices of ``decided`` their parallelism, then initialize every
        vertex that now can be (its parallelism known, its producers initialized), in
        topological order; returns the subtasks created (each its own region: only
        all-BLOCKING graphs decide late, see ``plan_parallelism``)."""
        for vertex_id, parallelism in decided.items():
            ejv = self._uninitialized.get(vertex_id)
            if ejv is None:
                raise IllegalStateBug(f"vertex {short(vertex_id)} is not waiting for a decision")
            ejv.decide(parallelism)
        created_from = len(self._vertices)
        for ejv in list(self._uninitialized.values()):
            if ejv.job_vertex.is_auto or not all(r.producer.initialized for r in self._inputs(ejv)):
                continue
            del self._uninitialized[ejv.id]
            for _ in self._initialize_in_steps(ejv, len(self._vertices) + 1):
                pass
        created = self._vertices[created_from:]
        if self._regions is not None:
            for vertex in created:
                if any(
                    g.result_type is not ResultPartitionType.BLOCKING
                    for g in vertex.consumed_partition_groups
                ):
                    raise IllegalStateBug(
                        f"{vertex!r} reads a PIPELINED result but was decided late"
                    )
                region = PipelinedRegion(len(self._regions), [vertex])
                region.blocking_consumed_groups = tuple(vertex.consumed_partition_groups)
                vertex._region = region
                self._regions.append(region)
        return created

    def _inputs(self, ejv: ExecutionJobVertex) -> list[IntermediateResult]:
        return [self._results[edge.source] for edge in ejv.job_vertex.inputs]

    # ---------------------------------------------------------------- structure queries

    @property
    def job_id(self) -> JobID:
        return self.job_graph.job_id

    @property
    def job_name(self) -> str:
        return self.job_graph.name

    @property
    def job_vertices(self) -> list[ExecutionJobVertex]:
        """In topological order (producers before consumers)."""
        return list(self._job_vertices.values())

    def job_vertex(self, job_vertex_id: JobVertexID) -> ExecutionJobVertex:
        """Raises ``KeyError`` for an unknown id."""
        return self._job_vertices[job_vertex_id]

    def vertex(self, job_vertex_id: JobVertexID, subtask_index: int) -> ExecutionVertex:
        """Raises ``KeyError`` for an unknown vertex or ``IndexError`` for a bad subtask."""
        if subtask_index < 0:
            raise IndexError(f"subtask index {subtask_index} is negative")
        return self._job_vertices[job_vertex_id].task_vertices[subtask_index]

    def vertex_by_id(self, vertex_id: ExecutionVertexID) -> ExecutionVertex:
        return self.vertex(vertex_id.job_vertex_id, vertex_id.subtask_index)

    def all_execution_vertices(self) -> Iterator[ExecutionVertex]:
        """Every execution vertex, job vertex by job vertex in topological order."""
        return iter(self._vertices)

    @property
    def num_execution_vertices(self) -> int:
        return len(self._vertices)

    def result(self, dataset_id: IntermediateDataSetID) -> IntermediateResult:
        """Raises ``KeyError`` for an unknown data set."""
        return self._results[dataset_id]

    def partition(self, partition_id: PartitionID) -> IntermediateResultPartition:
        """Raises ``KeyError`` / ``IndexError`` for an unknown partition."""
        return self._results[partition_id.dataset_id].partitions[partition_id.partition_number]

    def consumed_partition_groups(self) -> list[ConsumedPartitionGroup]:
        """Every consumed partition group of the graph, each once."""
        return list(self._groups)

    def producers_of(self, vertex: ExecutionVertex) -> list[ExecutionVertex]:
        """The distinct vertices whose partitions ``vertex`` reads, in input order."""
        found: dict[int, ExecutionVertex] = {}
        for group in vertex.consumed_partition_groups:
            for partition in group.partitions:
                found.setdefault(id(partition.producer), partition.producer)
        return list(found.values())

    def consumers_of(self, partition: IntermediateResultPartition) -> list[ExecutionVertex]:
        """The distinct vertices that read ``partition``."""
        groups = partition.consumer_vertex_groups
        if len(groups) == 1:
            return list(groups[0].vertices)
        found: dict[int, ExecutionVertex] = {}
        for group in groups:
            for consumer in group.vertices:
                found.setdefault(id(consumer), consumer)
        return list(found.values())

    def downstream_groups(self, vertex: ExecutionVertex) -> list[ConsumedPartitionGroup]:
        """The distinct groups that read a partition of ``vertex``: after it finishes, these
        are the ones that may have become consumable."""
        found: dict[int, ConsumedPartitionGroup] = {}
        for partition in vertex.produced_partitions:
            for group in partition.consumed_partition_groups:
                found.setdefault(id(group), group)
        return list(found.values())

    @staticmethod
    def is_consumable(group: ConsumedPartitionGroup) -> bool:
        """True when every producer of ``group`` has FINISHED its current attempt. O(1)."""
        return group.is_consumable

    # ---------------------------------------------------------------- attempts

    def execution(self, attempt_id: ExecutionAttemptID) -> Execution | None:
        """The current (or another live, speculative) attempt with this id; None for an
        unknown or superseded attempt (a report about it is stale and must be refused)."""
        return self._executions.get(attempt_id)

    def reset_vertex_for_new_execution(self, vertex: ExecutionVertex) -> Execution:
        """Replace the vertex's terminal attempt by a new CREATED one and return it.

        The attempt number and the vertex version go up by one, the vertex's partitions become
        unfinished again, and the old attempt is no longer found by :meth:`execution`.
        Resetting a vertex whose attempt is not terminal is a bug (:class:`IllegalStateBug`).
        """
        if vertex._graph is not self:
            raise IllegalStateBug(f"{vertex!r} belongs to another execution graph")
        old = vertex.current_execution
        if not old.state.is_terminal:
            raise IllegalStateBug(
                f"cannot reset {old.description}: it is {old.state.name}, not terminal"
            )
        for partition in vertex.produced_partitions:
            partition.mark_unfinished()
        new = Execution(vertex, vertex.new_attempt_number(), self._clock())
        _remember_prior(vertex, old)
        vertex.current_execution = new
        vertex.vertex_version += 1
        del self._executions[old.attempt_id]
        self._executions[new.attempt_id] = new
        self._state_counts[old.state] -= 1
        self._state_counts[ExecutionState.CREATED] += 1
        return new

    def restore_finished(
        self,
        vertex: ExecutionVertex,
        attempt_id: ExecutionAttemptID,
        attempt_number: int,
        task_executor_id: str,
    ) -> Execution:
        """Make a finished attempt of an earlier JobMaster the vertex's current attempt.

        Used when a JobMaster takes over a job whose results are still readable: consumers are
        then deployed with ``attempt_id``'s partitions. Only an untouched vertex (attempt 0,
        still CREATED) can be restored; anything else is a bug.
        """
        if vertex._graph is not self:
            raise IllegalStateBug(f"{vertex!r} belongs to another execution graph")
        current = vertex.current_execution
        if current.state is not ExecutionState.CREATED or vertex.vertex_version != 0:
            raise IllegalStateBug(f"cannot restore {vertex!r}: it has run in this graph already")
        del self._executions[current.attempt_id]
        current.attempt_id = attempt_id
        current.attempt_number = attempt_number
        vertex.attempt_number_used(attempt_number)
        current.task_executor_id = task_executor_id
        self._executions[attempt_id] = current
        now = self._clock()
        current.state = ExecutionState.FINISHED
        current.state_timestamps[ExecutionState.FINISHED] = now
        self._state_counts[ExecutionState.CREATED] -= 1
        self._state_counts[ExecutionState.FINISHED] += 1
        for partition in vertex.produced_partitions:
            partition.mark_finished()
        return current

    # ---------------------------------------------------------------- speculative attempts

    def add_speculative_execution(self, vertex: ExecutionVertex) -> Execution:
        """A new CREATED attempt of ``vertex`` that runs beside its current one (Flink's
        ``SpeculativeExecutionVertex.createNewSpeculativeExecution``). It is found by
        :meth:`execution` but counted in :meth:`state_counts` only if it becomes current."""
        if vertex._graph is not self:
            raise IllegalStateBug(f"{vertex!r} belongs to another execution graph")
        if vertex.current_execution.state.is_terminal:
            raise IllegalStateBug(f"{vertex!r}: no speculative attempt beside a terminal one")
        execution = Execution(vertex, vertex.new_attempt_number(), self._clock())
        if vertex._speculative is None:
            vertex._speculative = []
        vertex._speculative.append(execution)
        self._executions[execution.attempt_id] = execution
        return execution

    def make_current(self, execution: Execution) -> Execution:
        """Let a speculative attempt take the place of its vertex's current one (it finished
        first, or the current one failed) and return the one it replaced. A replaced attempt
        that is still live stays found by :meth:`execution` until it is terminal."""
        vertex = execution.vertex
        if vertex._graph is not self or execution not in vertex.speculative_executions:
            raise IllegalStateBug(f"{execution!r} is not a speculative attempt of this graph")
        assert vertex._speculative is not None
        vertex._speculative.remove(execution)
        old = vertex.current_execution
        counts = self._state_counts
        counts[old.state] -= 1
        counts[execution.state] += 1
        vertex.current_execution = execution
        if old.state.is_terminal:
            del self._executions[old.attempt_id]
            _remember_prior(vertex, old)
        else:
            vertex._speculative.append(old)
        return old

    def now(self) -> float:
        return self._clock()

    def execution_transitioned(
        self, execution: Execution, old: ExecutionState, new: ExecutionState
    ) -> None:
        vertex = execution.vertex
        if vertex.current_execution is not execution:
            if execution not in vertex.speculative_executions:
                # Only live attempts can move: superseded ones were terminal when replaced.
                raise IllegalStateBug(f"{execution!r} changed state but is not a live attempt")
            if new.is_terminal:
                assert vertex._speculative is not None
                vertex._speculative.remove(execution)
                del self._executions[execution.attempt_id]
                _remember_prior(vertex, execution)
            return
        counts = self._state_counts
        counts[old] -= 1
        counts[new] += 1
        if new is ExecutionState.FINISHED:
            for partition in execution.vertex.produced_partitions:
                partition.mark_finished()

    # ---------------------------------------------------------------- progress

    def state_counts(self) -> dict[ExecutionState, int]:
        """How many current attempts are in each state (every state present, maybe 0)."""
        return dict(self._state_counts)

    @property
    def all_vertices_finished(self) -> bool:
        """Every job vertex initialized and every subtask FINISHED."""
        return not self._uninitialized and self._state_counts[ExecutionState.FINISHED] == len(
            self._vertices
        )

    @property
    def all_vertices_terminal(self) -> bool:
        counts = self._state_counts
        return sum(counts[s] for s in _TERMINAL_STATES) == len(self._vertices)

    # ---------------------------------------------------------------- regions

    def pipelined_regions(self) -> list[PipelinedRegion]:
        """The pipelined regions (computed once; the wiring never changes)."""
        if self._regions is None:
            self._regions = compute_pipelined_regions(self._vertices, self._groups)
        return list(self._regions)

    def region_of(self, vertex: ExecutionVertex) -> PipelinedRegion:
        if vertex._graph is not self:
            raise IllegalStateBug(f"{vertex!r} belongs to another execution graph")
        if vertex._region is None:
            self.pipelined_regions()
        region = vertex._region
        if region is None:
            raise IllegalStateBug(f"{vertex!r} is not part of this execution graph")
        return region

    def __repr__(self) -> str:
        return (
            f"ExecutionGraph({self.job_name!r}, {short(self.job_id)}, "
            f"{len(self._job_vertices)} job vertices, {len(self._vertices)} subtasks)"
        )


def _remember_prior(vertex: ExecutionVertex, execution: Execution) -> None:
    prior = vertex._prior_executions
    if prior is None:
        prior = vertex._prior_executions = []
    prior.append(execution)
    if len(prior) > MAX_PRIOR_ATTEMPTS_KEPT:
        del prior[0]


__all__ = [
    "MAX_PRIOR_ATTEMPTS_KEPT",
    "ConsumedPartitionGroup",
    "ConsumerVertexGroup",
    "Execution",
    "ExecutionGraph",
    "ExecutionJobVertex",
    "ExecutionVertex",
    "ExecutionVertexID",
    "FailureInfo",
    "IntermediateResult",
    "IntermediateResultPartition",
    "PartitionID",
    "PipelinedRegion",
]
