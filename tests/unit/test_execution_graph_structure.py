"""The execution graph's structure: expansion of job vertices into subtasks, pointwise and
all-to-all wiring, consumability of consumed partition groups, and size at scale."""

from __future__ import annotations

import itertools

import pytest

from sparkmill.common.core.ids import new_vertex_id
from sparkmill.common.jobgraph.model import (
    JobEdge,
)
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    ExecutionGraph,
    ExecutionVertexID,
    PartitionID,
)
from tests.unit.execution_graph_builders import (
    ALL_TO_ALL,
    PIPELINED,
    POINTWISE,
    E,
    JobBuilder,
    finish,
    subtasks,
    two_vertex_graph,
    wiring,
)

# ------------------------------------------------------------------ expansion


def test_one_execution_job_vertex_per_job_vertex_with_parallelism_subtasks():
    graph, b = two_vertex_graph(3, 5, ALL_TO_ALL)
    src = graph.job_vertex(b.vertices["src"].id)
    dst = graph.job_vertex(b.vertices["dst"].id)
    assert (src.parallelism, dst.parallelism) == (3, 5)
    assert [v.subtask_index for v in src.task_vertices] == [0, 1, 2]
    assert graph.num_execution_vertices == 8
    assert len(src.produced_results) == 1 and dst.produced_results == []
    assert dst.inputs == src.produced_results
    result = src.produced_results[0]
    assert result.num_partitions == 3
    for i, partition in enumerate(result.partitions):
        assert partition.producer is src.task_vertices[i]
        assert partition.id == PartitionID(result.id, i)
        assert src.task_vertices[i].produced_partitions == [partition]
        assert graph.partition(PartitionID(result.id, i)) is partition
    ev = graph.vertex(dst.id, 4)
    assert ev.id == ExecutionVertexID(dst.id, 4)
    assert graph.vertex_by_id(ev.id) is ev
    assert ev.task_name_with_subtask == "dst (5/5)"
    assert ev.vertex_version == 0
    assert ev.current_execution.attempt_number == 0
    assert ev.current_execution.state is E.CREATED


def test_unknown_vertex_or_subtask_lookup_fails():
    graph, b = two_vertex_graph(2, 2, ALL_TO_ALL)
    with pytest.raises(KeyError):
        graph.vertex(new_vertex_id(), 0)
    with pytest.raises(IndexError):
        graph.vertex(b.vertices["src"].id, 2)
    with pytest.raises(IndexError):
        graph.vertex(b.vertices["src"].id, -1)


def test_vertices_are_created_in_topological_order():
    b = JobBuilder()
    for name, p in [("sink", 1), ("join", 2), ("left", 3), ("right", 2), ("source", 2)]:
        b.vertex(name, p)
    b.edge("source", "left")
    b.edge("source", "right", POINTWISE)
    b.edge("left", "join")
    b.edge("right", "join", POINTWISE)
    b.edge("join", "sink")
    graph = ExecutionGraph.build(b.job())  # listed sinks first
    names = [ejv.name for ejv in graph.job_vertices]
    position = {n: i for i, n in enumerate(names)}
    assert names[0] == "source" and names[-1] == "sink"
    assert position["left"] < position["join"] and position["right"] < position["join"]
    flat = [(ev.job_vertex.name, ev.subtask_index) for ev in graph.all_execution_vertices()]
    expected = [(ejv.name, i) for ejv in graph.job_vertices for i in range(ejv.parallelism)]
    assert flat == expected


def test_a_vertex_with_two_inputs_has_one_group_per_input_in_input_order():
    b = JobBuilder()
    b.vertex("a", 2)
    b.vertex("b", 3)
    b.vertex("join", 3)
    b.edge("a", "join", ALL_TO_ALL)
    b.edge("b", "join", POINTWISE)
    graph = ExecutionGraph.build(b.job())
    a_result = graph.job_vertex(b.vertices["a"].id).produced_results[0]
    b_result = graph.job_vertex(b.vertices["b"].id).produced_results[0]
    for ev in subtasks(graph, b, "join"):
        first, second = ev.consumed_partition_groups
        assert first.result is a_result and len(first) == 2
        assert second.result is b_result and [p.partition_number for p in second] == [
            ev.subtask_index
        ]
        producers = graph.producers_of(ev)
        assert [p.job_vertex.name for p in producers] == ["a", "a", "b"]


def test_build_rejects_a_parallelism_below_one():
    b = JobBuilder()
    b.vertex("bad", 0)
    with pytest.raises(ValueError, match="parallelism"):
        ExecutionGraph.build(b.job())


def test_build_rejects_a_cycle():
    b = JobBuilder()
    b.vertex("a", 1)
    b.vertex("b", 1)
    b.edge("a", "b")
    b.edge("b", "a")
    with pytest.raises(ValueError, match="cycle"):
        ExecutionGraph.build(b.job())


# ------------------------------------------------------------------ pointwise wiring


def test_pointwise_3_to_7_spreads_each_partition_over_a_range_of_consumers():
    graph, b = two_vertex_graph(3, 7, POINTWISE)
    readers, reads = wiring(graph, b)
    assert readers == {0: [0, 1, 2], 1: [3, 4], 2: [5, 6]}
    assert reads == {0: [0], 1: [0], 2: [0], 3: [1], 4: [1], 5: [2], 6: [2]}
    # Consumers of one partition share one group object.
    dst = subtasks(graph, b, "dst")
    assert dst[0].consumed_partition_groups[0] is dst[2].consumed_partition_groups[0]
    assert dst[2].consumed_partition_groups[0] is not dst[3].consumed_partition_groups[0]


def test_pointwise_7_to_3_gives_each_consumer_a_range_of_partitions():
    graph, b = two_vertex_graph(7, 3, POINTWISE)
    readers, reads = wiring(graph, b)
    assert reads == {0: [0, 1], 1: [2, 3], 2: [4, 5, 6]}
    assert readers == {0: [0], 1: [0], 2: [1], 3: [1], 4: [2], 5: [2], 6: [2]}


def test_pointwise_equal_parallelism_is_one_to_one():
    graph, b = two_vertex_graph(4, 4, POINTWISE)
    readers, reads = wiring(graph, b)
    assert readers == {i: [i] for i in range(4)}
    assert reads == {i: [i] for i in range(4)}
    assert len(graph.consumed_partition_groups()) == 4


def test_pointwise_one_to_n_every_consumer_reads_the_single_partition():
    graph, b = two_vertex_graph(1, 5, POINTWISE)
    readers, reads = wiring(graph, b)
    assert readers == {0: [0, 1, 2, 3, 4]}
    assert reads == {i: [0] for i in range(5)}
    assert len(graph.consumed_partition_groups()) == 1


def test_pointwise_n_to_one_the_single_consumer_reads_every_partition():
    graph, b = two_vertex_graph(5, 1, POINTWISE)
    readers, reads = wiring(graph, b)
    assert readers == {i: [0] for i in range(5)}
    assert reads == {0: [0, 1, 2, 3, 4]}


@pytest.mark.parametrize(
    ("sources", "targets"), list(itertools.product(range(1, 10), range(1, 10)))
)
def test_pointwise_covers_everything_with_contiguous_ranges(sources, targets):
    graph, b = two_vertex_graph(sources, targets, POINTWISE)
    readers, reads = wiring(graph, b)
    assert all(readers.values()) and all(reads.values())
    for ranges in (readers.values(), reads.values()):
        for r in ranges:
            assert r == list(range(r[0], r[-1] + 1))
    # Each (partition, consumer) pair appears from both sides.
    pairs_a = {(p, c) for p, cs in readers.items() for c in cs}
    pairs_b = {(p, c) for c, ps in reads.items() for p in ps}
    assert pairs_a == pairs_b
    # Every consumer reads one partition, or every partition has one reader.
    if sources >= targets:
        assert all(len(cs) == 1 for cs in readers.values())
    if sources <= targets:
        assert all(len(ps) == 1 for ps in reads.values())


# ------------------------------------------------------------------ all-to-all wiring


def test_all_to_all_connects_every_consumer_to_every_partition():
    graph, b = two_vertex_graph(3, 4, ALL_TO_ALL)
    readers, reads = wiring(graph, b)
    assert readers == {p: [0, 1, 2, 3] for p in range(3)}
    assert reads == {c: [0, 1, 2] for c in range(4)}


def test_all_to_all_shares_one_group_object_of_each_kind():
    graph, b = two_vertex_graph(300, 200, ALL_TO_ALL)
    dst = subtasks(graph, b, "dst")
    partitions = graph.job_vertex(b.vertices["src"].id).produced_results[0].partitions
    group = dst[0].consumed_partition_groups[0]
    assert all(len(ev.consumed_partition_groups) == 1 for ev in dst)
    assert all(ev.consumed_partition_groups[0] is group for ev in dst)
    consumer_group = partitions[0].consumer_vertex_groups[0]
    assert all(p.consumer_vertex_groups == [consumer_group] for p in partitions)
    assert group.consumer_vertex_group is consumer_group
    assert consumer_group.consumed_partition_group is group
    assert len(group) == 300 and len(consumer_group) == 200
    assert graph.consumed_partition_groups() == [group]


def test_a_result_read_by_two_consumers_has_a_consumer_group_per_edge():
    b = JobBuilder()
    b.vertex("src", 2)
    b.vertex("x", 2)
    b.vertex("y", 3)
    b.edge("src", "x", POINTWISE)
    src = b.vertices["src"]
    ds = src.produced[0]
    b.vertices["y"].inputs.append(JobEdge(ds.id, b.vertices["y"].id, ALL_TO_ALL))
    graph = ExecutionGraph.build(b.job())
    p0 = graph.job_vertex(src.id).produced_results[0].partitions[0]
    assert len(p0.consumer_vertex_groups) == 2
    assert [(c.job_vertex.name, c.subtask_index) for c in graph.consumers_of(p0)] == [
        ("x", 0),
        ("y", 0),
        ("y", 1),
        ("y", 2),
    ]


# ------------------------------------------------------------------ consumability


def test_all_to_all_group_is_consumable_once_every_producer_finished():
    graph, b = two_vertex_graph(3, 2, ALL_TO_ALL)
    src = subtasks(graph, b, "src")
    group = subtasks(graph, b, "dst")[0].consumed_partition_groups[0]
    assert graph.downstream_groups(src[0]) == [group]
    for i, ev in enumerate(src):
        assert not graph.is_consumable(group)
        assert group.num_finished == i
        finish(ev)
    assert graph.is_consumable(group) and group.num_finished == 3
    assert all(p.is_finished for p in group.partitions)


def test_only_finished_counts_towards_consumability():
    graph, b = two_vertex_graph(2, 1, ALL_TO_ALL)
    src = subtasks(graph, b, "src")
    group = subtasks(graph, b, "dst")[0].consumed_partition_groups[0]
    finish(src[0])
    src[1].current_execution.mark_failed("boom")
    assert group.num_finished == 1 and not group.is_consumable


def test_pointwise_groups_become_consumable_independently():
    graph, b = two_vertex_graph(4, 2, POINTWISE)
    src = subtasks(graph, b, "src")
    g0, g1 = (ev.consumed_partition_groups[0] for ev in subtasks(graph, b, "dst"))
    finish(src[0])
    finish(src[1])
    assert g0.is_consumable and not g1.is_consumable
    finish(src[2])
    assert not g1.is_consumable
    finish(src[3])
    assert g1.is_consumable


def test_resetting_a_finished_producer_makes_its_groups_unconsumable_again():
    graph, b = two_vertex_graph(2, 3, ALL_TO_ALL)
    src = subtasks(graph, b, "src")
    group = subtasks(graph, b, "dst")[0].consumed_partition_groups[0]
    for ev in src:
        finish(ev)
    assert group.is_consumable
    graph.reset_vertex_for_new_execution(src[1])
    assert not group.is_consumable and group.num_finished == 1
    assert not src[1].produced_partitions[0].is_finished
    finish(src[1])
    assert group.is_consumable and group.num_finished == 2


# ------------------------------------------------------------------ scale (structure only)


def test_large_all_to_all_is_linear_in_size():
    graph, b = two_vertex_graph(3000, 3000, ALL_TO_ALL, PIPELINED)
    assert len(graph.consumed_partition_groups()) == 1
    dst = subtasks(graph, b, "dst")
    assert len({id(ev.consumed_partition_groups[0]) for ev in dst}) == 1
    partitions = graph.job_vertex(b.vertices["src"].id).produced_results[0].partitions
    assert len({id(p.consumer_vertex_groups[0]) for p in partitions}) == 1
    assert len(graph.pipelined_regions()) == 1
