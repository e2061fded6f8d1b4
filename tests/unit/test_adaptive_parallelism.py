"""Unit tests: vertices decided once their producers have finished (Flink's adaptive batch
scheduler) - the sub-partition ranges, the plan made when a job starts, the graph that grows as
vertices are decided, and the decisions a JobMaster taking over applies.

The scheduler scenarios use the scheduler harness (tests/unit/scheduler_harness.py): a real
scheduler, slot pool and execution graph, hand-written fakes for the outside world.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import (
    ExecutionAttemptID,
    IntermediateDataSetID,
    JobID,
    JobVertexID,
    new_attempt_id,
)
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.common.exchange.subpartitions import (
    balanced_bounds,
    bounds_error,
    subpartition_range,
)
from sparkmill.common.ha.progress_log import (
    ADOPTED,
    DECIDED,
    FINISHED,
    LEADER,
    FinishedAttempt,
    LogId,
    ProgressEvent,
    SessionLog,
    replay,
)
from sparkmill.common.jobgraph.auto_parallelism import (
    decide_from_written,
    plan_parallelism,
)
from sparkmill.common.jobgraph.model import AUTO_PARALLELISM, JobGraph
from sparkmill.common.v1 import jobs_pb2
from sparkmill.services.jobmaster.executiongraph.deployment_descriptor import (
    consumer_parallelism,
    gate_of,
)
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    ExecutionGraph,
    ExecutionJobVertex,
)
from sparkmill.services.jobmaster.job_details import render_job_details
from sparkmill.services.jobmaster.recovery import plan_recovery
from sparkmill.services.jobmaster.scheduler.adaptive_parallelism import AdaptiveParallelism
from sparkmill.services.jobmaster.scheduler.restart_strategy import FixedDelayRestartStrategy
from tests.unit.scheduler_harness import (
    A2A,
    BLOCKING,
    PIPELINED,
    POINTWISE,
    Harness,
    build_graph,
    run,
)
from tests.unit.test_auto_parallelism import Limits, connect, vertex
from tests.unit.test_lost_results import RecordingProgress

ES = ExecutionState
AUTO = AUTO_PARALLELISM


@dataclass(frozen=True)
class Small(Limits):
    bytes_per_task: int = 100


# ------------------------------------------------------------------------ sub-partition ranges


def test_ranges_cover_every_sub_partition_exactly_once_for_every_count_up_to_40() -> None:
    for consumers in range(1, 41):
        for subpartitions in range(consumers, 41):
            ranges = [subpartition_range(i, consumers, subpartitions) for i in range(consumers)]
            covered = [k for r in ranges for k in r]
            assert covered == list(range(subpartitions)), (consumers, subpartitions)
            lengths = {len(r) for r in ranges}
            assert max(lengths) - min(lengths) <= 1 and min(lengths) >= 1


def test_equal_counts_read_one_sub_partition_each_and_fewer_parts_than_readers_is_a_bug() -> None:
    assert [subpartition_range(i, 4, 0) for i in range(4)] == [range(i, i + 1) for i in range(4)]
    assert [subpartition_range(i, 4, 4) for i in range(4)] == [range(i, i + 1) for i in range(4)]
    with pytest.raises(IllegalStateBug):
        subpartition_range(0, 5, 4)
    with pytest.raises(IllegalStateBug):
        subpartition_range(3, 3, 9)


# ------------------------------------------------------------------------ the plan


def _sized(tmp_path: Path, name: str, size: int) -> str:
    path = tmp_path / name
    path.write_bytes(b"x" * size)
    return str(path)


def test_sources_are_decided_now_and_the_vertices_after_them_later(tmp_path: Path) -> None:
    orders = vertex("orders", source_paths=[_sized(tmp_path, "orders", 1000)])
    customers = vertex("customers", source_paths=[_sized(tmp_path, "customers", 10)])
    parse = vertex("parse")  # forward-fed by a source: decided with it, now
    join = vertex("join")
    agg = vertex("agg")
    tail = vertex("tail")  # forward-fed by a late vertex: late with it
    sink = vertex("sink", 2)  # explicit: kept
    connect(orders, parse, "forward")
    connect(parse, join, "hash")
    connect(customers, join, "broadcast")
    connect(join, agg, "hash")
    connect(agg, tail, "forward")
    connect(tail, sink, "rebalance")
    graph = JobGraph(JobID("job-1"), "j", [orders, customers, parse, join, agg, tail, sink])
    sizes = {orders.id: 1000, customers.id: 10}
    plan = plan_parallelism(graph, sizes, Small(max_parallelism=8))
    decided = {v.name: v.parallelism for v in plan.graph.vertices}
    assert decided == {
        "orders": 8,  # 1000 B at 100 B per subtask, at most 8
        "customers": 1,
        "parse": 8,
        "join": AUTO,
        "agg": AUTO,
        "tail": AUTO,
        "sink": 2,
    }
    assert plan.late_bounds == {join.id: 8, agg.id: 8, tail.id: 8}
    assert set(plan.decisions) == {orders.id, customers.id, parse.id}
    assert plan.pending_text(join.id) == "auto: decided when its inputs have finished (at most 8)"
    # The layout changes with a bound, so a successor with other splits keeps nothing.
    other = plan_parallelism(graph, {orders.id: 700, customers.id: 10}, Small(max_parallelism=8))
    assert other.late_bounds[join.id] == 7 and other.layout != plan.layout
    assert plan_parallelism(graph, sizes, Small(max_parallelism=8)).layout == plan.layout


def test_a_job_with_a_pipelined_exchange_or_automatic_parallelism_off_is_decided_whole(
    tmp_path: Path,
) -> None:
    source = vertex("source", source_paths=[_sized(tmp_path, "in", 300)])
    agg = vertex("agg")
    connect(source, agg, "hash")
    graph = JobGraph(JobID("job-2"), "j", [source, agg])
    assert plan_parallelism(graph, {source.id: 300}, Small()).late_bounds == {agg.id: 3}
    off = plan_parallelism(graph, {source.id: 300}, Small(enabled=False))
    assert off.late_bounds == {} and [v.parallelism for v in off.graph.vertices] == [2, 2]
    source.produced[0] = dataclasses.replace(source.produced[0], result_type=PIPELINED)
    whole = plan_parallelism(graph, {source.id: 300}, Small())
    assert whole.late_bounds == {} and [v.parallelism for v in whole.graph.vertices] == [3, 3]


def test_deciding_from_the_bytes_written() -> None:
    agg = vertex("agg")
    limits = Small(max_parallelism=6, min_parallelism=2)
    assert decide_from_written(agg, 0, 8, limits).parallelism == 2  # empty: the minimum
    assert decide_from_written(agg, 350, 8, limits).parallelism == 4
    assert decide_from_written(agg, 10_000, 8, limits).parallelism == 6  # max-parallelism
    capped = decide_from_written(agg, 10_000, 3, limits)
    assert capped.parallelism == 3
    assert capped.reason.endswith("at most the 3 sub-partitions its inputs were split into")
    assert decide_from_written(agg, 350, 8, limits).text == (
        "auto: 350 B written by its inputs, 100 B per subtask"
    )
    assert decide_from_written(agg, 5000, 8, Small()).parallelism == 8  # the bound wins


# ------------------------------------------------------------------------ the growing graph


def _late_job() -> tuple[JobGraph, dict[JobVertexID, int]]:
    graph = build_graph(
        {"src": 2, "agg": AUTO, "sink": 1},
        [("src", "agg", A2A, BLOCKING), ("agg", "sink", A2A, BLOCKING)],
    )
    return graph, {graph.vertices[1].id: 8}


def _written(h: Harness, name: str, index: int, size: int) -> None:
    if h.state(name, index) is ES.DEPLOYING:
        h.run(name, index)
    assert h.report(name, index, ES.FINISHED, io=IOCounters(bytes_out=size))


def _details(h: Harness) -> jobs_pb2.JobDetails:
    return render_job_details(
        name="job",
        status=h.status(),
        submitted_at=0.0,
        ended_at=0.0,
        job_master_address="",
        graph=h.graph,
        scheduler=h.scheduler,
    )


def _initialized(vertex: ExecutionJobVertex) -> bool:
    return vertex.initialized


def test_a_late_vertex_gets_its_subtasks_when_its_producers_finished() -> None:
    job_graph, bounds = _late_job()
    progress = RecordingProgress()

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        agg, sink = h.graph.job_vertices[1], h.graph.job_vertices[2]
        assert not _initialized(agg) and not _initialized(sink)  # sink waits for agg's wiring
        assert agg.task_vertices == [] and sink.task_vertices == []
        assert h.graph.num_execution_vertices == 2
        src_result = h.graph.job_vertices[0].produced_results[0]
        assert consumer_parallelism(src_result) == 8  # the bound: producers split 8 ways
        h.graph.parallelism_decisions[agg.id] = "auto: decided when its inputs have finished"
        shown = _details(h).vertices[1]
        assert (shown.parallelism, len(shown.subtask_states)) == (0, 0)  # the views say "auto"
        h.offer()
        await _settle(h)
        _written(h, "src", 0, 150)
        assert agg.task_vertices == []  # one producer still runs
        _written(h, "src", 1, 100)
        assert h.status() is JobStatus.RUNNING
        assert agg.parallelism == 3 and len(agg.task_vertices) == 3  # ceil(250 / 100)
        assert _initialized(sink) and len(sink.task_vertices) == 1
        assert consumer_parallelism(agg.produced_results[0]) == 1  # the sink's 1 subtask
        assert h.graph.parallelism_decisions[agg.id] == (
            "auto: 250 B written by its inputs, 100 B per subtask"
        )
        shown = _details(h).vertices[1]
        assert (shown.parallelism, len(shown.subtask_states)) == (3, 3)
        assert shown.parallelism_decision == h.graph.parallelism_decisions[agg.id]
        h.offer()
        await _settle(h)
        assert h.states("agg") == [ES.DEPLOYING] * 3  # each its own region, all inputs ready
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario, progress=progress, late_bounds=bounds, auto_settings=Small())
    decided = progress.events.index(f"decided {job_graph.vertices[1].id} 3")
    assert progress.events[:decided] == ["finished src (1/2)", "finished src (2/2)"]
    assert len([e for e in progress.events if e.startswith("finished agg")]) == 3


def test_a_forward_consumer_of_a_late_vertex_is_decided_with_it() -> None:
    job_graph = build_graph(
        {"src": 1, "agg": AUTO, "tail": AUTO},
        [("src", "agg", A2A, BLOCKING), ("agg", "tail", POINTWISE, BLOCKING)],
    )
    bounds = {job_graph.vertices[1].id: 4, job_graph.vertices[2].id: 4}

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await _settle(h)
        _written(h, "src", 0, 120)
        agg, tail = h.graph.job_vertices[1], h.graph.job_vertices[2]
        assert (agg.parallelism, tail.parallelism) == (2, 2)
        assert consumer_parallelism(agg.produced_results[0]) == 2  # pointwise: the exact count
        assert h.graph.parallelism_decisions[tail.id] == "auto: as its forward input 'agg'"
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario, late_bounds=bounds, auto_settings=Small())


def test_a_producer_restarted_before_the_decision_delays_it() -> None:
    job_graph, bounds = _late_job()

    async def scenario(h: Harness) -> None:
        await _sources_deployed(h)
        _written(h, "src", 0, 100)
        h.run("src", 1)
        assert h.report("src", 1, ES.FAILED, message="boom")
        await _restarted(h, lambda: h.state("src", 1) is ES.DEPLOYING)
        agg = h.graph.job_vertices[1]
        assert not agg.initialized  # src 1 runs again first
        _written(h, "src", 1, 500)
        assert agg.parallelism == 6  # from the bytes of the attempts that count
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    _run_restarting(job_graph, bounds, scenario)


def test_lost_results_of_a_vertex_not_decided_yet_are_produced_again() -> None:
    job_graph, bounds = _late_job()

    async def scenario(h: Harness) -> None:
        await _sources_deployed(h)
        _written(h, "src", 0, 100)
        # Nothing reads src 0's result yet, but the vertex decided later will read all of it.
        h.scheduler.results_lost_with_task_executor(h.te.resource_id, "its disk is gone")
        await _restarted(h, lambda: h.execution("src", 0).attempt_number == 1)
        assert not h.graph.job_vertices[1].initialized
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    _run_restarting(job_graph, bounds, scenario)


def _run_restarting(
    job_graph: JobGraph,
    bounds: dict[JobVertexID, int],
    scenario: Callable[[Harness], Awaitable[None]],
) -> None:
    restarts = FixedDelayRestartStrategy(3, 0.01)
    run(job_graph, scenario, restart_strategy=restarts, late_bounds=bounds, auto_settings=Small())


async def _sources_deployed(h: Harness) -> None:
    h.scheduler.start_scheduling()
    h.offer()
    await _settle(h)


async def _restarted(h: Harness, done: Callable[[], bool]) -> None:
    """Offer slots until ``done`` (a restart's back-off runs on the loop's clock)."""
    for _ in range(200):
        await asyncio.sleep(0.005)
        h.offer()
        await _settle(h)
        if done():
            return
    raise AssertionError("the restart did not happen")


async def _settle(h: Harness) -> None:
    from tests.unit.scheduler_harness import settle

    await settle()


# ------------------------------------------------------------------------ taking over


def _log(session: str, epoch: int, events: list[ProgressEvent]) -> SessionLog:
    numbered = [dataclasses.replace(e, seq=i) for i, e in enumerate(events, 1)]
    return SessionLog(LogId(epoch, session), numbered)


def _done(vertex_id: str, subtask: int) -> FinishedAttempt:
    return FinishedAttempt(vertex_id, subtask, new_attempt_id(), 0, "te-1")


def test_a_successor_applies_the_recorded_decisions_and_keeps_what_they_ran() -> None:
    job_graph, bounds = _late_job()
    src, agg, sink = (v.id for v in job_graph.vertices)
    logs = [
        _log(
            "s1",
            1,
            [
                ProgressEvent(LEADER, "s1", layout="L"),
                ProgressEvent(ADOPTED, "s1"),
                ProgressEvent(FINISHED, "s1", _done(src, 0)),
                ProgressEvent(FINISHED, "s1", _done(src, 1)),
                ProgressEvent(DECIDED, "s1", decision=(agg, 3, "auto: why")),
                ProgressEvent(FINISHED, "s1", _done(agg, 0)),
                ProgressEvent(FINISHED, "s1", _done(agg, 2)),
            ],
        )
    ]
    recovered = replay(logs, LogId(2, "s2"), "L")
    assert recovered.decisions == {agg: (3, "auto: why")}
    assert replay(logs, LogId(2, "s2"), "other-layout").decisions == {}
    for event in logs[0].events:  # and the record survives its own format
        assert ProgressEvent.from_record(event.to_record()[:-1]) == event

    graph = ExecutionGraph.build(job_graph, late_bounds=bounds)
    adaptive = AdaptiveParallelism(graph, Small())
    assert adaptive.apply_recorded({agg: (9, "beyond the bound"), "unknown": (1, "")}) == 0
    assert adaptive.apply_recorded(recovered.decisions) == 1
    assert graph.job_vertex(agg).parallelism == 3
    assert len(graph.job_vertex(sink).task_vertices) == 1
    assert graph.parallelism_decisions[agg] == "auto: why"
    restored = plan_recovery(graph, recovered.finished, lambda _v, _r: True)
    assert sorted(v.task_name_with_subtask for v, _ in restored) == [
        "agg (1/3)",
        "agg (3/3)",
        "src (1/2)",
        "src (2/2)",
    ]


def test_a_forward_consumer_whose_decision_record_was_lost_is_applied_with_its_producer() -> None:
    job_graph = build_graph(
        {"src": 1, "agg": AUTO, "tail": AUTO, "fixed": 1},
        [
            ("src", "agg", A2A, BLOCKING),
            ("agg", "tail", POINTWISE, BLOCKING),
            ("tail", "fixed", POINTWISE, BLOCKING),  # a fixed number after them, forward-fed
        ],
    )
    _, agg, tail, fixed = (v.id for v in job_graph.vertices)
    graph = ExecutionGraph.build(job_graph, late_bounds={agg: 4, tail: 4})
    adaptive = AdaptiveParallelism(graph, Small())
    # A torn write kept agg's record and lost tail's: tail follows agg all the same (agg's
    # partitions cannot be wired to a consumer of unknown number).
    assert adaptive.apply_recorded({agg: (2, "auto: as recorded")}) == 2
    assert len(graph.job_vertex(tail).task_vertices) == 2
    assert graph.parallelism_decisions[tail] == "auto: as its forward input 'agg'"
    assert len(graph.job_vertex(fixed).task_vertices) == 1  # kept, and wired
    assert graph.uninitialized_job_vertices == []


def test_the_job_is_finished_only_once_every_vertex_is_decided_and_ran() -> None:
    job_graph, bounds = _late_job()
    graph = ExecutionGraph.build(job_graph, late_bounds=bounds)
    for v in graph.all_execution_vertices():
        execution = v.current_execution
        for state in (ES.SCHEDULED, ES.DEPLOYING, ES.INITIALIZING, ES.RUNNING, ES.FINISHED):
            execution.transition_to(state)
    assert not graph.all_vertices_finished  # agg and sink have no subtasks yet
    with pytest.raises(IllegalStateBug):
        graph.initialize_vertices({graph.job_vertices[0].id: 2})  # not an open vertex


# ------------------------------------------------------------------------ the task executor side


def written_partitions(
    directory: Path, producers: int, subpartitions: Iterable[int]
) -> tuple[JobID, IntermediateDataSetID, list[ExecutionAttemptID], tuple[InputPartitionInfo, ...]]:
    """Exchange directories as ``producers`` finished attempts leave them, each with a
    directory for each of ``subpartitions``: (job, data set, attempt ids, partitions)."""
    from sparkmill.common.core.ids import new_dataset_id, new_job_id
    from sparkmill.common.exchange.layout import (
        DATA_DIR,
        SCHEMA_FILE,
        partition_dir,
        sub_partition_dir,
    )

    job, dataset = new_job_id(), new_dataset_id()
    attempts = [new_attempt_id() for _ in range(producers)]
    wanted = list(subpartitions)
    parts = []
    for number, attempt in enumerate(attempts):
        base = partition_dir(str(directory), job, dataset, number, attempt)
        base.mkdir(parents=True)
        (base / SCHEMA_FILE).write_text("{}")
        for k in wanted:
            sub_partition_dir(base / DATA_DIR, k).mkdir(parents=True)
        parts.append(InputPartitionInfo(dataset, number, attempt, "te"))
    return job, dataset, attempts, tuple(parts)


def test_a_consumer_decided_late_reads_its_range_of_every_partition(tmp_path: Path) -> None:
    from sparkmill.services.taskexecutor.spark.exchange import gate_paths

    # Sub-partition 2 got no rows: Spark wrote no directory for it.
    JOB, DS, ATTEMPTS, parts = written_partitions(tmp_path, 2, (0, 1, 3, 4))
    gate = InputGateInfo(DS, "ALL_TO_ALL", "hash", 2, parts, subpartitions=5)

    def read(subtask: int) -> list[tuple[int, str]]:
        paths, _ = gate_paths(gate, str(tmp_path), JOB, subtask, 2)
        return [(int(ATTEMPTS[1] in p), p.rsplit("=", 1)[1]) for p in paths]

    assert read(0) == [(0, "0"), (0, "1"), (1, "0"), (1, "1")]  # range(0, 2)
    assert read(1) == [(0, "3"), (0, "4"), (1, "3"), (1, "4")]  # range(2, 5)


def test_late_wiring_follows_flinks_rules_for_every_count_up_to_40() -> None:
    from sparkmill.common.exchange.pointwise import pointwise_readers

    for producers in range(1, 41):
        for consumers in sorted({1, 7, producers, 40}):
            # ALL_TO_ALL into a late vertex: every subtask reads every partition.
            job_graph = build_graph(
                {"src": producers, "late": AUTO}, [("src", "late", A2A, BLOCKING)]
            )
            graph = ExecutionGraph.build(job_graph, late_bounds={job_graph.vertices[1].id: 40})
            created = graph.initialize_vertices({job_graph.vertices[1].id: consumers})
            assert len(created) == consumers
            for subtask in created:
                (group,) = subtask.consumed_partition_groups
                assert [p.partition_number for p in group] == list(range(producers))
            # POINTWISE out of a late vertex into a fixed one: Flink's rule on the decided count.
            job_graph = build_graph(
                {"src": 1, "late": AUTO, "fixed": consumers},
                [("src", "late", A2A, BLOCKING), ("late", "fixed", POINTWISE, BLOCKING)],
            )
            late_id = job_graph.vertices[1].id
            graph = ExecutionGraph.build(job_graph, late_bounds={late_id: 40})
            graph.initialize_vertices({late_id: producers})
            assert graph.job_vertex(late_id).produced_results[0].subpartitions == consumers
            for subtask in graph.job_vertex(job_graph.vertices[2].id).task_vertices:
                read = [p.partition_number for g in subtask.consumed_partition_groups for p in g]
                assert read == [
                    p
                    for p in range(producers)
                    if subtask.subtask_index in pointwise_readers(p, producers, consumers)
                ]


# ------------------------------------------------------------------------ ranges by bytes


def test_balanced_ranges_cover_every_sub_partition_once_and_follow_the_bytes() -> None:
    rng = random.Random(27)
    for _ in range(500):
        count = rng.randint(1, 40)
        consumers = rng.randint(1, count)
        sizes = [rng.choice([0, 1, 10, 1000]) * rng.randint(0, 5) for _ in range(count)]
        bounds = balanced_bounds(sizes, consumers)
        assert bounds_error(bounds, consumers, count) == ""
        ranges = [subpartition_range(i, consumers, count, bounds) for i in range(consumers)]
        assert [k for r in ranges for k in r] == list(range(count))
    # A hot sub-partition gets a range of its own; the rest share the others evenly.
    assert balanced_bounds([10, 1, 1, 1, 1, 1], 3) == (0, 1, 3, 6)
    assert balanced_bounds([5, 0, 0, 0, 0, 5], 2) == (0, 1, 6)
    assert balanced_bounds([0, 0, 0, 0], 2) == (0, 2, 4)  # nothing written: equal counts
    assert bounds_error((0, 2, 2, 4), 3, 4) != ""  # an empty range
    assert bounds_error((0, 2, 4), 3, 4) != "" and bounds_error((1, 4), 1, 4) != ""
    with pytest.raises(IllegalStateBug):
        subpartition_range(0, 2, 4, (0, 3))


def test_the_bytes_of_each_sub_partition_are_what_its_files_hold(tmp_path: Path) -> None:
    from sparkmill.common.exchange.layout import DATA_DIR, sub_partition_dir
    from sparkmill.services.taskexecutor.spark.exchange import subpartition_sizes

    for k, size in ((0, 10), (2, 7)):
        directory = sub_partition_dir(tmp_path / DATA_DIR, k)
        directory.mkdir(parents=True)
        (directory / "part-0.parquet").write_bytes(b"x" * size)
        (directory / ".part-0.parquet.crc").write_bytes(b"x" * 99)  # Spark's checksums
    assert subpartition_sizes(tmp_path, 4) == (10, 0, 7, 0)


def _hash_job() -> tuple[JobGraph, dict[JobVertexID, int]]:
    job_graph, bounds = _late_job()
    job_graph.vertices[1].inputs[0].partitioner = "hash"
    return job_graph, bounds


def _wrote(h: Harness, index: int, sizes: tuple[int, ...] | None) -> None:
    if h.state("src", index) is ES.DEPLOYING:
        h.run("src", index)
    dataset = h.graph.job_vertices[0].produced_results[0].id
    written = () if sizes is None else ((str(dataset), sizes),)
    io = IOCounters(bytes_out=sum(sizes or ()))
    assert h.scheduler.update_task_execution_state(
        h.execution("src", index).attempt_id, ES.FINISHED, io=io, written=written
    )


def test_a_late_vertex_reads_ranges_balanced_by_the_bytes_each_sub_partition_holds() -> None:
    job_graph, bounds = _hash_job()
    progress = RecordingProgress()

    async def scenario(h: Harness) -> None:
        await _sources_deployed(h)
        # 8 sub-partitions, 270 B: 3 subtasks; sub-partition 0 holds a hot key's 150 B.
        _wrote(h, 0, (100, 10, 10, 10, 10, 10, 0, 0))
        _wrote(h, 1, (50, 10, 10, 10, 10, 10, 10, 10))
        agg = h.graph.job_vertices[1]
        assert agg.parallelism == 3
        result = h.graph.job_vertices[0].produced_results[0]
        assert result.subpartition_bounds == (0, 1, 4, 8)
        assert h.graph.parallelism_decisions[agg.id] == (
            "auto: 270 B written by its inputs, 100 B per subtask; ranges balanced by bytes: "
            "60 B-150 B per subtask"
        )
        h.offer()
        await _settle(h)
        gate = gate_of(agg.job_vertex.inputs[0], agg.task_vertices[0].consumed_partition_groups[0])
        assert gate.subpartition_bounds == (0, 1, 4, 8) and gate.subpartitions == 8
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario, progress=progress, late_bounds=bounds, auto_settings=Small())
    assert progress.ranges[job_graph.vertices[1].id] == (0, 1, 4, 8)


def test_without_every_producers_sizes_the_ranges_hold_equal_counts() -> None:
    job_graph, bounds = _hash_job()

    async def scenario(h: Harness) -> None:
        await _sources_deployed(h)
        _wrote(h, 0, (100, 10, 10, 10, 10, 10, 0, 0))
        _wrote(h, 1, None)  # e.g. restored from an earlier JobMaster: no sizes
        result = h.graph.job_vertices[0].produced_results[0]
        assert h.graph.job_vertices[1].parallelism == 2
        assert result.subpartition_bounds == ()
        assert "balanced" not in h.graph.parallelism_decisions[h.graph.job_vertices[1].id]

    run(job_graph, scenario, late_bounds=bounds, auto_settings=Small())


def test_a_successor_applies_recorded_ranges_and_ignores_ranges_that_do_not_fit() -> None:
    for ranges, applied in (((0, 1, 4, 8), 1), ((0, 4, 4, 8), 0), ((0, 1, 8), 0)):
        job_graph, bounds = _hash_job()
        agg = job_graph.vertices[1].id
        graph = ExecutionGraph.build(job_graph, late_bounds=bounds)
        adaptive = AdaptiveParallelism(graph, Small())
        assert adaptive.apply_recorded({agg: (3, "auto: as recorded")}, {agg: ranges}) == applied
        result = graph.job_vertices[0].produced_results[0]
        assert result.subpartition_bounds == (ranges if applied else ())
    event = ProgressEvent(DECIDED, "s1", decision=(agg, 3, "why"), ranges=(0, 1, 4, 8), seq=3)
    assert ProgressEvent.from_record(event.to_record()[:-1]) == event
    logs = [_log("s1", 1, [ProgressEvent(LEADER, "s1"), ProgressEvent(ADOPTED, "s1"), event])]
    assert replay(logs, LogId(2, "s2")).ranges == {agg: (0, 1, 4, 8)}


def test_a_sub_partition_that_alone_outweighs_a_fair_share_is_named() -> None:
    job_graph, bounds = _hash_job()

    async def scenario(h: Harness) -> None:
        await _sources_deployed(h)
        _wrote(h, 0, (200, 5, 5, 5, 5, 5, 5, 5))
        _wrote(h, 1, (0, 0, 0, 0, 0, 0, 0, 0))
        decision = h.graph.parallelism_decisions[h.graph.job_vertices[1].id]
        assert decision.endswith(
            "; sub-partition 0 alone holds 200 B (a key's rows are never split)"
        )
        assert h.graph.job_vertices[0].produced_results[0].subpartition_bounds == (0, 1, 4, 8)

    run(job_graph, scenario, late_bounds=bounds, auto_settings=Small())
