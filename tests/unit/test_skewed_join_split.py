"""Unit tests: the JobMaster splits a skewed sub-partition of a join decided late across
subtasks - the decision and its text, the input gates each split subtask reads, the plan in
the progress log and a successor applying it (real scheduler and execution graph; the
harness's hand-written fakes for the outside world)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import JobVertexID
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.common.exchange.skewed_splits import ReadPlan, SplitRange
from sparkmill.common.jobgraph.model import AUTO_PARALLELISM, JobGraph
from sparkmill.services.jobmaster.executiongraph.deployment_descriptor import gate_of
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from sparkmill.services.jobmaster.scheduler.adaptive_parallelism import AdaptiveParallelism
from tests.unit.scheduler_harness import A2A, BLOCKING, Harness, build_graph, run, settle
from tests.unit.test_auto_parallelism import Limits
from tests.unit.test_lost_results import RecordingProgress

ES = ExecutionState


@dataclass(frozen=True)
class Small(Limits):
    bytes_per_task: int = 100
    skewed_join_threshold: int = 50


def _join_job(splittable: list[int]) -> tuple[JobGraph, dict[JobVertexID, int]]:
    graph = build_graph(
        {"left": 4, "right": 2, "join": AUTO_PARALLELISM, "sink": 1},
        [
            ("left", "join", A2A, BLOCKING),
            ("right", "join", A2A, BLOCKING),
            ("join", "sink", A2A, BLOCKING),
        ],
    )
    join = graph.vertices[2]
    for edge in join.inputs:
        edge.partitioner = "hash"
    join.skew_splittable_inputs = splittable
    return graph, {join.id: 8}


# Sub-partition 3 of the left input holds 100 B from each of its 4 producers, every other
# sub-partition 1 B: 444 B in all, 5 subtasks of 100 B, so a share of 88.8 B.
HOT = (1, 1, 1, 100, 1, 1, 1, 1)
EVEN = (1,) * 8
PLAN = ReadPlan((0, 3, 4, 8), (SplitRange(1, 0, (0, 1, 2, 3, 4)),))


async def _producers_finished(h: Harness) -> None:
    h.scheduler.start_scheduling()
    h.offer()
    await settle()
    for name, count, sizes in (("left", 4, HOT), ("right", 2, EVEN)):
        dataset = next(v for v in h.graph.job_vertices if v.name == name).produced_results[0]
        for index in range(count):
            h.run(name, index)
            assert h.scheduler.update_task_execution_state(
                h.execution(name, index).attempt_id,
                ES.FINISHED,
                io=IOCounters(bytes_out=sum(sizes)),
                written=((str(dataset.id), sizes),),
            )


def test_a_skewed_sub_partition_is_split_by_producer_and_the_other_side_read_whole() -> None:
    job_graph, bounds = _join_job([0, 1])
    progress = RecordingProgress()

    async def scenario(h: Harness) -> None:
        await _producers_finished(h)
        join = h.graph.job_vertices[2]
        # 1 range before the hot sub-partition, 4 pieces of it, 1 range after it.
        assert join.parallelism == 6
        assert h.graph.parallelism_decisions[join.id] == (
            "auto: 444 B written by its inputs, 100 B per subtask; skewed join: sub-partition 3 "
            "of input 'left' (400 B, 100x its median of 4 B) split across 4 subtasks by "
            "producer"
        )
        h.offer()
        await settle()
        left_edge, right_edge = join.job_vertex.inputs
        reads = []
        for subtask in join.task_vertices:
            left, right = (
                gate_of(edge, group)
                for edge, group in zip(
                    (left_edge, right_edge), subtask.consumed_partition_groups, strict=True
                )
            )
            assert left.subpartition_bounds == right.subpartition_bounds == ()
            at = slice(4 * subtask.subtask_index, 4 * subtask.subtask_index + 4)
            reads.append((left.read_slices[at], right.read_slices[at]))
        assert reads == [
            ((0, 3, 0, 4), (0, 3, 0, 2)),
            ((3, 4, 0, 1), (3, 4, 0, 2)),
            ((3, 4, 1, 2), (3, 4, 0, 2)),
            ((3, 4, 2, 3), (3, 4, 0, 2)),
            ((3, 4, 3, 4), (3, 4, 0, 2)),
            ((4, 8, 0, 4), (4, 8, 0, 2)),
        ]
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario, progress=progress, late_bounds=bounds, auto_settings=Small())
    assert progress.ranges[job_graph.vertices[2].id] == PLAN.encode()


def test_a_join_type_that_allows_no_split_of_the_skewed_side_gets_balanced_ranges() -> None:
    for splittable, strategy in (([1], "auto"), ([0, 1], "none")):
        job_graph, bounds = _join_job(splittable)  # [1]: a right join; its left is skewed

        async def scenario(h: Harness) -> None:
            await _producers_finished(h)
            join = h.graph.job_vertices[2]
            assert join.parallelism == 5
            assert "skewed join" not in h.graph.parallelism_decisions[join.id]
            result = h.graph.job_vertices[0].produced_results[0]
            assert result.read_plan is None and len(result.subpartition_bounds) == 6

        run(
            job_graph,
            scenario,
            late_bounds=bounds,
            auto_settings=Small(skewed_join_strategy=strategy),
        )


def test_a_successor_applies_a_recorded_split_and_ignores_one_that_does_not_fit() -> None:
    bad = ReadPlan((0, 3, 4, 8), (SplitRange(1, 0, (0, 2, 5)),))  # 5 left producers
    for plan, parallelism, applied in ((PLAN, 6, 1), (bad, 5, 0), (PLAN, 5, 0)):
        job_graph, bounds = _join_job([0, 1])
        join = job_graph.vertices[2].id
        graph = ExecutionGraph.build(job_graph, late_bounds=bounds)
        adaptive = AdaptiveParallelism(graph, Small())
        recorded: dict[str, tuple[int, str]] = {join: (parallelism, "auto: as recorded")}
        assert adaptive.apply_recorded(recorded, {join: plan.encode()}) == applied
        left, right = (graph.job_vertices[i].produced_results[0] for i in (0, 1))
        if applied:
            assert graph.job_vertices[2].parallelism == 6
            assert left.read_slices[4:8] == (3, 4, 0, 1) and right.read_slices[4:8] == (3, 4, 0, 2)
        else:
            assert left.read_plan is None


def test_a_split_subtask_reads_its_sub_partition_from_its_producers_only(tmp_path: Path) -> None:
    from sparkmill.common.core.partitions import InputGateInfo
    from sparkmill.services.taskexecutor.spark.exchange import gate_paths
    from tests.unit.test_adaptive_parallelism import written_partitions

    job, dataset, attempts, parts = written_partitions(tmp_path, 4, range(8))
    slices = PLAN.slices(0, 4)
    gate = InputGateInfo(
        dataset, "ALL_TO_ALL", "hash", 4, parts, subpartitions=8, read_slices=slices
    )

    def read(subtask: int) -> list[tuple[int, str]]:
        paths, _ = gate_paths(gate, str(tmp_path), job, subtask, 6)
        return [
            (next(i for i, a in enumerate(attempts) if a in p), p.rsplit("=", 1)[1]) for p in paths
        ]

    assert read(0) == [(p, str(k)) for p in range(4) for k in range(3)]
    assert read(2) == [(1, "3")]  # the second piece of sub-partition 3: producer 1 alone
    assert read(5) == [(p, str(k)) for p in range(4) for k in range(4, 8)]
    with pytest.raises(IllegalStateBug, match="no slice"):
        gate_paths(gate, str(tmp_path), job, 6, 7)


def test_a_split_whose_median_sub_partition_is_empty_gives_no_ratio() -> None:
    from sparkmill.common.exchange.skewed_splits import SkewedSplit
    from sparkmill.services.jobmaster.scheduler.adaptive_parallelism import _skew_text

    text = _skew_text((SkewedSplit(2, 0, 300, 0, 3),), ["orders", "customers"])
    assert text == (
        "; skewed join: sub-partition 2 of input 'orders' (300 B, most of its sub-partitions "
        "are empty) split across 3 subtasks by producer"
    )
