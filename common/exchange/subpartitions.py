"""Which sub-partitions of an ALL_TO_ALL exchange each consumer subtask reads.

A producer of a hash or rebalance exchange splits its partition into ``K`` sub-partitions.
When the consumer's parallelism ``n`` was known before the producers ran, ``K == n`` and
consumer ``i`` reads sub-partition ``i`` of every partition. A consumer whose parallelism is
decided only after its producers finished (automatic parallelism, decided from the bytes they
wrote) may get fewer subtasks than the ``K`` its producers were told to write; then consumer
``i`` of ``n`` reads the contiguous range ``[floor(i*K/n), floor((i+1)*K/n))`` of every
partition (the range rule of Flink's adaptive batch scheduler). The ranges of ``0..n-1`` cover
``0..K-1`` exactly once and differ in length by at most one, and rows of one key stay in one
sub-partition, so a keyed operator still sees each key in exactly one subtask.

The JobMaster decides ``n <= K``; the task executors read with the same function.
"""

from __future__ import annotations

from sparkmill.common.core.errors import IllegalStateBug


def subpartition_range(subtask: int, consumers: int, subpartitions: int) -> range:
    """The sub-partitions consumer ``subtask`` of ``consumers`` reads when each producer wrote
    ``subpartitions`` of them (0: as many as there are consumers)."""
    if subpartitions == 0:
        subpartitions = consumers
    if consumers < 1 or subpartitions < consumers:
        raise IllegalStateBug(
            f"{consumers} consumer subtasks cannot split {subpartitions} sub-partitions among "
            "them (each needs at least one)"
        )
    if not 0 <= subtask < consumers:
        raise IllegalStateBug(f"subtask {subtask} does not exist among {consumers} consumers")
    return range(subtask * subpartitions // consumers, (subtask + 1) * subpartitions // consumers)
