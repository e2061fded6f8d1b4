"""The nodes and edges of an execution graph: subtasks and their attempts, intermediate results
and their partitions, the wiring groups between them, and pipelined regions.

These types point at each other (a subtask knows its produced partitions, a partition knows its
producer and consumers, a subtask knows its region), so they live together, below the modules
that build and use them: :mod:`sparkmill.services.jobmaster.executiongraph.edge_manager` wires
consumers to results, :mod:`sparkmill.services.jobmaster.executiongraph.pipelined_regions` computes
the regions, and :mod:`sparkmill.services.jobmaster.executiongraph.execution_graph` owns them all.
The graph is seen from here only through :class:`ExecutionOwner` (Flink's
``InternalExecutionGraphAccessor`` plays this part).

Nothing here is thread-safe: the graph lives on the job master's event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import (
    ExecutionAttemptID,
    IntermediateDataSetID,
    JobVertexID,
    new_attempt_id,
    short,
)
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.states import EXECUTION_STATE_TRANSITIONS, ExecutionState
from sparkmill.common.exchange.skewed_splits import ReadPlan
from sparkmill.common.jobgraph.model import IntermediateDataSet, JobVertex, ResultPartitionType


class ExecutionOwner(Protocol):
    """What executions need from the graph that owns them: the clock of their state timestamps
    and a hook that sees every state change (to keep counts and partition progress)."""

    def now(self) -> float: ...

    def execution_transitioned(
        self, execution: Execution, old: ExecutionState, new: ExecutionState
    ) -> None: ...


# --------------------------------------------------------------------------------------------
# Subtasks and their attempts


class ExecutionVertexID(NamedTuple):
    """Identifies one subtask: its job vertex and its subtask index."""

    job_vertex_id: JobVertexID
    subtask_index: int

    def __str__(self) -> str:
        return f"{short(self.job_vertex_id)}_{self.subtask_index}"


@dataclass(frozen=True, slots=True)
class FailureInfo:
    """Why an attempt FAILED, and when (wall-clock seconds)."""

    message: str
    timestamp: float
    exception_class: str = ""  # e.g. "ConnectionError"; empty when unknown


class Execution:
    """One attempt to run one subtask."""

    __slots__ = (
        "assigned_resource",
        "attempt_id",
        "attempt_number",
        "failure_info",
        "state",
        "state_timestamps",
        "task_executor_id",
        "vertex",
    )

    def __init__(self, vertex: ExecutionVertex, attempt_number: int, created_at: float) -> None:
        self.vertex = vertex
        self.attempt_id: ExecutionAttemptID = new_attempt_id()
        self.attempt_number = attempt_number
        self.state = ExecutionState.CREATED
        self.state_timestamps: dict[ExecutionState, float] = {ExecutionState.CREATED: created_at}
        # Whatever the scheduler deployed this attempt into (e.g. its slot); opaque here.
        self.assigned_resource: object | None = None
        # The task executor (resource id) it was deployed to: where its results were written.
        self.task_executor_id = ""
        self.failure_info: FailureInfo | None = None

    @property
    def is_current(self) -> bool:
        """True for the vertex's current attempt and for its other live attempts (speculative
        ones, or one that lost the race and is being cancelled); False once the vertex was
        reset for a newer attempt and this one is terminal."""
        vertex = self.vertex
        return vertex.current_execution is self or self in vertex.speculative_executions

    @property
    def is_speculative(self) -> bool:
        """A live attempt of the vertex other than its current one."""
        return self in self.vertex.speculative_executions

    @property
    def description(self) -> str:
        """E.g. ``map (3/8) attempt #1 (0a1b2c3d)``, for log lines and failure messages."""
        return (
            f"{self.vertex.task_name_with_subtask} attempt #{self.attempt_number} "
            f"({short(self.attempt_id)})"
        )

    def state_timestamp(self, state: ExecutionState) -> float | None:
        """When this attempt entered ``state`` (wall-clock seconds), or None if it never did."""
        return self.state_timestamps.get(state)

    def can_transition_to(self, target: ExecutionState) -> bool:
        return EXECUTION_STATE_TRANSITIONS.can_transition(self.state, target)

    def transition_to(
        self, target: ExecutionState, *, failure: str | None = None, exception_class: str = ""
    ) -> None:
        """Move to ``target``; an illegal transition raises :class:`IllegalStateBug`.

        ``failure`` (and ``exception_class``) describe the cause and belong only to FAILED.
        """
        current = self.state
        if not EXECUTION_STATE_TRANSITIONS.can_transition(current, target):
            EXECUTION_STATE_TRANSITIONS.check(current, target, self.description)
        if target is not ExecutionState.FAILED and (failure is not None or exception_class):
            raise IllegalStateBug(
                f"{self.description}: a failure cause was given for a {target.name} transition"
            )
        graph = self.vertex._graph
        now = graph.now()
        self.state = target
        self.state_timestamps[target] = now
        if target is ExecutionState.FAILED:
            self.failure_info = FailureInfo(
                failure if failure is not None else "failed without a reported cause",
                now,
                exception_class,
            )
        graph.execution_transitioned(self, current, target)

    def mark_failed(self, message: str, exception: BaseException | None = None) -> None:
        """Shortcut for ``transition_to(FAILED, ...)`` with the cause taken from ``exception``."""
        self.transition_to(
            ExecutionState.FAILED,
            failure=message,
            exception_class=type(exception).__qualname__ if exception is not None else "",
        )

    def __repr__(self) -> str:
        return f"Execution({self.description}, {self.state.name})"


class ExecutionVertex:
    """One parallel subtask of an :class:`ExecutionJobVertex`; survives across attempts."""

    __slots__ = (
        "_attempts_made",
        "_graph",
        "_index",
        "_prior_executions",
        "_region",
        "_speculative",
        "consumed_partition_groups",
        "current_execution",
        "id",
        "job_vertex",
        "produced_partitions",
        "subtask_index",
        "vertex_version",
    )

    def __init__(self, job_vertex: ExecutionJobVertex, subtask_index: int, index: int) -> None:
        graph = job_vertex.graph
        self._graph = graph
        self._index = index  # position in the graph's topological list of all vertices
        self._region: PipelinedRegion | None = None
        self._prior_executions: list[Execution] | None = None
        self.job_vertex = job_vertex
        self.subtask_index = subtask_index
        self.id = ExecutionVertexID(job_vertex.id, subtask_index)
        # Bumped on every reset, so a late reply about an older deployment can be recognised.
        self.vertex_version = 0
        # produced_partitions[k] is this subtask's partition of job_vertex.produced_results[k].
        self.produced_partitions: list[IntermediateResultPartition] = []
        # consumed_partition_groups[k] is what this subtask reads for job_vertex.inputs[k].
        self.consumed_partition_groups: list[ConsumedPartitionGroup] = []
        # Live attempts besides the current one (Flink's SpeculativeExecutionVertex keeps them
        # all as current): speculative attempts racing it, and losers still being cancelled.
        # None until the first one, to keep a wide job's vertices small.
        self._speculative: list[Execution] | None = None
        self._attempts_made = 1
        self.current_execution = Execution(self, 0, graph.now())

    @property
    def speculative_executions(self) -> Sequence[Execution]:
        return self._speculative or ()

    def new_attempt_number(self) -> int:
        """The number of the next attempt: one past every attempt made so far, so speculative
        attempts and restarts never share one (the sink commit orders attempts by it)."""
        number = self._attempts_made
        self._attempts_made += 1
        return number

    def attempt_number_used(self, number: int) -> None:
        """An attempt with ``number`` exists (restored from an earlier JobMaster)."""
        self._attempts_made = max(self._attempts_made, number + 1)

    @property
    def execution_state(self) -> ExecutionState:
        return self.current_execution.state

    @property
    def parallelism(self) -> int:
        return self.job_vertex.parallelism

    @property
    def task_name_with_subtask(self) -> str:
        """E.g. ``map (3/8)``; the subtask is shown 1-based, as Flink does."""
        return f"{self.job_vertex.name} ({self.subtask_index + 1}/{self.job_vertex.parallelism})"

    @property
    def prior_executions(self) -> list[Execution]:
        """Superseded attempts, oldest first (at most
        :data:`~sparkmill.services.jobmaster.executiongraph.execution_graph.MAX_PRIOR_ATTEMPTS_KEPT`)."""
        return list(self._prior_executions or ())

    def __repr__(self) -> str:
        return (
            f"ExecutionVertex({self.task_name_with_subtask}, v{self.vertex_version}, "
            f"{self.current_execution.state.name})"
        )


class ExecutionJobVertex:
    """The run-time side of one :class:`~sparkmill.common.jobgraph.model.JobVertex`: all of its
    subtasks."""

    __slots__ = (
        "_first_index",
        "graph",
        "initialized",
        "inputs",
        "job_vertex",
        "produced_results",
        "task_vertices",
    )

    def __init__(
        self,
        graph: ExecutionOwner,
        job_vertex: JobVertex,
        first_index: int,
        *,
        create_subtasks: bool = True,
        initialized: bool = True,
    ) -> None:
        """``create_subtasks=False``: none yet; they come by :meth:`add_subtasks` (a graph
        built in steps creates a wide vertex's subtasks a chunk at a time).

        ``initialized=False`` (Flink's not yet initialized ``ExecutionJobVertex`` of a dynamic
        graph): the vertex has no subtasks and no wiring yet, because its parallelism is still
        to be decided or one of its producers is not initialized either. The graph initializes
        it later (see :meth:`decide`); until then its parallelism may be ``AUTO_PARALLELISM``.
        """
        self.initialized = initialized
        if initialized and job_vertex.parallelism < 1:
            raise ValueError(
                f"vertex '{job_vertex.name}' has parallelism {job_vertex.parallelism}, "
                "it must be at least 1"
            )
        self.graph = graph
        self.job_vertex = job_vertex
        self._first_index = first_index
        self.produced_results = [IntermediateResult(ds, self) for ds in job_vertex.produced]
        # inputs[k] is the result read through job_vertex.inputs[k].
        self.inputs: list[IntermediateResult] = []
        self.task_vertices: list[ExecutionVertex] = []
        if create_subtasks:
            self.add_subtasks(job_vertex.parallelism)

    def add_subtasks(self, count: int) -> list[ExecutionVertex]:
        """Create the next ``count`` subtasks (fewer once ``parallelism`` is reached), each with
        its partition of every produced result; returns them."""
        start = len(self.task_vertices)
        stop = min(start + count, self.job_vertex.parallelism)
        first = self._first_index
        created = [ExecutionVertex(self, i, first + i) for i in range(start, stop)]
        self.task_vertices.extend(created)
        for result in self.produced_results:
            partitions = result.partitions
            for ev in created:
                partition = IntermediateResultPartition(result, ev)
                partitions.append(partition)
                ev.produced_partitions.append(partition)
        return created

    def decide(self, parallelism: int) -> None:
        """Set the parallelism of a vertex that is not initialized yet and was left open."""
        if self.initialized or not self.job_vertex.is_auto:
            raise IllegalStateBug(f"{self!r} is decided already")
        if not 1 <= parallelism <= self.job_vertex.max_parallelism:
            raise IllegalStateBug(
                f"{self!r}: parallelism {parallelism} is outside 1..{self.max_parallelism}"
            )
        self.job_vertex = dataclasses.replace(self.job_vertex, parallelism=parallelism)

    @property
    def has_all_subtasks(self) -> bool:
        return len(self.task_vertices) == self.job_vertex.parallelism

    @property
    def id(self) -> JobVertexID:
        return self.job_vertex.id

    @property
    def name(self) -> str:
        return self.job_vertex.name

    @property
    def parallelism(self) -> int:
        return self.job_vertex.parallelism

    @property
    def max_parallelism(self) -> int:
        return self.job_vertex.max_parallelism

    @property
    def slot_sharing_group(self) -> str:
        return self.job_vertex.slot_sharing_group

    @property
    def resource_profile(self) -> ResourceProfile:
        return self.job_vertex.resource_profile

    def __repr__(self) -> str:
        return f"ExecutionJobVertex({self.name!r}, parallelism={self.parallelism})"


# --------------------------------------------------------------------------------------------
# Intermediate results, partitions and the wiring groups


class PartitionID(NamedTuple):
    """Identifies one partition of an intermediate result."""

    dataset_id: IntermediateDataSetID
    partition_number: int

    def __str__(self) -> str:
        return f"{short(self.dataset_id)}#{self.partition_number}"


class IntermediateResult:
    """The run-time side of an :class:`~sparkmill.common.jobgraph.model.IntermediateDataSet`.

    It has one partition per subtask of its producer (``partitions[i]`` is written by subtask
    ``i``) and knows every :class:`ConsumedPartitionGroup` built over it.
    """

    __slots__ = (
        "_read_slices",
        "consumed_partition_groups",
        "id",
        "partitions",
        "producer",
        "read_input",
        "read_plan",
        "result_type",
        "subpartition_bounds",
        "subpartitions",
    )

    def __init__(self, dataset: IntermediateDataSet, producer: ExecutionJobVertex) -> None:
        self.id: IntermediateDataSetID = dataset.id
        self.producer = producer
        self.result_type: ResultPartitionType = dataset.result_type
        self.partitions: list[IntermediateResultPartition] = []
        self.consumed_partition_groups: list[ConsumedPartitionGroup] = []
        # How many sub-partitions each producer subtask splits its partition into: the
        # consumer's parallelism, or for a consumer decided after its producers ran, the most
        # it may get (see sparkmill.common.exchange.subpartitions). Set by the graph when the
        # producer is initialized; 0 while unknown or when nothing consumes the result.
        self.subpartitions = 0
        # For a consumer decided late with ranges balanced by bytes: consumer i reads
        # [bounds[i], bounds[i+1]); () while not decided or with the equal-count ranges.
        self.subpartition_bounds: tuple[int, ...] = ()
        # For a consumer with skewed sub-partitions split across subtasks: its plan, and the
        # position of this result among its inputs (see :attr:`read_slices`).
        self.read_plan: ReadPlan | None = None
        self.read_input = 0
        self._read_slices: tuple[int, ...] = ()

    @property
    def read_slices(self) -> tuple[int, ...]:
        """With :attr:`read_plan`: per consumer subtask, the sub-partitions and producers it
        reads (four numbers; see sparkmill.common.exchange.skewed_splits); () otherwise."""
        if self.read_plan is None or not self.partitions:
            return ()
        if not self._read_slices:
            self._read_slices = self.read_plan.slices(self.read_input, len(self.partitions))
        return self._read_slices

    def set_read_plan(self, plan: ReadPlan | None, input_index: int = 0) -> None:
        self.read_plan, self.read_input, self._read_slices = plan, input_index, ()

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    def __repr__(self) -> str:
        return (
            f"IntermediateResult({short(self.id)}, producer={self.producer.name!r}, "
            f"{self.result_type.name}, partitions={len(self.partitions)})"
        )


class IntermediateResultPartition:
    """The part of an :class:`IntermediateResult` written by one producer subtask."""

    __slots__ = (
        "consumed_partition_groups",
        "consumer_vertex_groups",
        "id",
        "is_finished",
        "producer",
        "result",
    )

    def __init__(self, result: IntermediateResult, producer: ExecutionVertex) -> None:
        self.result = result
        self.producer = producer
        self.id = PartitionID(result.id, producer.subtask_index)
        # One ConsumerVertexGroup per job edge reading the result (usually exactly one).
        self.consumer_vertex_groups: list[ConsumerVertexGroup] = []
        # Every group this partition belongs to; told when the partition (un)finishes.
        self.consumed_partition_groups: list[ConsumedPartitionGroup] = []
        self.is_finished = False

    @property
    def partition_number(self) -> int:
        return self.id.partition_number

    @property
    def result_type(self) -> ResultPartitionType:
        return self.result.result_type

    def mark_finished(self) -> None:
        """The producer's current attempt finished: the data is complete. Idempotent."""
        if self.is_finished:
            return
        self.is_finished = True
        for group in self.consumed_partition_groups:
            group._partition_finished()

    def mark_unfinished(self) -> None:
        """The producer is about to run again: the data must be produced anew. Idempotent."""
        if not self.is_finished:
            return
        self.is_finished = False
        for group in self.consumed_partition_groups:
            group._partition_unfinished()

    def __repr__(self) -> str:
        state = "finished" if self.is_finished else "unfinished"
        return f"IntermediateResultPartition({self.id}, {state})"


class ConsumedPartitionGroup:
    """Partitions of one result that a set of consumer subtasks all read for one input.

    The partitions always form a contiguous range of the result's partitions.
    """

    __slots__ = ("_num_finished", "consumer_vertex_group", "generation", "partitions", "result")

    def __init__(
        self, result: IntermediateResult, partitions: Sequence[IntermediateResultPartition]
    ) -> None:
        if not partitions:
            raise IllegalStateBug("a consumed partition group cannot be empty")
        self.result = result
        self.partitions: tuple[IntermediateResultPartition, ...] = tuple(partitions)
        self._num_finished = sum(1 for p in self.partitions if p.is_finished)
        # Goes up whenever a partition becomes unfinished (its producer runs again): while the
        # group stays consumable, who wrote its partitions cannot change (see InputGateCache).
        self.generation = 0
        # Set right after construction by _link().
        self.consumer_vertex_group: ConsumerVertexGroup

    @property
    def result_type(self) -> ResultPartitionType:
        return self.result.result_type

    @property
    def num_finished(self) -> int:
        return self._num_finished

    @property
    def is_consumable(self) -> bool:
        """True when the current attempt of every producer of these partitions has FINISHED."""
        return self._num_finished == len(self.partitions)

    def _partition_finished(self) -> None:
        if self._num_finished >= len(self.partitions):
            raise IllegalStateBug(f"{self!r}: more partitions finished than it has")
        self._num_finished += 1

    def _partition_unfinished(self) -> None:
        if self._num_finished <= 0:
            raise IllegalStateBug(f"{self!r}: a partition unfinished while none was finished")
        self._num_finished -= 1
        self.generation += 1

    def __len__(self) -> int:
        return len(self.partitions)

    def __iter__(self) -> Iterator[IntermediateResultPartition]:
        return iter(self.partitions)

    def __repr__(self) -> str:
        first = self.partitions[0].partition_number
        last = self.partitions[-1].partition_number
        return (
            f"ConsumedPartitionGroup({short(self.result.id)}[{first}..{last}], "
            f"finished={self._num_finished}/{len(self.partitions)})"
        )


class ConsumerVertexGroup:
    """Consumer subtasks that all read the same partitions for one input."""

    __slots__ = ("consumed_partition_group", "vertices")

    def __init__(self, vertices: Sequence[ExecutionVertex]) -> None:
        if not vertices:
            raise IllegalStateBug("a consumer vertex group cannot be empty")
        self.vertices: tuple[ExecutionVertex, ...] = tuple(vertices)
        # Set right after construction by _link().
        self.consumed_partition_group: ConsumedPartitionGroup

    @property
    def result_type(self) -> ResultPartitionType:
        return self.consumed_partition_group.result_type

    def __len__(self) -> int:
        return len(self.vertices)

    def __iter__(self) -> Iterator[ExecutionVertex]:
        return iter(self.vertices)

    def __repr__(self) -> str:
        first = self.vertices[0].subtask_index
        last = self.vertices[-1].subtask_index
        return f"ConsumerVertexGroup({self.vertices[0].job_vertex.name!r}[{first}..{last}])"


# --------------------------------------------------------------------------------------------
# Pipelined regions


class PipelinedRegion:
    """A set of execution vertices that must be scheduled together."""

    __slots__ = ("blocking_consumed_groups", "index", "vertices")

    def __init__(self, index: int, vertices: list[ExecutionVertex]) -> None:
        self.index = index
        self.vertices: tuple[ExecutionVertex, ...] = tuple(vertices)
        # BLOCKING groups read by the region that are (at least partly) produced outside it:
        # the region can start once all of them are consumable. Filled in by the computation.
        self.blocking_consumed_groups: tuple[ConsumedPartitionGroup, ...] = ()

    def __contains__(self, vertex: object) -> bool:
        return getattr(vertex, "_region", None) is self

    def __iter__(self) -> Iterator[ExecutionVertex]:
        return iter(self.vertices)

    def __len__(self) -> int:
        return len(self.vertices)

    @property
    def inputs_consumable(self) -> bool:
        """True when every BLOCKING input coming from outside the region is consumable."""
        return all(group.is_consumable for group in self.blocking_consumed_groups)

    def __repr__(self) -> str:
        return f"PipelinedRegion(#{self.index}, {len(self.vertices)} vertices)"


__all__ = [
    "ConsumedPartitionGroup",
    "ConsumerVertexGroup",
    "Execution",
    "ExecutionJobVertex",
    "ExecutionOwner",
    "ExecutionVertex",
    "ExecutionVertexID",
    "FailureInfo",
    "IntermediateResult",
    "IntermediateResultPartition",
    "PartitionID",
    "PipelinedRegion",
]
