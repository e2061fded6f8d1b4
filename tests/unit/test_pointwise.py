"""The POINTWISE rule: the partitions the execution graph wires to each consumer are exactly the
ones the exchange splits for it and reads for it (one rule, common/exchange/pointwise.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.exchange.layout import DATA_DIR, SCHEMA_FILE, partition_dir
from sparkmill.common.exchange.pointwise import pointwise_readers
from sparkmill.common.jobgraph.model import DistributionPattern, JobGraph, ResultPartitionType
from sparkmill.common.pipeline.plan import FORWARD
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from sparkmill.services.taskexecutor.spark import exchange
from tests.unit.scheduler_harness import build_graph

POINTWISE = DistributionPattern.POINTWISE
BLOCKING = ResultPartitionType.BLOCKING


def pointwise_graph(producers: int, consumers: int) -> tuple[JobGraph, ExecutionGraph]:
    job_graph = build_graph(
        {"producer": producers, "consumer": consumers},
        [("producer", "consumer", POINTWISE, BLOCKING)],
    )
    return job_graph, ExecutionGraph.build(job_graph)


def wired_consumers(producers: int, consumers: int) -> list[list[int]]:
    """For each producer partition, the consumer subtasks the execution graph wires to it."""
    job_graph, graph = pointwise_graph(producers, consumers)
    result = graph.job_vertex(job_graph.vertices[0].id).produced_results[0]
    return [
        [vertex.subtask_index for group in partition.consumer_vertex_groups for vertex in group]
        for partition in result.partitions
    ]


def test_every_partition_is_split_for_exactly_the_consumers_the_graph_wires_to_it() -> None:
    for producers in range(1, 41):
        for consumers in range(1, 41):
            wired = wired_consumers(producers, consumers)
            split_for = [list(pointwise_readers(p, producers, consumers)) for p in range(producers)]
            assert split_for == wired, f"{producers} producers -> {consumers} consumers"


def flink_readers(partition: int, producers: int, consumers: int) -> list[int]:
    """Flink's EdgeManagerBuildUtil.connectPointwise, stated from the consumers' side when
    producers >= consumers (consumer i reads [i*S//T, (i+1)*S//T))."""
    if producers >= consumers:
        return [
            i
            for i in range(consumers)
            if i * producers // consumers <= partition < (i + 1) * producers // consumers
        ]
    first = (partition * consumers + producers - 1) // producers
    end = ((partition + 1) * consumers + producers - 1) // producers
    return list(range(first, end))


def test_the_wiring_is_flinks_pointwise_connection() -> None:
    for producers in range(1, 41):
        for consumers in range(1, 41):
            expected = [flink_readers(p, producers, consumers) for p in range(producers)]
            assert wired_consumers(producers, consumers) == expected, (
                f"{producers} producers -> {consumers} consumers"
            )


def test_five_producers_two_consumers_partition_two_goes_to_consumer_one() -> None:
    assert wired_consumers(5, 2)[2] == [1]
    assert list(pointwise_readers(2, 5, 2)) == [1]


def _write_partition_dirs(base: Path, job: str, partitions: int, readers: list[int]) -> None:
    for p in range(partitions):
        target = partition_dir(str(base), job, "ds", p, f"att-{p}")
        data = target / DATA_DIR
        if readers[p] > 1:
            for share in range(readers[p]):
                (data / f"__sm_part={share}").mkdir(parents=True)
        else:
            data.mkdir(parents=True)
        (target / SCHEMA_FILE).write_text("{}")


@pytest.mark.parametrize(("producers", "consumers"), [(5, 2), (2, 5), (3, 3), (7, 3), (3, 7)])
def test_each_consumer_reads_each_share_exactly_once(
    tmp_path: Path, producers: int, consumers: int
) -> None:
    job_graph, graph = pointwise_graph(producers, consumers)
    counts = [len(pointwise_readers(p, producers, consumers)) for p in range(producers)]
    _write_partition_dirs(tmp_path, "0123456789abcdef0123456789abcdef", producers, counts)
    read: list[str] = []
    for vertex in graph.job_vertex(job_graph.vertices[1].id).task_vertices:
        (group,) = vertex.consumed_partition_groups
        gate = InputGateInfo(
            "ds",
            "POINTWISE",
            FORWARD,
            producers,
            tuple(
                InputPartitionInfo("ds", p.partition_number, f"att-{p.partition_number}", "")
                for p in group
            ),
        )
        paths, schema = exchange.gate_paths(
            gate, str(tmp_path), "0123456789abcdef0123456789abcdef", vertex.subtask_index, consumers
        )
        assert schema == "{}"
        read.extend(paths)
    # Every partition (or every share of a split one) is read, and by one consumer only.
    expected = [
        str(
            partition_dir(str(tmp_path), "0123456789abcdef0123456789abcdef", "ds", p, f"att-{p}")
            / DATA_DIR
        )
        + (f"/__sm_part={share}" if counts[p] > 1 else "")
        for p in range(producers)
        for share in range(counts[p])
    ]
    assert sorted(read) == sorted(expected)


def test_a_consumer_wired_to_a_partition_it_does_not_read_is_a_bug(tmp_path: Path) -> None:
    _write_partition_dirs(tmp_path, "0123456789abcdef0123456789abcdef", 5, [1] * 5)
    gate = InputGateInfo("ds", "POINTWISE", FORWARD, 5, (InputPartitionInfo("ds", 0, "att-0", ""),))
    with pytest.raises(IllegalStateBug, match="is wired to partition 0"):
        exchange.gate_paths(gate, str(tmp_path), "0123456789abcdef0123456789abcdef", 1, 2)


def test_bad_arguments_are_a_bug() -> None:
    with pytest.raises(IllegalStateBug):
        pointwise_readers(5, 5, 2)
    with pytest.raises(IllegalStateBug):
        pointwise_readers(0, 0, 2)
