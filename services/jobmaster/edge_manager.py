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

POINTWISE connections follow the usual rule, where S is the producer and T the consumer
parallelism:

* S == T: consumer ``i`` reads partition ``i``;
* S > T: consumer ``i`` reads partitions ``[i*S//T, (i+1)*S//T)``;
* S < T: partition ``p`` is read by consumers ``[ceil(p*T/S), ceil((p+1)*T/S))``.

A group also counts how many of its partitions are finished (their producer's current attempt
reached FINISHED), so "can this group be consumed?" is an O(1) question.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparkmill.common.errors import IllegalStateBug
from sparkmill.common.jobgraph import DistributionPattern
from sparkmill.services.jobmaster.execution_topology import (
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
    partitions = result.partitions
    consumers = consumer.task_vertices
    if pattern is DistributionPattern.ALL_TO_ALL:
        return [_link(partitions, consumers, result)]
    if pattern is not DistributionPattern.POINTWISE:
        raise IllegalStateBug(f"unknown distribution pattern {pattern!r}")

    sources, targets = len(partitions), len(consumers)
    groups: list[ConsumedPartitionGroup] = []
    if sources == targets:
        for i in range(sources):
            groups.append(_link(partitions[i : i + 1], consumers[i : i + 1], result))
    elif sources > targets:
        # Each consumer reads a contiguous run of partitions; every partition has one reader.
        for i in range(targets):
            start = i * sources // targets
            end = (i + 1) * sources // targets
            groups.append(_link(partitions[start:end], consumers[i : i + 1], result))
    else:
        # Each partition is read by a contiguous run of consumers; every consumer reads one.
        for p in range(sources):
            start = -(-p * targets // sources)  # ceil(p * T / S)
            end = -(-(p + 1) * targets // sources)
            groups.append(_link(partitions[p : p + 1], consumers[start:end], result))
    return groups


__all__ = ["connect"]
