"""A final aggregation whose partials come from one producer subtask is a projection: when the
task executor decides that (no Spark needed to test the decision; ``test_data_plane`` runs
both ways against PySpark)."""

from __future__ import annotations

import pytest

from sparkmill.common.core.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.pipeline import plan as S
from sparkmill.services.taskexecutor.spark.exchange import hash_gate_producers
from sparkmill.services.taskexecutor.spark.runner import of_one_producer

pytestmark = pytest.mark.unit

DATASET = "d" * 32


def _gate(
    producers: int, partitioner: str = S.HASH, read_slices: tuple[int, ...] = ()
) -> InputGateInfo:
    parts = tuple(InputPartitionInfo(DATASET, i, f"{i:032x}", "te") for i in range(producers))
    return InputGateInfo(
        DATASET,
        "ALL_TO_ALL",
        partitioner,
        producers,
        parts,
        subpartitions=4,
        read_slices=read_slices,
    )


def _chain(final_input: S.Operation) -> S.ChainSpec:
    final = S.FinalAgg(("word",), (("sum", "__sm_agg0", "count"),))
    return S.ChainSpec(
        "agg",
        (S.NodeSpec(0, "input", final_input), S.NodeSpec(1, "agg", final, (0,))),
        root=1,
        outputs=(),
    )


def test_a_hash_gate_counts_the_producers_a_subtask_reads() -> None:
    assert hash_gate_producers(_gate(1), 0) == 1
    assert hash_gate_producers(_gate(3), 2) == 3
    assert hash_gate_producers(_gate(0), 0) == 0
    # A skewed sub-partition split: subtask 0 reads sub-partitions 0..2 of every producer,
    # subtask 1 sub-partition 3 of producer 1 alone, subtask 2 of producers 2..3.
    slices = (0, 3, 0, 4, 3, 4, 1, 2, 3, 4, 2, 4)
    assert [hash_gate_producers(_gate(4, read_slices=slices), s) for s in range(3)] == [4, 1, 2]
    assert hash_gate_producers(_gate(1, S.FORWARD), 0) is None
    assert hash_gate_producers(_gate(1, S.REBALANCE), 0) is None


def test_only_partials_straight_from_one_producer_skip_the_merge() -> None:
    spec = _chain(S.GateInput(DATASET, S.HASH))
    final = spec.nodes[1]
    assert of_one_producer(spec, final, {DATASET: _gate(1)}, 0)
    assert of_one_producer(spec, final, {DATASET: _gate(0)}, 0)  # nothing to merge either
    assert not of_one_producer(spec, final, {DATASET: _gate(2)}, 0)
    assert not of_one_producer(spec, final, {}, 0)  # no gate: the build reports that
    through = S.ChainSpec(
        "agg",
        (
            S.NodeSpec(0, "input", S.GateInput(DATASET, S.HASH)),
            S.NodeSpec(1, "where", S.Apply("where", ("count > 1",))),
            S.NodeSpec(2, "agg", final.op, (1,)),
        ),
        root=2,
        outputs=(),
    )
    # Only straight from the gate: what lies between could merge keys.
    assert not of_one_producer(through, through.nodes[2], {DATASET: _gate(1)}, 0)
