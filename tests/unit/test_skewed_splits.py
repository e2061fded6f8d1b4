"""Splitting skewed sub-partitions of a join: every pair of rows that share a key meets in
exactly one subtask, and the split side's rows are each read once."""

from __future__ import annotations

import random

import pytest

from sparkmill.common.exchange.skewed_splits import (
    ReadPlan,
    SplitRange,
    plan_skewed_splits,
    read_plan_error,
    subtask_slice,
)

MIB = 1 << 20


def _reads(plan: ReadPlan, producers: list[int], count: int) -> list[list[set[tuple[int, int]]]]:
    """Per input, per consumer subtask: the (sub-partition, producer) pairs it reads."""
    out = []
    for i, p in enumerate(producers):
        slices = plan.slices(i, p)
        per_subtask = []
        for subtask in range(plan.consumers):
            subs, prods = subtask_slice(slices, subtask, count, p)
            per_subtask.append({(k, q) for k in subs for q in prods})
        out.append(per_subtask)
    return out


def _check_join_reads(plan: ReadPlan, producers: list[int], count: int, split_side: int) -> None:
    left, right = _reads(plan, producers, count)
    for k in range(count):
        for a in range(producers[0]):
            for b in range(producers[1]):
                meets = sum(
                    1 for s in range(plan.consumers) if (k, a) in left[s] and (k, b) in right[s]
                )
                assert meets == 1, (k, a, b)
    side = (left, right)[split_side]
    for k in range(count):
        for q in range(producers[split_side]):
            assert sum(1 for s in side if (k, q) in s) == 1


def _sizes(producers: int, count: int, hot: dict[int, int], rng: random.Random) -> list[list[int]]:
    return [
        [hot.get(k, 0) // producers + rng.randrange(MIB) for k in range(count)]
        for _ in range(producers)
    ]


@pytest.mark.parametrize("seed", range(20))
def test_a_split_plan_joins_every_pair_once(seed: int) -> None:
    rng = random.Random(seed)
    count, producers = rng.randrange(4, 40), [rng.randrange(2, 9), rng.randrange(1, 9)]
    hot = {rng.randrange(count): rng.randrange(300, 3000) * MIB for _ in range(rng.randrange(1, 4))}
    sizes = [_sizes(producers[0], count, hot, rng), _sizes(producers[1], count, {}, rng)]
    consumers = rng.randrange(1, count + 1)
    found = plan_skewed_splits(sizes, (0, 1), consumers, 200, 4.0, 256 * MIB)
    # Split: the hot sub-partitions that hold more than one subtask's share.
    share = sum(map(sum, sizes[0] + sizes[1])) / consumers
    expected = {k for k in hot if sum(p[k] for p in sizes[0]) > share}
    if not expected:
        assert found is None
        return
    assert found is not None
    plan, splits = found
    assert {s.subpartition for s in splits} == expected
    assert all(s.input_index == 0 and s.pieces >= 2 for s in splits)
    assert read_plan_error(plan, plan.consumers, count, producers, (0, 1)) == ""
    _check_join_reads(plan, producers, count, split_side=0)
    assert ReadPlan.decode(plan.encode()) == plan


def test_only_the_side_a_join_allows_is_split() -> None:
    rng = random.Random(1)
    sizes = [_sizes(4, 10, {}, rng), _sizes(4, 10, {3: 2000 * MIB}, rng)]
    assert plan_skewed_splits(sizes, (0,), 4, 100, 4.0, 256 * MIB) is None  # a left join
    found = plan_skewed_splits(sizes, (1,), 4, 100, 4.0, 256 * MIB)  # a right join
    assert found is not None
    plan, (split,) = found
    assert (split.subpartition, split.input_index) == (3, 1)
    _check_join_reads(plan, [4, 4], 10, split_side=1)


def test_nothing_is_split_below_the_threshold_or_the_factor() -> None:
    rng = random.Random(2)
    small = [_sizes(4, 10, {2: 200 * MIB}, rng), _sizes(4, 10, {}, rng)]
    assert plan_skewed_splits(small, (0, 1), 4, 100, 4.0, 256 * MIB) is None
    even = [[[300 * MIB] * 10 for _ in range(4)], [[MIB] * 10 for _ in range(4)]]
    assert plan_skewed_splits(even, (0, 1), 4, 100, 4.0, 256 * MIB) is None
    one_producer = [[[MIB] * 9 + [4000 * MIB]], [[MIB] * 10]]
    assert plan_skewed_splits(one_producer, (0, 1), 4, 100, 4.0, 256 * MIB) is None


def test_pieces_follow_the_share_and_the_producers_bytes() -> None:
    # 8 producers; sub-partition 5 holds 2 GiB of input 0, the rest 1 MiB each.
    sizes = [
        [[256 * MIB if k == 5 else MIB for k in range(16)] for _ in range(8)],
        [[MIB] * 16 for _ in range(2)],
    ]
    found = plan_skewed_splits(sizes, (0, 1), 4, 100, 4.0, 256 * MIB)
    assert found is not None
    plan, (split,) = found
    # The share is (2 GiB + 46 MiB) / 4, so 2 GiB goes into 4 pieces of 2 producers each.
    assert split.pieces == 4
    (only,) = plan.splits
    assert only.producer_bounds == (0, 2, 4, 6, 8)
    assert plan.bounds[only.range_index : only.range_index + 2] == (5, 6)
    # At most 5 subtasks: the split gets fewer pieces; at most 2 (no room to split): none.
    capped = plan_skewed_splits(sizes, (0, 1), 4, 5, 4.0, 256 * MIB)
    assert capped is not None and capped[0].consumers <= 5
    assert plan_skewed_splits(sizes, (0, 1), 4, 3, 4.0, 256 * MIB) is None


def test_a_malformed_plan_is_refused() -> None:
    good = ReadPlan((0, 2, 3, 5), (SplitRange(1, 0, (0, 2, 4)),))
    assert read_plan_error(good, 4, 5, [4, 3], (0, 1)) == ""
    bad = [
        (ReadPlan((0, 2, 3, 5), (SplitRange(0, 0, (0, 2, 4)),)), "not one"),
        (ReadPlan((0, 2, 3, 5), (SplitRange(1, 1, (0, 2, 4)),)), "producer bounds"),
        (ReadPlan((0, 2, 3, 5), (SplitRange(1, 0, (0, 4)),)), "producer bounds"),
        (ReadPlan((0, 2, 3, 5), (SplitRange(3, 0, (0, 2, 4)),)), "not a range"),
        (ReadPlan((0, 2, 3, 5), (SplitRange(1, 0, (0, 2, 4)),) * 2), "split twice"),
        (ReadPlan((0, 2, 3, 4)), "span"),
        (ReadPlan.decode((0, 2, 3, 5, -1, 1)), "not a range"),
    ]
    for plan, message in bad:
        assert message in read_plan_error(plan, 4, 5, [4, 3], (0, 1)), plan
    assert "may not be split" in read_plan_error(good, 4, 5, [4, 3], (1,))
    assert "not 5" in read_plan_error(good, 5, 5, [4, 3], (0, 1))
    with pytest.raises(Exception, match="not within"):
        subtask_slice((0, 2, 0, 9), 0, 5, 4)
