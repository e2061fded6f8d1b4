"""Splitting a skewed sub-partition of a join across several subtasks.

A hash join reads sub-partition ``k`` of both inputs in one subtask, so one hot key makes one
subtask as slow as the whole rest of the vertex. When the vertex is decided late (its
producers have finished and reported the bytes of every sub-partition they wrote), the
JobMaster splits such a sub-partition the way Flink's adaptive skewed join optimization and
Spark's ``OptimizeSkewedJoin`` do: the skewed input's sub-partition ``k`` is read by ``m``
subtasks, each from a contiguous range of that input's *producers* (balanced by the bytes each
wrote into ``k``), and every one of them reads sub-partition ``k`` of the other input whole.
Each row of the skewed side is then joined exactly once with every row of the other side that
shares its key, which is what an inner join needs, and, when the split side is the one whose
unmatched rows a join keeps or tests (the left side of ``left``, ``left_semi``, ``left_anti``;
the right side of ``right``), what those joins need too. A ``full`` join never splits.

The split is described by a :class:`ReadPlan`: ``bounds`` as :func:`balanced_bounds` makes
them (each skewed sub-partition a range of its own) and one :class:`SplitRange` per range read
by several subtasks. Subtasks follow the ranges in order, a split range expanding in place into
its pieces. Its flat form (:meth:`ReadPlan.encode`) goes to the progress log with the decision;
each input gate carries the slices of its own input (:meth:`ReadPlan.slices`): per consumer
subtask, the sub-partitions and the producers it reads.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.exchange.subpartitions import balanced_bounds, bounds_error

# The inputs (0: left, 1: right) of a join whose sub-partitions may be split: those whose every
# row meets all of the other side's rows of its key in exactly one subtask when it is read in
# parts. Join types as Spark normalizes them (lower case, no underscores); any other type, a
# full outer join above all, is never split.
_SPLITTABLE_SIDES: dict[str, tuple[int, ...]] = {
    "inner": (0, 1),
    **dict.fromkeys(("left", "leftouter", "leftsemi", "semi", "leftanti", "anti"), (0,)),
    **dict.fromkeys(("right", "rightouter"), (1,)),
}


def splittable_sides(how: str) -> tuple[int, ...]:
    """The sides of a ``how`` join (0: left, 1: right) that may be split."""
    return _SPLITTABLE_SIDES.get(how.lower().replace("_", ""), ())


_SEPARATOR = -1  # between the parts of an encoded plan (bounds are never negative)


@dataclass(frozen=True, slots=True)
class SplitRange:
    """Range ``range_index`` of a plan (a single sub-partition) read by several subtasks:
    subtask ``j`` of them reads input ``input_index`` from producers
    ``[producer_bounds[j], producer_bounds[j + 1])`` and every other input whole."""

    range_index: int
    input_index: int
    producer_bounds: tuple[int, ...]

    @property
    def pieces(self) -> int:
        return len(self.producer_bounds) - 1


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """What each consumer subtask of a late vertex reads of its split inputs."""

    bounds: tuple[int, ...]
    splits: tuple[SplitRange, ...] = ()

    @property
    def consumers(self) -> int:
        return len(self.bounds) - 1 + sum(s.pieces - 1 for s in self.splits)

    def slices(self, input_index: int, producers: int) -> tuple[int, ...]:
        """For input ``input_index`` (of ``producers`` partitions): per consumer subtask, in
        order, its first and end sub-partition and its first and end producer (4 numbers)."""
        by_range = {s.range_index: s for s in self.splits}
        out: list[int] = []
        for index, (low, high) in enumerate(itertools.pairwise(self.bounds)):
            split = by_range.get(index)
            if split is None:
                out += (low, high, 0, producers)
            elif split.input_index == input_index:
                for first, end in itertools.pairwise(split.producer_bounds):
                    out += (low, high, first, end)
            else:
                out += (low, high, 0, producers) * split.pieces
        return tuple(out)

    def encode(self) -> tuple[int, ...]:
        """The flat form kept with the decision: the bounds alone without splits (the form of
        ranges balanced by bytes), else ``bounds, -1, range, input, producer bounds, -1, ...``."""
        out = list(self.bounds)
        for split in self.splits:
            out += (_SEPARATOR, split.range_index, split.input_index, *split.producer_bounds)
        return tuple(out)

    @staticmethod
    def decode(flat: Sequence[int]) -> ReadPlan:
        """The plan :meth:`encode` made; a malformed one is caught by :func:`read_plan_error`."""
        parts: list[list[int]] = [[]]
        for number in flat:
            if number == _SEPARATOR:
                parts.append([])
            else:
                parts[-1].append(number)
        malformed = SplitRange(-1, -1, ())  # too short to be a split: refused when checked
        splits = tuple(
            SplitRange(part[0], part[1], tuple(part[2:])) if len(part) >= 2 else malformed
            for part in parts[1:]
        )
        return ReadPlan(tuple(parts[0]), splits)


def read_plan_error(
    plan: ReadPlan,
    consumers: int,
    subpartitions: int,
    producers: Sequence[int],
    splittable: Collection[int],
) -> str:
    """What is wrong with ``plan`` for ``consumers`` subtasks reading ``subpartitions``
    sub-partitions of inputs of ``producers[i]`` partitions, of which only the inputs in
    ``splittable`` may be split; "" if nothing."""
    ranges = len(plan.bounds) - 1
    problem = bounds_error(plan.bounds, ranges, subpartitions) if ranges >= 1 else "no ranges"
    if problem:
        return problem
    seen: set[int] = set()
    for split in plan.splits:
        if not 0 <= split.range_index < ranges or split.range_index in seen:
            return f"split range {split.range_index} is not a range of the plan, or split twice"
        seen.add(split.range_index)
        low, high = plan.bounds[split.range_index], plan.bounds[split.range_index + 1]
        if high - low != 1:
            return f"split range {split.range_index} holds {high - low} sub-partitions, not one"
        if split.input_index not in splittable or not 0 <= split.input_index < len(producers):
            return f"input {split.input_index} may not be split"
        count = producers[split.input_index]
        if split.pieces < 2 or bounds_error(split.producer_bounds, split.pieces, count):
            return f"split range {split.range_index}: producer bounds do not cover 0..{count}"
    if plan.consumers != consumers:
        return f"the plan has {plan.consumers} subtasks, not {consumers}"
    return ""


def subtask_slice(
    slices: Sequence[int], subtask: int, subpartitions: int, producers: int
) -> tuple[range, range]:
    """The sub-partitions and the producers consumer ``subtask`` reads from a gate's
    ``slices`` (see :meth:`ReadPlan.slices`)."""
    if len(slices) % 4 or not 0 <= subtask < len(slices) // 4:
        raise IllegalStateBug(
            f"subtask {subtask} has no slice among {len(slices) // 4} (of {len(slices)} numbers)"
        )
    low, high, first, end = slices[4 * subtask : 4 * subtask + 4]
    if not (0 <= low < high <= subpartitions and 0 <= first < end <= producers):
        raise IllegalStateBug(
            f"slice {low}..{high} of producers {first}..{end} of subtask {subtask} is not "
            f"within {subpartitions} sub-partitions of {producers} producers"
        )
    return range(low, high), range(first, end)


@dataclass(frozen=True, slots=True)
class SkewedSplit:
    """A skewed sub-partition found by :func:`plan_skewed_splits`, for the decision's text."""

    subpartition: int
    input_index: int
    size: int  # bytes of the split input in it
    median: int  # the median bytes of that input's sub-partitions
    pieces: int


def plan_skewed_splits(
    sizes: Sequence[Sequence[Sequence[int]]],
    splittable: Collection[int],
    consumers: int,
    max_consumers: int,
    factor: float,
    threshold: int,
) -> tuple[ReadPlan, tuple[SkewedSplit, ...]] | None:
    """A plan that splits the skewed sub-partitions of a join, or None when there are none.

    ``sizes[i][p][k]``: the bytes producer ``p`` of input ``i`` wrote into sub-partition ``k``.
    A sub-partition is skewed on input ``i`` (one of ``splittable``) when that input holds
    more than ``factor`` times the median of its sub-partitions in it, and more than
    ``threshold`` bytes. It is split into as many pieces as a subtask's share of all the bytes
    (the total over ``consumers``) goes into its bytes on that input, at most one per producer
    with data in it; the other sub-partitions are balanced by bytes into ranges between the
    skewed ones, about one per share. The plan never has more than ``max_consumers`` subtasks.
    O(inputs x producers x sub-partitions).
    """
    if not sizes or consumers < 1:
        return None
    count = len(sizes[0][0]) if sizes[0] else 0
    side = [[sum(column) for column in zip(*producers, strict=True)] for producers in sizes]
    if count == 0 or any(len(s) != count for s in side):
        return None
    totals = [sum(column) for column in zip(*side, strict=True)]
    share = sum(totals) / consumers
    if share <= 0:
        return None
    medians = [statistics.median(s) for s in side]
    hot: dict[int, SkewedSplit] = {}
    for k in range(count):
        best: SkewedSplit | None = None
        for i in splittable:
            size = side[i][k]
            if size <= threshold or size <= factor * medians[i]:
                continue
            with_data = sum(1 for producer in sizes[i] if producer[k] > 0)
            pieces = min(with_data, math.ceil(size / share))
            if pieces >= 2 and (best is None or size > best.size):
                best = SkewedSplit(k, i, size, int(medians[i]), pieces)
        if best is not None:
            hot[k] = best
    if not hot:
        return None
    plan = _plan(sizes, totals, share, hot, max_consumers)
    return None if plan is None else (plan, tuple(hot[k] for k in sorted(hot)))


def _plan(
    sizes: Sequence[Sequence[Sequence[int]]],
    totals: list[int],
    share: float,
    hot: dict[int, SkewedSplit],
    max_consumers: int,
) -> ReadPlan | None:
    # The stretches of sub-partitions between the skewed ones, each in ranges of its own.
    segments: list[tuple[int, int]] = []
    start = 0
    for k in [*sorted(hot), len(totals)]:
        if k > start:
            segments.append((start, k))
        start = k + 1
    ranges = {
        segment: min(segment[1] - segment[0], max(1, round(sum(totals[slice(*segment)]) / share)))
        for segment in segments
    }
    # Too many subtasks: fewer pieces first, then no split at all.
    while sum(ranges.values()) + sum(h.pieces for h in hot.values()) > max_consumers:
        largest = max(hot.values(), key=lambda h: h.pieces)
        if largest.pieces <= 2:
            return None
        hot[largest.subpartition] = dataclasses.replace(largest, pieces=largest.pieces - 1)
    segment_at = {segment[0]: segment for segment in segments}
    bounds: list[int] = [0]
    splits: list[SplitRange] = []
    for first in sorted([*segment_at, *hot]):
        if first in hot:
            h = hot[first]
            per_producer = [producer[first] for producer in sizes[h.input_index]]
            splits.append(
                SplitRange(len(bounds) - 1, h.input_index, balanced_bounds(per_producer, h.pieces))
            )
            bounds.append(first + 1)
            continue
        segment = segment_at[first]
        inner = balanced_bounds(totals[slice(*segment)], ranges[segment])
        bounds += [first + b for b in inner[1:]]
    return ReadPlan(tuple(bounds), tuple(splits))
