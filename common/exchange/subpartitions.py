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

When the producers reported how many bytes they wrote into each sub-partition, the JobMaster
balances the ranges by bytes instead (:func:`balanced_bounds`, as Flink's adaptive batch
scheduler balances them by data volume): consumer ``i`` reads ``[bounds[i], bounds[i+1])``,
and the ``n + 1`` bounds travel with the consumer's input gates. A sub-partition is never
split: one that alone holds more than a subtask's fair share makes its range the largest.

The JobMaster decides ``n <= K``; the task executors read with the same function.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from sparkmill.common.core.errors import IllegalStateBug


def subpartition_range(
    subtask: int, consumers: int, subpartitions: int, bounds: Sequence[int] = ()
) -> range:
    """The sub-partitions consumer ``subtask`` of ``consumers`` reads when each producer wrote
    ``subpartitions`` of them (0: as many as there are consumers); with ``bounds`` (see
    :func:`balanced_bounds`), the range they give it."""
    if bounds:
        check_bounds(bounds, consumers, subpartitions)
        if not 0 <= subtask < consumers:
            raise IllegalStateBug(f"subtask {subtask} does not exist among {consumers} consumers")
        return range(bounds[subtask], bounds[subtask + 1])
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


def bounds_error(bounds: Sequence[int], consumers: int, subpartitions: int) -> str:
    """What is wrong with ``bounds`` as the ranges of ``consumers`` over ``subpartitions``
    (``consumers + 1`` strictly increasing numbers from 0 to ``subpartitions``); "" if nothing."""
    if len(bounds) != consumers + 1:
        return f"{len(bounds)} range bounds for {consumers} consumer subtasks"
    if bounds[0] != 0 or bounds[-1] != subpartitions:
        return f"range bounds {bounds[0]}..{bounds[-1]} do not span 0..{subpartitions}"
    if any(a >= b for a, b in itertools.pairwise(bounds)):
        return "range bounds must increase strictly (every consumer reads at least one)"
    return ""


def check_bounds(bounds: Sequence[int], consumers: int, subpartitions: int) -> None:
    problem = bounds_error(bounds, consumers, subpartitions)
    if problem:
        raise IllegalStateBug(problem)


def balanced_bounds(sizes: Sequence[int], consumers: int) -> tuple[int, ...]:
    """Contiguous ranges of the sub-partitions (of ``sizes`` bytes each) for ``consumers``
    subtasks, balanced by bytes: each range aims at an equal share of the bytes not yet given
    to a range before it, and ends where it comes closest to that share; every range keeps at
    least one sub-partition. O(len(sizes))."""
    count = len(sizes)
    if not 1 <= consumers <= count:
        raise IllegalStateBug(f"{consumers} consumers cannot split {count} sub-partitions")
    total = sum(sizes)
    if total <= 0:
        return tuple(i * count // consumers for i in range(consumers + 1))
    bounds = [0]
    given = 0  # bytes of the ranges closed so far
    current = 0  # bytes of the range being filled
    for index, size in enumerate(sizes):
        current += size
        ranges_left = consumers - len(bounds) + 1  # the one being filled included
        if ranges_left == 1:
            break  # the last range takes the rest
        share = (total - given) / ranges_left
        following = sizes[index + 1] if index + 1 < count else 0
        closest = current >= share or share - current <= current + following - share
        if closest or count - index - 1 == ranges_left - 1:
            bounds.append(index + 1)
            given += current
            current = 0
    bounds.append(count)
    return tuple(bounds)
