"""Unit tests: the job progress log and a JobMaster's recovery from it (issue 4).

The log's replay rules (deposed leaders fenced by the log itself, voided attempts), the file
store (round trip, a torn last line), and which recorded attempts a new JobMaster restores:
readable results, restored producers, whole regions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkmill.common.core.ids import ResourceID, new_attempt_id
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.exchange.layout import missing_partitions, partition_dir
from sparkmill.common.ha.progress_log import (
    ADOPTED,
    BLOCKED,
    FINISHED,
    INVALIDATED,
    LEADER,
    FileJobProgressStore,
    FinishedAttempt,
    InMemoryJobProgressStore,
    LogId,
    NoJobProgressStore,
    ProgressEvent,
    SessionLog,
    replay,
    trusted_prefix,
)
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    ExecutionGraph,
    ExecutionVertex,
)
from sparkmill.services.jobmaster.recovery import (
    ProgressRecorder,
    plan_recovery,
    recover_finished_subtasks,
)
from tests.unit.scheduler_harness import A2A, BLOCKING, PIPELINED, POINTWISE, build_graph

ES = ExecutionState


def attempt(vertex: str, subtask: int, number: int = 0, acc: bytes = b"") -> FinishedAttempt:
    return FinishedAttempt(
        vertex, subtask, new_attempt_id(), number, "te-1", acc, IOCounters(1, 2, 3, 4)
    )


def finished(session: str, a: FinishedAttempt, seq: int = 0) -> ProgressEvent:
    return ProgressEvent(FINISHED, session, a, seq=seq)


def numbered(events: list[ProgressEvent]) -> list[ProgressEvent]:
    """``events`` as a writer numbers them in its log: 1, 2, ..."""
    return [dataclasses.replace(e, seq=i) for i, e in enumerate(events, 1)]


def session_log(epoch: int, session: str, events: list[ProgressEvent]) -> SessionLog:
    return SessionLog(LogId(epoch, session), events)


def opened(session: str, trusted: dict[str, int] | None = None) -> list[ProgressEvent]:
    """The first two records of a JobMaster's log: leader, then what it adopted."""
    return [
        ProgressEvent(LEADER, session),
        ProgressEvent(ADOPTED, session, trusted=tuple(sorted((trusted or {}).items()))),
    ]


def name(epoch: int, session: str) -> str:
    return LogId(epoch, session).name


# ------------------------------------------------------------------------------------ replay


def test_replay_keeps_the_latest_finished_attempt_and_drops_voided_ones() -> None:
    a0, b0, b0_again = attempt("a", 0), attempt("b", 0), attempt("b", 0, number=1)
    events = numbered(
        [
            *opened("s1"),
            finished("s1", a0),
            finished("s1", b0),
            ProgressEvent(INVALIDATED, "s1", subtasks=(("b", 0),)),
            finished("s1", b0_again),
            ProgressEvent(INVALIDATED, "s1", subtasks=(("a", 0),)),
        ]
    )
    recovered = replay([session_log(7, "s1", events)], LogId(9, "s2"))
    assert recovered.finished == {("b", 0): b0_again}
    assert recovered.trusted == {name(7, "s1"): 7}


def test_a_deposed_leader_writing_after_its_successor_adopted_its_log_is_ignored() -> None:
    a0, late = attempt("a", 0), attempt("a", 1)
    new = numbered(opened("new", {name(1, "old"): 3}))  # "new" read three records of "old"
    # ... and the old JobMaster, which had not noticed yet, appended two more afterwards.
    old = numbered(
        [
            *opened("old"),
            finished("old", a0),
            finished("old", late),
            ProgressEvent(INVALIDATED, "old", subtasks=(("a", 0),)),
        ]
    )
    logs = [session_log(1, "old", old), session_log(2, "new", new)]
    recovered = replay(logs, LogId(3, "next"))
    assert recovered.finished == {("a", 0): a0}
    assert recovered.trusted == {name(1, "old"): 3, name(2, "new"): 2}


def test_a_job_master_deposed_before_it_adopted_anything_is_ignored() -> None:
    a0 = attempt("a", 0)
    first = numbered([*opened("s1"), finished("s1", a0)])
    # s2 wrote its leader record, then lost the job before it adopted (and did) anything.
    stillborn = numbered([ProgressEvent(LEADER, "s2")])
    logs = [session_log(1, "s1", first), session_log(2, "s2", stillborn)]
    recovered = replay(logs, LogId(3, "s3"))
    assert recovered.finished == {("a", 0): a0}
    assert recovered.trusted == {name(1, "s1"): 3}


def test_logs_of_later_epochs_than_the_reader_are_not_read() -> None:
    newer = numbered([*opened("s9"), finished("s9", attempt("a", 0))])
    assert replay([session_log(9, "s9", newer)], LogId(5, "s5")).finished == {}


def test_records_without_an_adoption_are_ignored() -> None:
    logs = [session_log(1, "s1", numbered([finished("s1", attempt("a", 0))]))]
    assert replay(logs).finished == {}


def test_duplicated_records_count_once_and_a_missing_one_ends_the_trusted_prefix() -> None:
    a0, b0, c0 = attempt("a", 0), attempt("b", 0), attempt("c", 0)
    records = numbered([*opened("s1"), finished("s1", a0), finished("s1", b0), finished("s1", c0)])
    # A batch written again after a failed write (3, 4 twice), then record 5 lost, 6 intact.
    events = records[:4] + records[2:4] + records[5:]
    assert trusted_prefix(session_log(1, "s1", events)) == records[:4]
    recovered = replay([session_log(1, "s1", events)], LogId(2, "s2"))
    assert recovered.finished == {("a", 0): a0, ("b", 0): b0}
    assert recovered.trusted == {name(1, "s1"): 4}
    # A record of another session in this log (misplaced) is never trusted.
    stray = dataclasses.replace(records[4], session_id="s0")
    assert trusted_prefix(session_log(1, "s1", [*records[:4], stray])) == records[:4]


def test_events_survive_json_and_records_including_accumulators() -> None:
    event = finished("s1", attempt("a", 3, number=2, acc=b"\x00\xffrows"), seq=4)
    assert ProgressEvent.from_json(event.to_json()) == event
    assert ProgressEvent.from_record(event.to_record()[:-1]) == event
    invalidated = ProgressEvent(INVALIDATED, "s1", subtasks=(("a", 1), ("b", 0)), seq=5)
    assert ProgressEvent.from_json(invalidated.to_json()) == invalidated
    adopted = ProgressEvent(ADOPTED, "s1", trusted=(("x", 3), ("y", 1)), seq=2)
    assert ProgressEvent.from_record(adopted.to_record()[:-1]) == adopted


def test_a_record_that_is_torn_or_corrupt_is_refused() -> None:
    record = finished("s1", attempt("a", 0), seq=1).to_record()[:-1]
    for bad in (record[:-5], record.replace(b'"a"', b'"b"'), b"\0" * 8, b"12 0000 {}"):
        with pytest.raises(ValueError):
            ProgressEvent.from_record(bad)


# ------------------------------------------------------------------------------------ file store

S1, S2 = LogId(1, "s1"), LogId(2, "s2")


def test_file_store_appends_loads_and_removes(tmp_path: Path) -> None:
    store = FileJobProgressStore(tmp_path / "progress")
    assert store.load("job-1") == []
    first = numbered([*opened("s1"), finished("s1", attempt("a", 0))])
    second = numbered([*opened("s2"), finished("s2", attempt("a", 1))])
    store.append("job-1", S2, second[:1])
    store.append("job-1", S1, first)
    store.append("job-1", S2, second[1:])
    assert store.load("job-1") == [SessionLog(S1, first), SessionLog(S2, second)]
    assert store.load("job-2") == []
    assert (tmp_path / "progress" / "job-1" / f"{S1.name}.log").is_file()
    store.remove("job-1")
    store.remove("job-1")  # idempotent
    assert store.load("job-1") == []


def test_a_torn_last_record_loses_only_that_record(tmp_path: Path) -> None:
    store = FileJobProgressStore(tmp_path)
    events = numbered([*opened("s1"), finished("s1", attempt("a", 0))])
    store.append("job-1", S1, events)
    torn = finished("s1", attempt("b", 0), seq=4).to_record()
    with (tmp_path / "job-1" / f"{S1.name}.log").open("ab") as f:
        f.write(torn[: len(torn) // 2])  # the writer died mid-record
    assert store.load("job-1") == [SessionLog(S1, events)]


def test_interleaved_and_zeroed_bytes_are_skipped_and_end_the_trusted_prefix(
    tmp_path: Path,
) -> None:
    # What a network file system can show: two writes mixed within one record, a hole of
    # zeros where a write had not landed yet.
    store = FileJobProgressStore(tmp_path)
    events = numbered([*opened("s1"), *(finished("s1", attempt("a", i)) for i in range(4))])
    records = [e.to_record() for e in events]
    mixed = records[2][:20] + records[3][20:]
    path = tmp_path / "job-1" / f"{S1.name}.log"
    path.parent.mkdir()
    path.write_bytes(records[0] + records[1] + mixed + b"\0" * 64 + b"\n" + records[4] + records[5])
    loaded = store.load("job-1")
    assert loaded == [SessionLog(S1, [events[0], events[1], events[4], events[5]])]
    assert trusted_prefix(loaded[0]) == events[:2]  # records 3 and 4 are missing


def test_an_append_after_a_torn_record_starts_on_a_line_of_its_own(tmp_path: Path) -> None:
    store = FileJobProgressStore(tmp_path)
    first = numbered([*opened("s1"), finished("s1", attempt("a", 0))])
    store.append("job-1", S1, first[:2])
    with (tmp_path / "job-1" / f"{S1.name}.log").open("ab") as f:
        f.write(first[2].to_record()[:15])  # a failed write of record 3
    store.append("job-1", S1, first[2:])  # written again
    (loaded,) = store.load("job-1")
    assert loaded.events == first
    assert replay([loaded], S2).finished == {("a", 0): first[2].attempt}


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
        recorder.start("s1", 42)
        recorder.adopt({name(7, "s0"): 3})
        recorder.invalidate([("x", 0)])
        recorder.attempt_finished(a0.current_execution, b"acc", None)
        recorder.attempts_invalidated([a0])
        recorder.stop()
        recorder.attempt_finished(a0.current_execution, b"", None)
        await recorder.flush()
        assert recorder.idle

    asyncio.run(main())
    events = store.logs["job-1"][LogId(42, "s1")]
    assert [(e.kind, e.session_id, e.seq) for e in events] == [
        (LEADER, "s1", 1),
        (ADOPTED, "s1", 2),
        (INVALIDATED, "s1", 3),
        (FINISHED, "s1", 4),
        (INVALIDATED, "s1", 5),
    ]
    assert events[1].trusted == ((name(7, "s0"), 3),)
    assert events[3].attempt is not None
    assert events[3].attempt.accumulator == b"acc"


class _FailingOnceStore(InMemoryJobProgressStore):
    """Fails the first append, after half of its records landed (a short write)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def append(self, job_id: str, log: LogId, events: list[ProgressEvent]) -> None:
        if not self.failed:
            self.failed = True
            super().append(job_id, log, events[: len(events) // 2])
            raise OSError("short write")
        super().append(job_id, log, events)


def test_a_failed_write_is_written_again_and_readers_skip_what_landed_twice() -> None:
    graph = chain3()
    store = _FailingOnceStore()

    async def main() -> None:
        recorder = ProgressRecorder(store, "job-1", _Runtime())  # type: ignore[arg-type]
        recorder.start("s1", 1)
        recorder.adopt({})
        recorder.attempt_finished(v(graph, "a", 0).current_execution, b"", None)
        await recorder.flush()
        assert recorder.failed_writes == 1 and not recorder.idle
        recorder.attempt_finished(v(graph, "a", 1).current_execution, b"", None)
        await recorder.flush()
        assert recorder.idle

    asyncio.run(main())
    (log,) = store.load("job-1")
    assert [e.seq for e in log.events] == [1, 1, 2, 3, 4]
    a = v(graph, "a", 0).job_vertex.id
    assert set(replay([log], LogId(2, "s2")).finished) == {(a, 0), (a, 1)}


class _ThreadRuntime(_Runtime):
    """Blocking calls on a thread, as the service runtime runs them."""

    async def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


class _HeldStore(InMemoryJobProgressStore):
    """Appends wait until the test lets them land; counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.may_land = threading.Event()
        self.appends = 0

    def append(self, job_id: str, log: LogId, events: list[ProgressEvent]) -> None:
        self.appends += 1
        self.may_land.wait(10)
        super().append(job_id, log, events)


GRAPH = chain3()


def _recover(store: _HeldStore) -> tuple[asyncio.Task[int], ProgressRecorder]:
    runtime: Any = _ThreadRuntime()
    recorder = ProgressRecorder(store, GRAPH.job_id, runtime)
    no_scheduler: Any = None  # nothing is restored: the scheduler is never used
    task = asyncio.get_running_loop().create_task(
        recover_finished_subtasks(GRAPH, no_scheduler, recorder, runtime, "/nowhere", "s2", 20)
    )
    return task, recorder


def test_a_jobs_first_job_master_deploys_while_leader_and_adopted_are_written() -> None:
    store = _HeldStore()

    async def main() -> None:
        task, recorder = _recover(store)
        # Nothing to build on: it returns (and the job is deployed) before the records land.
        assert await asyncio.wait_for(task, 5) == 0
        assert not recorder.idle
        store.may_land.set()
        await recorder.flush()

    asyncio.run(main())
    events = store.logs[GRAPH.job_id][LogId(20, "s2")]
    assert [(e.kind, e.seq) for e in events] == [(LEADER, 1), (ADOPTED, 2)]
    assert store.appends == 1  # both records in one write


def test_a_job_master_taking_over_acts_only_once_what_it_adopted_is_on_disk() -> None:
    store = _HeldStore()
    earlier = LogId(10, "s1")
    store.logs[GRAPH.job_id] = {
        earlier: numbered([ProgressEvent(LEADER, "s1"), ProgressEvent(ADOPTED, "s1")])
    }

    async def main() -> None:
        task, recorder = _recover(store)
        await asyncio.sleep(0.2)
        assert not task.done()  # waits for its adopted record
        store.may_land.set()
        assert await asyncio.wait_for(task, 5) == 0
        assert recorder.idle

    asyncio.run(main())
    events = store.logs[GRAPH.job_id][LogId(20, "s2")]
    assert [(e.kind, e.seq) for e in events] == [(LEADER, 1), (ADOPTED, 2)]
    assert events[1].trusted == ((earlier.name, 2),)


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
        recorder.start("s1", 1)
        recorder.attempt_finished(v(graph, "a", 0).current_execution, b"", None)
        assert recorder.idle and not recorder.enabled

    asyncio.run(main())


def test_a_successor_restores_the_blocklist_its_predecessor_recorded() -> None:
    store = InMemoryJobProgressStore()

    class Speculation:
        restored: dict[str, float] = {}

        def restore_blocklist(self, until: dict[str, float]) -> None:
            self.restored = dict(until)

    scheduler: Any = SimpleNamespace(speculation=Speculation())

    async def main() -> None:
        first = ProgressRecorder(store, GRAPH.job_id, _Runtime())  # type: ignore[arg-type]
        first.start("s1", 1)
        first.adopt({})
        first.blocklist_changed({ResourceID("te-slow"): 1_000.0})
        first.blocklist_changed({ResourceID("te-slow"): 1_000.0, ResourceID("te-b"): 2_000.5})
        await first.flush()
        runtime: Any = _Runtime()
        second = ProgressRecorder(store, GRAPH.job_id, runtime)
        await recover_finished_subtasks(GRAPH, scheduler, second, runtime, "/nowhere", "s2", 2)

    asyncio.run(main())
    kinds = [e.kind for e in store.logs[GRAPH.job_id][LogId(1, "s1")]]
    assert kinds == [LEADER, ADOPTED, BLOCKED, BLOCKED]
    assert scheduler.speculation.restored == {"te-slow": 1_000.0, "te-b": 2_000.5}
