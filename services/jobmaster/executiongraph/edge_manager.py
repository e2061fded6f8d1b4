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

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.exchange.pointwise import pointwise_readers
from sparkmill.common.jobgraph.model import DistributionPattern
from sparkmill.services.jobmaster.executiongraph.execution_topology import (
    ConsumedPartitionGroup,
    ConsumerVertexGroup,
    ExecutionJobVertex,
    ExecutionVertex,
    IntermediateResult,
    IntermediateResultPartition,
)


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
    return list(connect_in_steps(consumer, result, pattern))


def connect_in_steps(
    consumer: ExecutionJobVertex, result: IntermediateResult, pattern: DistributionPattern
) -> Iterator[ConsumedPartitionGroup]:
    """:func:`connect`, one group at a time: each group is wired when it is yielded, so a
    caller may pause between groups (a POINTWISE connection of wide vertices makes thousands).
    The connection is complete only once the iterator is exhausted."""
    partitions = result.partitions
    consumers = consumer.task_vertices
    if pattern is DistributionPattern.ALL_TO_ALL:
        yield _link(partitions, consumers, result)
        return
    if pattern is not DistributionPattern.POINTWISE:
        raise IllegalStateBug(f"unknown distribution pattern {pattern!r}")

    sources, targets = len(partitions), len(consumers)
    # Consecutive partitions with the same readers form one group: with S > T a consumer's
    # contiguous run of partitions, otherwise a single partition and its readers.
    for readers, run in itertools.groupby(
        range(sources), key=lambda p: pointwise_readers(p, sources, targets)
    ):
        numbers = list(run)
        yield _link(
            partitions[numbers[0] : numbers[-1] + 1],
            consumers[readers.start : readers.stop],
            result,
        )


__all__ = ["connect", "connect_in_steps"]
