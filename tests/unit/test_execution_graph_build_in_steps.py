"""Unit tests: the execution graph built in slices (``build_in_steps`` driven by
``build_execution_graph``) is the graph ``build`` makes in one go, the loop runs between the
slices, and a build that is stopped drops its half-built graph."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from sparkmill.services.jobmaster.executiongraph.graph_building import (
    BuildStats,
    build_execution_graph,
)
from tests.unit.execution_graph_builders import (
    ALL_TO_ALL,
    BLOCKING,
    PIPELINED,
    POINTWISE,
    JobBuilder,
    naive_regions,
    region_members,
)


def _two(sources: int, targets: int, pattern: Any, result_type: Any = BLOCKING) -> JobGraph:
    b = JobBuilder()
    b.vertex("src", sources)
    b.vertex("dst", targets)
    b.edge("src", "dst", pattern, result_type)
    return b.job()


def _diamond() -> JobGraph:
    # Two inputs on one vertex, a vertex producing two results, mixed patterns and types, and a
    # job graph listed out of topological order.
    b = JobBuilder()
    b.vertex("sink", 3)
    b.vertex("left", 7)
    b.vertex("source", 5)
    b.vertex("right", 2)
    b.edge("source", "left", POINTWISE, PIPELINED)
    b.edge("source", "right", ALL_TO_ALL, BLOCKING)
    b.edge("left", "sink", POINTWISE, BLOCKING)
    b.edge("right", "sink", ALL_TO_ALL, PIPELINED)
    return b.job()


def _chain() -> JobGraph:
    b = JobBuilder()
    for name, parallelism in (("a", 9), ("b", 9), ("c", 4), ("d", 1)):
        b.vertex(name, parallelism)
    b.edge("a", "b", POINTWISE, PIPELINED)
    b.edge("b", "c", POINTWISE, BLOCKING)
    b.edge("c", "d", ALL_TO_ALL, BLOCKING)
    return b.job()


SHAPES: dict[str, Callable[[], JobGraph]] = {
    "all-to-all": lambda: _two(40, 30, ALL_TO_ALL),
    "pointwise S>T": lambda: _two(37, 5, POINTWISE),
    "pointwise S<T": lambda: _two(5, 37, POINTWISE, PIPELINED),
    "pointwise S=T": lambda: _two(20, 20, POINTWISE),
    "diamond": _diamond,
    "chain": _chain,
    "single subtask": lambda: _two(1, 1, ALL_TO_ALL),
}


def _signature(graph: ExecutionGraph) -> Any:
    """Everything about the structure, with attempt ids (random) left out."""
    vertices = []
    for ejv in graph.job_vertices:
        vertices.append(
            (
                ejv.id,
                ejv.parallelism,
                [r.id for r in ejv.inputs],
                [(r.id, r.result_type, [p.id for p in r.partitions]) for r in ejv.produced_results],
                [
                    (
                        ev.id,
                        ev._index,
                        ev.current_execution.state,
                        ev.current_execution.attempt_number,
                        [p.id for p in ev.produced_partitions],
                        [[p.id for p in g.partitions] for g in ev.consumed_partition_groups],
                    )
                    for ev in ejv.task_vertices
                ],
            )
        )
    groups = [
        ([p.id for p in g.partitions], [v.id for v in g.consumer_vertex_group.vertices])
        for g in graph.consumed_partition_groups()
    ]
    readers = {
        p.id: [[v.id for v in cg.vertices] for cg in p.consumer_vertex_groups]
        for ejv in graph.job_vertices
        for r in ejv.produced_results
        for p in r.partitions
    }
    regions = [
        (
            [v.id for v in region.vertices],
            [[p.id for p in g.partitions] for g in region.blocking_consumed_groups],
        )
        for region in graph.pipelined_regions()
    ]
    found = all(
        graph.execution(v.current_execution.attempt_id) is v.current_execution
        for v in graph.all_execution_vertices()
    )
    return vertices, groups, readers, regions, graph.state_counts(), found


def _stepwise(job_graph: JobGraph, chunk: int) -> tuple[ExecutionGraph, int]:
    steps = ExecutionGraph.build_in_steps(job_graph, chunk=chunk)
    for pauses in itertools.count():
        try:
            next(steps)
        except StopIteration as done:
            graph: ExecutionGraph = done.value
            return graph, pauses
    raise AssertionError("unreachable")


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("chunk", [1, 3, 512])
def test_the_graph_built_in_steps_is_the_graph_built_in_one_go(shape: str, chunk: int) -> None:
    job_graph = SHAPES[shape]()
    expected = _signature(ExecutionGraph.build(job_graph))
    graph, _ = _stepwise(job_graph, chunk)
    assert _signature(graph) == expected


def test_a_wide_vertex_is_built_a_chunk_at_a_time() -> None:
    # 40 + 30 subtasks in chunks of 4: at least one pause per chunk, so no single step creates
    # a whole wide vertex.
    _, pauses = _stepwise(_two(40, 30, ALL_TO_ALL), chunk=4)
    assert pauses >= 40 // 4 + 30 // 4


def test_pointwise_wiring_pauses_between_groups() -> None:
    # S == T: one group per subtask pair, 2 units of work each: chunk 2 pauses after every one.
    _, small = _stepwise(_two(20, 20, POINTWISE), chunk=2)
    _, all_to_all = _stepwise(_two(20, 20, ALL_TO_ALL), chunk=2)
    assert small - all_to_all >= 19


def test_a_bad_chunk_or_parallelism_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk"):
        next(ExecutionGraph.build_in_steps(_two(2, 2, ALL_TO_ALL), chunk=0))
    b = JobBuilder()
    b.vertex("zero", 0)
    with pytest.raises(ValueError, match="parallelism 0"):
        _stepwise(b.job(), chunk=8)


def test_the_loop_runs_between_slices_and_the_graph_is_the_same() -> None:
    job_graph = _two(40, 30, ALL_TO_ALL)
    expected = _signature(ExecutionGraph.build(job_graph))

    async def scenario() -> tuple[ExecutionGraph | None, int, int]:
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        # slice_s=0: every pause of the builder is a turn of the loop.
        graph = await build_execution_graph(job_graph, stopped=lambda: False, slice_s=0, chunk=4)
        during = ticks - before
        stop = True
        await task
        _, pauses = _stepwise(job_graph, chunk=4)
        return graph, during, pauses

    graph, during, pauses = asyncio.run(scenario())
    assert graph is not None and _signature(graph) == expected
    assert during >= pauses - 1  # the ticker ran at (nearly) every pause


def test_slices_are_cut_by_time_not_by_steps() -> None:
    # A clock that never moves: the whole build fits in one slice and the loop is not asked.
    async def scenario() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        graph = await build_execution_graph(
            _two(40, 30, ALL_TO_ALL), stopped=lambda: False, chunk=4, monotonic=lambda: 5.0
        )
        assert graph is not None
        during = ticks - before
        task.cancel()
        return during

    assert asyncio.run(scenario()) == 0


def test_a_stopped_build_drops_the_half_built_graph() -> None:
    answers: list[bool] = []

    def stopped() -> bool:
        answers.append(len(answers) >= 2)  # stop at the third pause
        return answers[-1]

    graph = asyncio.run(
        build_execution_graph(_two(40, 30, ALL_TO_ALL), stopped=stopped, slice_s=0, chunk=4)
    )
    assert graph is None
    assert answers == [False, False, True]  # not asked again once it said stop


def test_a_malformed_graph_fails_the_build_like_the_one_go_build() -> None:
    b = JobBuilder()
    b.vertex("a", 2)
    b.vertex("b", 2)
    b.edge("a", "b")
    b.edge("b", "a")  # a cycle
    with pytest.raises(ValueError):
        ExecutionGraph.build(b.job())
    with pytest.raises(ValueError):
        asyncio.run(build_execution_graph(b.job(), stopped=lambda: False, slice_s=0, chunk=1))


def _cyclic_regions() -> JobGraph:
    # PIPELINED pairs joined by BLOCKING edges both ways: their regions must be merged.
    b = JobBuilder()
    for name in ("a", "b", "c", "d"):
        b.vertex(name, 3)
    b.edge("a", "b", POINTWISE, PIPELINED)
    b.edge("c", "d", POINTWISE, PIPELINED)
    b.edge("a", "d", ALL_TO_ALL, BLOCKING)
    b.edge("c", "b", ALL_TO_ALL, BLOCKING)
    return b.job()


@pytest.mark.parametrize("shape", [*SHAPES, "cyclic regions"])
def test_regions_computed_a_vertex_at_a_time_are_the_brute_force_ones(shape: str) -> None:
    job_graph = _cyclic_regions() if shape == "cyclic regions" else SHAPES[shape]()
    graph, _ = _stepwise(job_graph, chunk=1)
    computed = sorted(({*region_members(r)} for r in graph.pipelined_regions()), key=sorted)
    assert computed == naive_regions(graph)
    assert all(graph.region_of(v) is not None for v in graph.all_execution_vertices())


def test_the_build_reports_its_slices_to_its_stats_and_after_each_one() -> None:
    # on_slice is how a JobMaster freezes a large graph as it grows (common/runtime/heap.py):
    # after every slice, the last one included, so no part of the graph is left out.
    job_graph = _two(40, 30, ALL_TO_ALL)
    _, pauses = _stepwise(job_graph, chunk=4)
    ticks = itertools.count()
    stats = BuildStats()
    calls: list[int] = []
    graph = asyncio.run(
        build_execution_graph(
            job_graph,
            stopped=lambda: False,
            slice_s=0,
            chunk=4,
            monotonic=lambda: next(ticks) * 0.001,  # 1 ms per reading
            stats=stats,
            on_slice=lambda: calls.append(stats.slices),
        )
    )
    assert graph is not None
    assert stats.slices == pauses + 1  # slice_s=0: a turn of the loop at every pause
    assert stats.longest_slice_s == pytest.approx(0.001)
    assert stats.elapsed_s > stats.longest_slice_s
    assert calls == list(range(1, pauses + 2))


def test_a_build_of_one_slice_is_not_reported_after_it() -> None:
    calls: list[int] = []
    graph = asyncio.run(
        build_execution_graph(
            _two(40, 30, ALL_TO_ALL),
            stopped=lambda: False,
            chunk=4,
            monotonic=lambda: 5.0,  # one slice: a small graph is not held
            on_slice=lambda: calls.append(1),
        )
    )
    assert graph is not None and calls == []
