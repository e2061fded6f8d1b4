"""Unit tests: the job progress log and a JobMaster's recovery from it (issue 4).

The log's replay rules (deposed leaders fenced by the log itself, voided attempts), the file
store (round trip, a torn last line), and which recorded attempts a new JobMaster restores:
readable results, restored producers, whole regions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from sparkmill.common.exchange.layout import missing_partitions, partition_dir
from sparkmill.common.exchange.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.ids import new_attempt_id
from sparkmill.common.io_counters import IOCounters
from sparkmill.common.job_progress import (
    FINISHED,
    INVALIDATED,
    LEADER,
    FileJobProgressStore,
    FinishedAttempt,
    InMemoryJobProgressStore,
    NoJobProgressStore,
    ProgressEvent,
    replay,
)
from sparkmill.common.states import ExecutionState
from sparkmill.services.jobmaster.execution_graph import ExecutionGraph, ExecutionVertex
from sparkmill.services.jobmaster.recovery import ProgressRecorder, plan_recovery
from tests.unit.test_scheduler import A2A, BLOCKING, PIPELINED, POINTWISE, build_graph

ES = ExecutionState


def attempt(vertex: str, subtask: int, number: int = 0, acc: bytes = b"") -> FinishedAttempt:
    return FinishedAttempt(
        vertex, subtask, new_attempt_id(), number, "te-1", acc, IOCounters(1, 2, 3, 4)
    )


def finished(session: str, a: FinishedAttempt) -> ProgressEvent:
    return ProgressEvent(FINISHED, session, a)


# ------------------------------------------------------------------------------------ replay


def test_replay_keeps_the_latest_finished_attempt_and_drops_voided_ones() -> None:
    a0, b0, b0_again = attempt("a", 0), attempt("b", 0), attempt("b", 0, number=1)
    events = [
        ProgressEvent(LEADER, "s1"),
        finished("s1", a0),
        finished("s1", b0),
        ProgressEvent(INVALIDATED, "s1", subtasks=(("b", 0),)),
        finished("s1", b0_again),
        ProgressEvent(INVALIDATED, "s1", subtasks=(("a", 0),)),
    ]
    assert replay(events) == {("b", 0): b0_again}


def test_replay_ignores_a_deposed_leader_writing_after_its_successor_started() -> None:
    a0, late = attempt("a", 0), attempt("a", 1)
    events = [
        ProgressEvent(LEADER, "old"),
        finished("old", a0),
        ProgressEvent(LEADER, "new"),
        finished("old", late),  # the old JobMaster had not noticed yet
        ProgressEvent(INVALIDATED, "old", subtasks=(("a", 0),)),
    ]
    assert replay(events) == {("a", 0): a0}


def test_events_without_a_leader_are_ignored() -> None:
    assert replay([finished("s1", attempt("a", 0))]) == {}


def test_events_survive_json_including_accumulators() -> None:
    event = finished("s1", attempt("a", 3, number=2, acc=b"\x00\xffrows"))
    assert ProgressEvent.from_json(event.to_json()) == event
    invalidated = ProgressEvent(INVALIDATED, "s1", subtasks=(("a", 1), ("b", 0)))
    assert ProgressEvent.from_json(invalidated.to_json()) == invalidated


# ------------------------------------------------------------------------------------ file store


def test_file_store_appends_loads_and_removes(tmp_path: Path) -> None:
    store = FileJobProgressStore(tmp_path / "progress")
    assert store.load("job-1") == []
    first = [ProgressEvent(LEADER, "s1"), finished("s1", attempt("a", 0))]
    second = [finished("s1", attempt("a", 1))]
    store.append("job-1", first)
    store.append("job-1", second)
    assert store.load("job-1") == first + second
    assert store.load("job-2") == []
    store.remove("job-1")
    store.remove("job-1")  # idempotent
    assert store.load("job-1") == []


def test_a_torn_last_line_loses_only_that_event(tmp_path: Path) -> None:
    store = FileJobProgressStore(tmp_path)
    events = [ProgressEvent(LEADER, "s1"), finished("s1", attempt("a", 0))]
    store.append("job-1", events)
    with (tmp_path / "job-1.jsonl").open("a") as f:
        f.write('{"kind":"finished","session":"s1","vert')  # the writer died mid-line
    assert store.load("job-1") == events


def test_an_append_after_a_torn_line_starts_on_a_line_of_its_own(tmp_path: Path) -> None:
    store = FileJobProgressStore(tmp_path)
    first = [ProgressEvent(LEADER, "s1"), finished("s1", attempt("a", 0))]
    store.append("job-1", first)
    with (tmp_path / "job-1.jsonl").open("a") as f:
        f.write('{"kind":"finished","sess')  # s1 died mid-line
    second = [ProgressEvent(LEADER, "s2"), ProgressEvent(INVALIDATED, "s2", subtasks=(("a", 0),))]
    store.append("job-1", second)
    assert store.load("job-1") == first + second
    assert replay(store.load("job-1")) == {}


def test_a_bad_job_id_never_escapes_the_directory(tmp_path: Path) -> None:
    store = FileJobProgressStore(tmp_path)
    for bad in ("", "../x", ".hidden"):
        try:
            store.load(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")


# ------------------------------------------------------------------------------------ recovery


def chain3() -> ExecutionGraph:
    # a (2) -> b (2) POINTWISE -> c (1) ALL_TO_ALL, all BLOCKING: every subtask its own region.
    return ExecutionGraph.build(
        build_graph(
            {"a": 2, "b": 2, "c": 1},
            [("a", "b", POINTWISE, BLOCKING), ("b", "c", A2A, BLOCKING)],
        )
    )


def v(graph: ExecutionGraph, name: str, index: int) -> ExecutionVertex:
    return next(jv for jv in graph.job_vertices if jv.name == name).task_vertices[index]


def records(
    graph: ExecutionGraph, *names: tuple[str, int]
) -> dict[tuple[str, int], FinishedAttempt]:
    out: dict[tuple[str, int], FinishedAttempt] = {}
    for name, index in names:
        vertex = v(graph, name, index)
        out[(vertex.job_vertex.id, index)] = attempt(vertex.job_vertex.id, index)
    return out


def names(plan: list[tuple[ExecutionVertex, FinishedAttempt]]) -> list[str]:
    return [vertex.task_name_with_subtask for vertex, _ in plan]


def test_recovery_restores_finished_subtasks_whose_results_are_readable() -> None:
    graph = chain3()
    recorded = records(graph, ("a", 0), ("a", 1), ("b", 0))
    plan = plan_recovery(graph, recorded, lambda _v, _r: True)
    assert names(plan) == ["a (1/2)", "a (2/2)", "b (1/2)"]


def test_a_subtask_whose_producer_is_not_restored_runs_again() -> None:
    graph = chain3()
    recorded = records(graph, ("a", 0), ("a", 1), ("b", 0), ("b", 1))
    unreadable = v(graph, "a", 1)
    plan = plan_recovery(graph, recorded, lambda vertex, _r: vertex is not unreadable)
    # b1 read a1, which runs again: b1 must run again with it; b0 read only a0.
    assert names(plan) == ["a (1/2)", "b (1/2)"]


def test_regions_are_restored_whole_or_not_at_all() -> None:
    graph = ExecutionGraph.build(build_graph({"a": 1, "b": 1}, [("a", "b", A2A, PIPELINED)]))
    recorded = records(graph, ("a", 0))  # b0 (same region) did not finish
    assert plan_recovery(graph, recorded, lambda _v, _r: True) == []


def test_restore_finished_makes_the_recorded_attempt_current() -> None:
    graph = chain3()
    a0 = v(graph, "a", 0)
    recorded = attempt(a0.job_vertex.id, 0, number=3)
    execution = graph.restore_finished(a0, recorded.attempt_id, 3, "te-7")  # type: ignore[arg-type]
    assert execution.state is ES.FINISHED
    assert graph.execution(recorded.attempt_id) is execution  # type: ignore[arg-type]
    assert execution.attempt_number == 3 and execution.task_executor_id == "te-7"
    assert graph.state_counts()[ES.FINISHED] == 1
    assert all(p.is_finished for p in a0.produced_partitions)
    # b0 reads only a0 (POINTWISE 2 -> 2): its input is complete.
    assert v(graph, "b", 0).consumed_partition_groups[0].is_consumable
    assert not v(graph, "b", 1).consumed_partition_groups[0].is_consumable


class _Runtime:
    """Just what the recorder needs of a ServiceRuntime: spawn, and blocking calls inline."""

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro, name=name)

    async def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


def test_the_recorder_writes_in_order_and_only_while_leading() -> None:
    graph = chain3()
    store = InMemoryJobProgressStore()

    async def main() -> None:
        recorder = ProgressRecorder(store, "job-1", _Runtime())  # type: ignore[arg-type]
        a0 = v(graph, "a", 0)
        recorder.attempt_finished(a0.current_execution, b"", None)  # not leading yet: dropped
        recorder.start("s1")
        recorder.invalidate([("x", 0)])
        recorder.attempt_finished(a0.current_execution, b"acc", None)
        recorder.attempts_invalidated([a0])
        recorder.stop()
        recorder.attempt_finished(a0.current_execution, b"", None)
        await recorder.flush()
        assert recorder.idle

    asyncio.run(main())
    kinds = [(e.kind, e.session_id) for e in store.logs["job-1"]]
    assert kinds == [
        (LEADER, "s1"),
        (INVALIDATED, "s1"),
        (FINISHED, "s1"),
        (INVALIDATED, "s1"),
    ]
    assert store.logs["job-1"][2].attempt is not None
    assert store.logs["job-1"][2].attempt.accumulator == b"acc"


# ------------------------------------------------------------------------------------ exchange


def test_missing_partitions_names_exactly_the_unreadable_inputs(tmp_path: Path) -> None:
    exchange, job = str(tmp_path), "0123456789abcdef0123456789abcdef"
    present = InputPartitionInfo("ds", 0, "att-0", "te-1")
    absent = InputPartitionInfo("ds", 1, "att-1", "te-1")
    half = InputPartitionInfo("ds", 2, "att-2", "te-1")  # data written, schema not yet
    for part in (present, half):
        base = partition_dir(
            exchange, job, part.dataset_id, part.partition_number, part.producer_attempt_id
        )
        (base / "data").mkdir(parents=True)
    (partition_dir(exchange, job, "ds", 0, "att-0") / "_schema.json").write_text("{}")
    gates = [
        InputGateInfo("ds", "ALL_TO_ALL", "hash", 3, (present, absent, half)),
        InputGateInfo("done", "ALL_TO_ALL", "none", 1, (InputPartitionInfo("done", 0, "x", ""),)),
    ]
    assert missing_partitions(gates, exchange, job) == (absent, half)


def test_without_ha_the_recorder_keeps_nothing() -> None:
    graph = chain3()

    async def main() -> None:
        recorder = ProgressRecorder(NoJobProgressStore(), "job-1", _Runtime())  # type: ignore[arg-type]
        recorder.start("s1")
        recorder.attempt_finished(v(graph, "a", 0).current_execution, b"", None)
        assert recorder.idle and not recorder.enabled

    asyncio.run(main())
