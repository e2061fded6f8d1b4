"""The execution graph's pipelined regions, checked by hand and against a brute-force
computation."""

from __future__ import annotations

import itertools
import random

import pytest

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    ExecutionGraph,
)
from tests.unit.execution_graph_builders import (
    ALL_TO_ALL,
    BLOCKING,
    PIPELINED,
    POINTWISE,
    JobBuilder,
    finish,
    naive_regions,
    region_members,
    subtasks,
    two_vertex_graph,
)


def test_pipelined_all_to_all_chain_is_one_region():
    b = JobBuilder()
    b.vertex("a", 3)
    b.vertex("b", 4)
    b.vertex("c", 2)
    b.edge("a", "b", ALL_TO_ALL, PIPELINED)
    b.edge("b", "c", ALL_TO_ALL, PIPELINED)
    graph = ExecutionGraph.build(b.job())
    regions = graph.pipelined_regions()
    assert len(regions) == 1 and len(regions[0]) == 9
    assert all(graph.region_of(ev) is regions[0] for ev in graph.all_execution_vertices())
    assert regions[0].blocking_consumed_groups == ()
    assert regions[0].inputs_consumable


def test_blocking_edges_leave_every_vertex_its_own_region():
    graph, _ = two_vertex_graph(3, 4, ALL_TO_ALL, BLOCKING)
    regions = graph.pipelined_regions()
    assert len(regions) == 7
    assert all(len(r) == 1 for r in regions)
    assert len({id(graph.region_of(ev)) for ev in graph.all_execution_vertices()}) == 7
    assert [r.index for r in regions] == list(range(7))


def test_pipelined_pointwise_pairs_then_blocking_sink():
    b = JobBuilder()
    b.vertex("a", 3)
    b.vertex("b", 3)
    b.vertex("c", 2)
    b.edge("a", "b", POINTWISE, PIPELINED)
    b.edge("b", "c", ALL_TO_ALL, BLOCKING)
    graph = ExecutionGraph.build(b.job())
    regions = graph.pipelined_regions()
    assert sorted(region_members(r) for r in regions) == [
        [("a", 0), ("b", 0)],
        [("a", 1), ("b", 1)],
        [("a", 2), ("b", 2)],
        [("c", 0)],
        [("c", 1)],
    ]
    a0 = graph.vertex(b.vertices["a"].id, 0)
    b0 = graph.vertex(b.vertices["b"].id, 0)
    assert graph.region_of(a0) is graph.region_of(b0)
    assert a0 in graph.region_of(b0)
    # The sink's region waits for the blocking input, which the pair regions produce.
    c0 = graph.vertex(b.vertices["c"].id, 0)
    sink_region = graph.region_of(c0)
    blocking_group = c0.consumed_partition_groups[0]
    assert sink_region.blocking_consumed_groups == (blocking_group,)
    assert graph.region_of(a0).blocking_consumed_groups == ()
    assert not sink_region.inputs_consumable
    for ev in subtasks(graph, b, "b"):
        finish(ev)
    assert sink_region.inputs_consumable


def test_pipelined_pointwise_fan_out_merges_into_shared_regions():
    graph, _ = two_vertex_graph(2, 5, POINTWISE, PIPELINED)
    regions = graph.pipelined_regions()
    assert sorted(region_members(r) for r in regions) == [
        [("dst", 0), ("dst", 1), ("dst", 2), ("src", 0)],
        [("dst", 3), ("dst", 4), ("src", 1)],
    ]


def test_regions_depending_on_each_other_through_blocking_edges_are_merged():
    # a -> b is pipelined, so {a, b} is one region; a -> c -> b is blocking, so without the
    # merge {a, b} would wait for c while c waits for {a, b}.
    b = JobBuilder()
    b.vertex("a", 1)
    b.vertex("c", 1)
    b.vertex("b", 1)
    b.edge("a", "b", POINTWISE, PIPELINED)
    b.edge("a", "c", POINTWISE, BLOCKING)
    b.edge("c", "b", POINTWISE, BLOCKING)
    b.vertex("d", 2)
    b.edge("b", "d", ALL_TO_ALL, BLOCKING)  # not on a cycle: stays apart
    graph = ExecutionGraph.build(b.job())
    regions = graph.pipelined_regions()
    assert sorted(region_members(r) for r in regions) == [
        [("a", 0), ("b", 0), ("c", 0)],
        [("d", 0)],
        [("d", 1)],
    ]
    merged = graph.region_of(graph.vertex(b.vertices["a"].id, 0))
    # Its blocking inputs are all produced inside it: nothing to wait for.
    assert merged.blocking_consumed_groups == ()


@pytest.mark.parametrize("seed", range(60))
def test_regions_match_a_brute_force_computation(seed):
    rng = random.Random(seed)
    b = JobBuilder()
    names = [f"v{i}" for i in range(rng.randint(2, 7))]
    for name in names:
        b.vertex(name, rng.randint(1, 4))
    for i, j in itertools.combinations(range(len(names)), 2):
        if rng.random() < 0.45:
            b.edge(
                names[i],
                names[j],
                rng.choice([POINTWISE, ALL_TO_ALL]),
                rng.choice([PIPELINED, BLOCKING]),
            )
    graph = ExecutionGraph.build(b.job(list(reversed(names))))
    computed = sorted(
        ({(ev.job_vertex.name, ev.subtask_index) for ev in r} for r in graph.pipelined_regions()),
        key=sorted,
    )
    assert computed == naive_regions(graph)
    for region in graph.pipelined_regions():
        assert all(graph.region_of(ev) is region for ev in region)


def test_regions_are_computed_once():
    graph, _ = two_vertex_graph(2, 2, ALL_TO_ALL, PIPELINED)
    first = graph.pipelined_regions()
    assert graph.pipelined_regions() == first
    assert graph.pipelined_regions()[0] is first[0]


def test_a_vertex_of_another_graph_has_no_region_here():
    graph, _ = two_vertex_graph(1, 1, ALL_TO_ALL)
    other, _ = two_vertex_graph(1, 1, ALL_TO_ALL)
    with pytest.raises(IllegalStateBug):
        graph.region_of(next(other.all_execution_vertices()))
    with pytest.raises(IllegalStateBug):
        graph.reset_vertex_for_new_execution(next(other.all_execution_vertices()))
