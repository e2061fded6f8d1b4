"""Intermediate results, their partitions, and how consumers are wired to them.

Every producer subtask writes one :class:`IntermediateResultPartition` of each result its job
vertex produces. Instead of one edge object per (producer, consumer) pair, the wiring is kept in
two kinds of *groups*, one pair per group of identical connections:

* a :class:`ConsumedPartitionGroup` - the partitions one consumer subtask reads for one input;
* a :class:`ConsumerVertexGroup` - the consumer subtasks that read one partition for one input.

Consumers that read exactly the same partitions share one :class:`ConsumedPartitionGroup` object
and partitions read by exactly the same consumers share one :class:`ConsumerVertexGroup`. For an
ALL_TO_ALL connection of S producers and T consumers this means one group of each kind for the
whole connection: memory and build time are O(S + T), not O(S x T).

POINTWISE connections follow :func:`~sparkmill.common.exchange.pointwise.pointwise_readers`
(Flink's rule, where S is the producer and T the consumer parallelism):

* S == T: consumer ``i`` reads partition ``i``;
* S > T: consumer ``i`` reads partitions ``[i*S//T, (i+1)*S//T)``;
* S < T: partition ``p`` is read by consumers ``[ceil(p*T/S), ceil((p+1)*T/S))``.

The task executors split and read partitions by the same function, so the partitions a
consumer is told to read and the share of them written for it always agree.

A group also counts how many of its partitions are finished (their producer's current attempt
reached FINISHED), so "can this group be consumed?" is an O(1) question.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from sparkmill.common.errors import IllegalStateBug
from sparkmill.common.exchange.pointwise import pointwise_readers
from sparkmill.common.ids import IntermediateDataSetID, short
from sparkmill.common.jobgraph import DistributionPattern, IntermediateDataSet, ResultPartitionType

if TYPE_CHECKING:
    from sparkmill.services.jobmaster.execution_graph import ExecutionJobVertex, ExecutionVertex


class PartitionID(NamedTuple):
    """Identifies one partition of an intermediate result."""

    dataset_id: IntermediateDataSetID
    partition_number: int

    def __str__(self) -> str:
        return f"{short(self.dataset_id)}#{self.partition_number}"


class IntermediateResult:
    """The run-time side of an :class:`~common.jobgraph.IntermediateDataSet`.

    It has one partition per subtask of its producer (``partitions[i]`` is written by subtask
    ``i``) and knows every :class:`ConsumedPartitionGroup` built over it.
    """

    __slots__ = ("consumed_partition_groups", "id", "partitions", "producer", "result_type")

    def __init__(self, dataset: IntermediateDataSet, producer: ExecutionJobVertex) -> None:
        self.id: IntermediateDataSetID = dataset.id
        self.producer = producer
        self.result_type: ResultPartitionType = dataset.result_type
        self.partitions: list[IntermediateResultPartition] = []
        self.consumed_partition_groups: list[ConsumedPartitionGroup] = []

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @property
    def is_pipelined(self) -> bool:
        return self.result_type is ResultPartitionType.PIPELINED

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

    __slots__ = ("_num_finished", "consumer_vertex_group", "partitions", "result")

    def __init__(
        self, result: IntermediateResult, partitions: Sequence[IntermediateResultPartition]
    ) -> None:
        if not partitions:
            raise IllegalStateBug("a consumed partition group cannot be empty")
        self.result = result
        self.partitions: tuple[IntermediateResultPartition, ...] = tuple(partitions)
        self._num_finished = sum(1 for p in self.partitions if p.is_finished)
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


def _link(
    partitions: Sequence[IntermediateResultPartition],
    consumers: Sequence[ExecutionVertex],
    result: IntermediateResult,
) -> ConsumedPartitionGroup:
    """Wire every consumer in ``consumers`` to every partition in ``partitions``, with one group
    object of each kind shared by all of them."""
    consumed = ConsumedPartitionGroup(result, partitions)
    consumer_group = ConsumerVertexGroup(consumers)
    consumed.consumer_vertex_group = consumer_group
    consumer_group.consumed_partition_group = consumed
    for vertex in consumers:
        vertex.consumed_partition_groups.append(consumed)
    for partition in partitions:
        partition.consumer_vertex_groups.append(consumer_group)
        partition.consumed_partition_groups.append(consumed)
    result.consumed_partition_groups.append(consumed)
    return consumed


def connect(
    consumer: ExecutionJobVertex, result: IntermediateResult, pattern: DistributionPattern
) -> list[ConsumedPartitionGroup]:
    """Connect every subtask of ``consumer`` to ``result`` for one more input.

    Each consumer subtask gets exactly one new entry in its ``consumed_partition_groups`` (so
    entry ``k`` is its ``k``-th input). Returns the groups created, each exactly once.
    """
    partitions = result.partitions
    consumers = consumer.task_vertices
    if pattern is DistributionPattern.ALL_TO_ALL:
        return [_link(partitions, consumers, result)]
    if pattern is not DistributionPattern.POINTWISE:
        raise IllegalStateBug(f"unknown distribution pattern {pattern!r}")

    sources, targets = len(partitions), len(consumers)
    groups: list[ConsumedPartitionGroup] = []
    # Consecutive partitions with the same readers form one group: with S > T a consumer's
    # contiguous run of partitions, otherwise a single partition and its readers.
    for readers, run in itertools.groupby(
        range(sources), key=lambda p: pointwise_readers(p, sources, targets)
    ):
        numbers = list(run)
        groups.append(
            _link(
                partitions[numbers[0] : numbers[-1] + 1],
                consumers[readers.start : readers.stop],
                result,
            )
        )
    return groups


__all__ = [
    "ConsumedPartitionGroup",
    "ConsumerVertexGroup",
    "IntermediateResult",
    "IntermediateResultPartition",
    "PartitionID",
    "connect",
]
