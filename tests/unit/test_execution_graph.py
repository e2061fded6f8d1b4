"""The execution graph: expansion, wiring, consumability, attempts, counts and regions."""

from __future__ import annotations

import itertools
import random

import pytest

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import new_dataset_id, new_job_id, new_vertex_id
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.jobgraph.model import (
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
    ResultPartitionType,
)
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    MAX_PRIOR_ATTEMPTS_KEPT,
    ExecutionGraph,
    ExecutionVertexID,
    PartitionID,
    PipelinedRegion,
)

E = ExecutionState
POINTWISE = DistributionPattern.POINTWISE
ALL_TO_ALL = DistributionPattern.ALL_TO_ALL
BLOCKING = ResultPartitionType.BLOCKING
PIPELINED = ResultPartitionType.PIPELINED


class JobBuilder:
    """Small helper to write job graphs tersely."""

    def __init__(self) -> None:
        self.vertices: dict[str, JobVertex] = {}

    def vertex(self, name: str, parallelism: int) -> JobVertex:
        v = JobVertex(new_vertex_id(), name, parallelism, OperatorSpec("noop"))
        self.vertices[name] = v
        return v

    def edge(
        self,
        producer: str,
        consumer: str,
        pattern: DistributionPattern = ALL_TO_ALL,
        result_type: ResultPartitionType = BLOCKING,
    ) -> None:
        src, dst = self.vertices[producer], self.vertices[consumer]
        ds = IntermediateDataSet(new_dataset_id(), src.id, result_type)
        src.produced.append(ds)
        dst.inputs.append(JobEdge(ds.id, dst.id, pattern))

    def job(self, order: list[str] | None = None) -> JobGraph:
        names = order if order is not None else list(self.vertices)
        return JobGraph(new_job_id(), "test-job", [self.vertices[n] for n in names])


def two_vertex_graph(
    sources: int,
    targets: int,
    pattern: DistributionPattern,
    result_type: ResultPartitionType = BLOCKING,
    **build_kwargs,
) -> tuple[ExecutionGraph, JobBuilder]:
    b = JobBuilder()
    b.vertex("src", sources)
    b.vertex("dst", targets)
    b.edge("src", "dst", pattern, result_type)
    return ExecutionGraph.build(b.job(), **build_kwargs), b


def subtasks(graph: ExecutionGraph, b: JobBuilder, name: str):
    return graph.job_vertex(b.vertices[name].id).task_vertices


def wiring(graph: ExecutionGraph, b: JobBuilder):
    """({partition number: consumer subtasks}, {consumer subtask: producer subtasks})."""
    result = graph.job_vertex(b.vertices["src"].id).produced_results[0]
    readers = {
        p.partition_number: [c.subtask_index for c in graph.consumers_of(p)]
        for p in result.partitions
    }
    reads = {
        c.subtask_index: [p.subtask_index for p in graph.producers_of(c)]
        for c in subtasks(graph, b, "dst")
    }
    return readers, reads


def run_to(execution, *states: ExecutionState) -> None:
    for state in states:
        execution.transition_to(state)


def finish(vertex) -> None:
    run_to(vertex.current_execution, E.SCHEDULED, E.DEPLOYING, E.INITIALIZING, E.RUNNING)
    vertex.current_execution.transition_to(E.FINISHED)


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


# ------------------------------------------------------------------ attempts


def test_reset_creates_a_new_attempt_and_bumps_the_version():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    ev = subtasks(graph, b, "src")[0]
    first = ev.current_execution
    assert graph.execution(first.attempt_id) == first  # identity: no __eq__ override
    run_to(first, E.SCHEDULED, E.DEPLOYING)
    first.mark_failed("lost the task executor", ConnectionError("gone"))
    second = graph.reset_vertex_for_new_execution(ev)
    assert ev.current_execution is second
    assert second.attempt_number == 1 and ev.vertex_version == 1
    assert second.state is E.CREATED and second.attempt_id != first.attempt_id
    assert second.assigned_resource is None and second.failure_info is None
    assert graph.execution(first.attempt_id) is None
    assert graph.execution(second.attempt_id) is second
    assert not first.is_current and second.is_current
    assert ev.prior_executions == [first]
    second.transition_to(E.CANCELED)
    third = graph.reset_vertex_for_new_execution(ev)
    assert (third.attempt_number, ev.vertex_version) == (2, 2)
    assert ev.prior_executions == [first, second]


def test_prior_attempt_history_is_bounded():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    ev = subtasks(graph, b, "src")[0]
    for _ in range(MAX_PRIOR_ATTEMPTS_KEPT + 5):
        ev.current_execution.transition_to(E.CANCELED)
        graph.reset_vertex_for_new_execution(ev)
    history = ev.prior_executions
    assert len(history) == MAX_PRIOR_ATTEMPTS_KEPT
    assert history[-1].attempt_number == ev.current_execution.attempt_number - 1


@pytest.mark.parametrize("state", [E.CREATED, E.SCHEDULED, E.RUNNING, E.CANCELING])
def test_resetting_a_non_terminal_attempt_is_a_bug(state):
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    ev = subtasks(graph, b, "src")[0]
    path = {
        E.CREATED: [],
        E.SCHEDULED: [E.SCHEDULED],
        E.RUNNING: [E.SCHEDULED, E.DEPLOYING, E.INITIALIZING, E.RUNNING],
        E.CANCELING: [E.SCHEDULED, E.DEPLOYING, E.CANCELING],
    }[state]
    run_to(ev.current_execution, *path)
    with pytest.raises(IllegalStateBug, match="not terminal"):
        graph.reset_vertex_for_new_execution(ev)
    assert ev.vertex_version == 0 and ev.current_execution.attempt_number == 0


def test_illegal_execution_transition_raises_and_changes_nothing():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    execution = subtasks(graph, b, "src")[0].current_execution
    with pytest.raises(IllegalStateBug, match="CREATED -> RUNNING"):
        execution.transition_to(E.RUNNING)
    assert execution.state is E.CREATED
    assert graph.state_counts()[E.CREATED] == 2
    finish(execution.vertex)
    with pytest.raises(IllegalStateBug, match="src \\(1/1\\) attempt #0"):
        execution.transition_to(E.FAILED)
    assert not execution.can_transition_to(E.CANCELING)


def test_a_failure_cause_belongs_only_to_failed():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    execution = subtasks(graph, b, "src")[0].current_execution
    with pytest.raises(IllegalStateBug, match="failure cause"):
        execution.transition_to(E.SCHEDULED, failure="nope")
    assert execution.state is E.CREATED


def test_states_are_timestamped_and_failures_recorded_with_the_graph_clock():
    now = [100.0]
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL, clock=lambda: now[0])
    execution = subtasks(graph, b, "src")[0].current_execution
    assert execution.state_timestamp(E.CREATED) == 100.0
    now[0] = 101.5
    execution.transition_to(E.SCHEDULED)
    now[0] = 103.0
    execution.mark_failed("no slot", TimeoutError("slot request timed out"))
    assert execution.state_timestamp(E.SCHEDULED) == 101.5
    assert execution.state_timestamp(E.FAILED) == 103.0
    assert execution.state_timestamp(E.RUNNING) is None
    info = execution.failure_info
    assert info is not None
    assert (info.message, info.timestamp, info.exception_class) == (
        "no slot",
        103.0,
        "TimeoutError",
    )


def test_a_superseded_attempt_stays_terminal():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    ev = subtasks(graph, b, "src")[0]
    old = ev.current_execution
    old.transition_to(E.CANCELED)
    graph.reset_vertex_for_new_execution(ev)
    with pytest.raises(IllegalStateBug):
        old.transition_to(E.RUNNING)


def test_assigned_resource_is_kept_opaque():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    execution = subtasks(graph, b, "src")[0].current_execution
    slot = object()
    execution.assigned_resource = slot
    found = graph.execution(execution.attempt_id)
    assert found is not None and found.assigned_resource is slot


# ------------------------------------------------------------------ state counts


def test_state_counts_follow_transitions_and_resets():
    graph, b = two_vertex_graph(2, 3, ALL_TO_ALL)
    counts = graph.state_counts()
    assert counts[E.CREATED] == 5 and sum(counts.values()) == 5
    assert set(counts) == set(ExecutionState)
    src = subtasks(graph, b, "src")
    run_to(src[0].current_execution, E.SCHEDULED, E.DEPLOYING)
    finish(src[1])
    counts = graph.state_counts()
    assert (counts[E.CREATED], counts[E.DEPLOYING], counts[E.FINISHED]) == (3, 1, 1)
    src[0].current_execution.mark_failed("boom")
    graph.reset_vertex_for_new_execution(src[0])
    counts = graph.state_counts()
    assert (counts[E.CREATED], counts[E.FAILED], counts[E.FINISHED]) == (4, 0, 1)
    assert sum(counts.values()) == 5
    # The returned dict is a snapshot.
    counts[E.CREATED] = 99
    assert graph.state_counts()[E.CREATED] == 4


def progress(graph: ExecutionGraph) -> tuple[bool, bool]:
    return graph.all_vertices_terminal, graph.all_vertices_finished


def test_all_vertices_finished_and_terminal():
    graph, _ = two_vertex_graph(1, 2, ALL_TO_ALL)
    vertices = list(graph.all_execution_vertices())
    assert progress(graph) == (False, False)
    finish(vertices[0])
    finish(vertices[1])
    vertices[2].current_execution.transition_to(E.CANCELED)
    assert progress(graph) == (True, False)
    graph.reset_vertex_for_new_execution(vertices[2])
    assert progress(graph) == (False, False)
    finish(vertices[2])
    assert progress(graph) == (True, True)


# ------------------------------------------------------------------ pipelined regions


def region_members(region: PipelinedRegion) -> list[tuple[str, int]]:
    return sorted((ev.job_vertex.name, ev.subtask_index) for ev in region)


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


def naive_regions(graph: ExecutionGraph) -> list[set[tuple[str, int]]]:
    """Regions by brute force: pipelined components, then merge mutually reachable regions."""
    vertices = list(graph.all_execution_vertices())
    key = {id(v): (v.job_vertex.name, v.subtask_index) for v in vertices}
    pairs = [
        (key[id(p.producer)], key[id(c)], group.result_type)
        for c in vertices
        for group in c.consumed_partition_groups
        for p in group.partitions
    ]
    region = {key[id(v)]: {key[id(v)]} for v in vertices}

    def merge(a: tuple[str, int], b: tuple[str, int]) -> None:
        if region[a] is not region[b]:
            union = region[a] | region[b]
            for member in union:
                region[member] = union

    for producer, consumer, result_type in pairs:
        if result_type is PIPELINED:
            merge(producer, consumer)
    regions = {id(r): r for r in region.values()}
    succ: dict[int, set[int]] = {rid: set() for rid in regions}
    for producer, consumer, _ in pairs:
        if region[producer] is not region[consumer]:
            succ[id(region[producer])].add(id(region[consumer]))

    def reachable(start: int) -> set[int]:
        seen: set[int] = set()
        todo = [start]
        while todo:
            for nxt in succ[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reach = {rid: reachable(rid) for rid in regions}
    for a in regions:
        for b in regions:
            if a != b and b in reach[a] and a in reach[b]:
                merge(next(iter(regions[a])), next(iter(regions[b])))
    return sorted({id(r): r for r in region.values()}.values(), key=sorted)


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


# ------------------------------------------------------------------ scale (structure only)


def test_large_all_to_all_is_linear_in_size():
    graph, b = two_vertex_graph(3000, 3000, ALL_TO_ALL, PIPELINED)
    assert len(graph.consumed_partition_groups()) == 1
    dst = subtasks(graph, b, "dst")
    assert len({id(ev.consumed_partition_groups[0]) for ev in dst}) == 1
    partitions = graph.job_vertex(b.vertices["src"].id).produced_results[0].partitions
    assert len({id(p.consumer_vertex_groups[0]) for p in partitions}) == 1
    assert len(graph.pipelined_regions()) == 1
