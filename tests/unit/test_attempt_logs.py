"""Per-attempt logs on a task executor: capture by thread, the size cap, files, retention."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
import threading
import time
from pathlib import Path

import pytest

from sparkmill.common.core.errors import NotFoundError
from sparkmill.common.core.log_tail import split_log_tail, with_log_tail
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import jobs_pb2
from sparkmill.services.taskexecutor import attempt_logs
from sparkmill.services.taskexecutor.attempt_log_service import (
    SERVICE_KEY,
    get_attempt_log,
    list_attempt_logs,
    start_attempt_logs,
)
from sparkmill.services.taskexecutor.attempt_logs import AttemptKey, AttemptLogStore

JOB = "f" * 32


def key(vertex: str = "v1", subtask: int = 0, attempt: int = 0, epoch: int = 1) -> AttemptKey:
    return AttemptKey(JOB, vertex, f"name-{vertex}", subtask, attempt, epoch, f"att{attempt}")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AttemptLogStore:
    return AttemptLogStore(tmp_path / "te1", max_bytes=4096, retention_s=60.0)


def capture(store: AttemptLogStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # In the test's body: pytest swaps sys.stdout / sys.stderr between a test's phases.
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    root = logging.getLogger()
    handlers = list(root.handlers)
    attempt_logs.install(store)
    monkeypatch.setattr(root, "handlers", root.handlers)
    added = [h for h in root.handlers if h not in handlers]
    assert added


def run_on_thread(store: AttemptLogStore, k: AttemptKey, body: object) -> None:
    def target() -> None:
        with store.bind(k):
            body()  # type: ignore[operator]

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()


def text_of(store: AttemptLogStore, k: AttemptKey) -> str:
    return store.read(k, 0, 1 << 20).text


def test_logging_and_prints_of_the_bound_thread_are_captured_and_others_not(
    store: AttemptLogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(store, monkeypatch)
    pipeline_log = logging.getLogger("my.pipeline")

    def body() -> None:
        pipeline_log.warning("counting %d words", 3)
        print("hello from transform")
        sys.stderr.write("partial ")
        sys.stderr.write("line\n")

    pipeline_log.warning("not inside any attempt")
    run_on_thread(store, key(), body)
    text = text_of(store, key())
    assert "WARNING my.pipeline: counting 3 words" in text
    assert "stdout: hello from transform" in text
    assert "stderr: partial line" in text
    assert "not inside any attempt" not in text


def test_two_attempts_running_at_once_keep_their_own_lines(
    store: AttemptLogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(store, monkeypatch)
    barrier = threading.Barrier(2)

    def body(name: str) -> None:
        barrier.wait()
        for i in range(50):
            print(f"{name} {i}")

    threads = [
        threading.Thread(target=lambda k=k, n=n: _bound(store, k, lambda: body(n)))
        for k, n in ((key("a"), "alpha"), (key("b"), "beta"))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = text_of(store, key("a")), text_of(store, key("b"))
    assert a.count("alpha") == 50 and "beta" not in a
    assert b.count("beta") == 50 and "alpha" not in b


def _bound(store: AttemptLogStore, k: AttemptKey, body: object) -> None:
    with store.bind(k):
        body()  # type: ignore[operator]


def test_the_cap_drops_the_oldest_lines_and_offsets_never_repeat(
    store: AttemptLogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(store, monkeypatch)
    run_on_thread(store, key(), lambda: [print(f"line {i:05d}") for i in range(1000)])
    chunk = store.read(key(), 0, 1 << 20)
    assert chunk.dropped_bytes > 0 and chunk.offset == chunk.first_offset > 0
    assert len(chunk.text.encode()) <= 4096
    assert chunk.text.rstrip().endswith("line 00999") and "line 00000" not in chunk.text
    assert chunk.ended
    # Following: reading on from next_offset gives nothing new once the attempt ended.
    assert store.read(key(), chunk.next_offset, 100).text == ""
    # A small read returns whole lines only.
    piece = store.read(key(), chunk.offset, 100)
    assert piece.text.endswith("\n") and piece.next_offset == chunk.offset + len(piece.text)


def test_a_restarted_task_executor_serves_the_files(
    store: AttemptLogStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(store, monkeypatch)
    run_on_thread(store, key(attempt=2), lambda: print("before restart"))
    store.flush_index()  # what the service does twice a second and when it stops
    again = AttemptLogStore(tmp_path / "te1", max_bytes=4096, retention_s=60.0)
    [found] = again.attempts(JOB)
    assert found == key(attempt=2)
    assert "before restart" in again.read(found, 0, 1000).text
    assert again.read(found, -5, 1000).ended


def test_after_a_restart_the_index_says_where_a_capped_file_starts_and_what_ran_on(
    store: AttemptLogStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(store, monkeypatch)
    run_on_thread(store, key(), lambda: [print(f"line {i:05d}") for i in range(1000)])
    before = store.read(key(), 0, 1 << 20)
    store.flush_index()
    # An attempt the process died in: started, ran past ``defer_s``, never ended.
    with store.bind(key(subtask=1)):
        store.write_line("half way")
        assert store.put_due_on_disk(now=time.monotonic() + store.defer_s) == 1
        again = AttemptLogStore(tmp_path / "te1", max_bytes=4096, retention_s=60.0)
        assert again.attempts(JOB) == [key(), key(subtask=1)]
        after = again.read(key(), 0, 1 << 20)
        assert after.first_offset == before.first_offset and after.ended
        assert after.text.rstrip().endswith("line 00999")
        cut_off = again.read(key(subtask=1), 0, 1000)
        assert cut_off.text == "half way\n" and not cut_off.ended


def test_a_short_attempt_keeps_its_log_in_the_index_and_creates_no_file(
    store: AttemptLogStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(store, monkeypatch)
    run_on_thread(store, key(), lambda: logging.getLogger("t").warning("short and sweet"))
    job_dir = tmp_path / "te1" / JOB
    assert not job_dir.exists()  # nothing written on the task's thread
    assert store.due_on_disk()
    assert store.put_due_on_disk() == 0  # the service's periodic call: no file, the index line
    assert not store.due_on_disk()
    assert [p.name for p in job_dir.iterdir()] == [attempt_logs.INDEX]
    [line] = (job_dir / attempt_logs.INDEX).read_text().splitlines()
    assert json.loads(line)["ended"] and "short and sweet" in json.loads(line)["text"]
    again = AttemptLogStore(tmp_path / "te1", max_bytes=4096, retention_s=60.0)
    assert again.attempts(JOB) == [key()]
    chunk = again.read(key(), 0, 1000)
    assert chunk.text.endswith("WARNING t: short and sweet\n") and chunk.ended
    assert chunk.updated_at > 0


def test_an_attempt_that_runs_on_or_logs_much_gets_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = AttemptLogStore(tmp_path / "te1", max_bytes=1 << 20, retention_s=60.0)
    capture(store, monkeypatch)
    job_dir = tmp_path / "te1" / JOB
    big = key(subtask=0)
    run_on_thread(store, big, lambda: [print("x" * 99) for _ in range(60)])
    assert (job_dir / f"{big.file_stem}.log").read_text().count("x" * 99) == 60
    # Running past ``defer_s``: the periodic check creates the file, later lines go into it.
    long = key(subtask=1)
    assert not store.due_on_disk()
    with store.bind(long):
        store.write_line("first")
        later = time.monotonic() + store.defer_s
        assert store.due_on_disk(now=later) and store.put_due_on_disk(now=later) == 1
        assert not store.due_on_disk(now=later)
        store.write_line("second")
        assert (job_dir / f"{long.file_stem}.log").read_text() == "first\nsecond\n"
    # A line logged after ``defer_s`` creates the file itself.
    slow = key(subtask=2)
    eager = AttemptLogStore(tmp_path / "te1", max_bytes=4096, retention_s=60.0, defer_s=0.0)
    with eager.bind(slow):
        eager.write_line("at once")
        assert (job_dir / f"{slow.file_stem}.log").read_text() == "at once\n"
    store.flush_index()
    again = AttemptLogStore(tmp_path / "te1", max_bytes=1 << 20, retention_s=60.0)
    assert again.attempts(JOB) == [big, long, slow]
    assert again.read(long, 0, 1000).text == "first\nsecond\n"
    assert again.read(slow, 0, 1000).ended


def test_the_service_writes_what_ended_within_a_second_and_when_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = dataclasses.replace(ClusterSettings(), task_log_dir=str(tmp_path))
    index = tmp_path / "te1" / JOB / attempt_logs.INDEX

    async def scenario() -> None:
        runtime = ServiceRuntime("te-test")
        # The streams and handlers it replaces come back after the test (see capture).
        monkeypatch.setattr(sys, "stdout", sys.stdout)
        monkeypatch.setattr(sys, "stderr", sys.stderr)
        monkeypatch.setattr(logging.getLogger(), "handlers", list(logging.getLogger().handlers))
        store = start_attempt_logs({}, settings, "te1", runtime)
        capture(store, monkeypatch)
        await asyncio.to_thread(run_on_thread, store, key(attempt=1), lambda: print("one"))
        for _ in range(100):  # the periodic call, twice per defer_s
            if index.exists():
                break
            await asyncio.sleep(0.05)
        assert "one" in index.read_text()
        await asyncio.to_thread(run_on_thread, store, key(attempt=2), lambda: print("two"))
        await runtime.close()  # stopping writes what ended since the last call
        assert "two" in index.read_text()

    asyncio.run(scenario())


def test_logs_an_earlier_version_wrote_with_a_meta_file_are_still_served(tmp_path: Path) -> None:
    job_dir = tmp_path / "te1" / JOB
    job_dir.mkdir(parents=True)
    old = key(attempt=1)
    (job_dir / f"{old.file_stem}.log").write_text("from the old version\n")
    meta = {f: getattr(old, f) for f in old.__slots__}
    (job_dir / f"{old.file_stem}.meta").write_text(json.dumps({**meta, "ended": True}))
    store = AttemptLogStore(tmp_path / "te1", max_bytes=4096, retention_s=60.0)
    assert store.attempts(JOB) == [old]
    assert store.read(old, 0, 1000).text == "from the old version\n"


def test_retention_removes_ended_jobs_only_after_it(
    store: AttemptLogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(store, monkeypatch)
    run_on_thread(store, key(), lambda: print("x"))
    assert store.sweep() == []
    assert store.sweep(now=time.time() + 61) == [JOB]
    assert store.attempts(JOB) == []


def test_the_rpc_selects_the_latest_attempt_and_refuses_unknown_ones(
    store: AttemptLogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(store, monkeypatch)
    for attempt, epoch in ((0, 1), (1, 1), (0, 2)):
        run_on_thread(store, key(attempt=attempt, epoch=epoch), lambda: print("run"))
    services: dict[str, object] = {SERVICE_KEY: store}
    index = list_attempt_logs(services, "te1", jobs_pb2.ListAttemptLogsRequest(job_id=JOB))
    assert [(r.job_master_epoch, r.attempt_number) for r in index.logs] == [(1, 0), (1, 1), (2, 0)]
    request = jobs_pb2.GetAttemptLogRequest(
        job_id=JOB, vertex="name-v1", subtask_index=0, attempt_number=-1
    )
    latest = get_attempt_log(services, "te1", request)
    assert (latest.ref.job_master_epoch, latest.ref.attempt_number) == (2, 0)
    assert latest.ref.task_executor == "te1" and "stdout: run" in latest.text
    request.subtask_index = 7
    with pytest.raises(NotFoundError, match="subtask 7"):
        get_attempt_log(services, "te1", request)


def test_log_tail_travels_in_the_failure_details() -> None:
    details = with_log_tail("Traceback ...\nValueError: boom\n", ["a", "b"])
    assert split_log_tail(details) == ("Traceback ...\nValueError: boom", ["a", "b"])
    assert split_log_tail("plain") == ("plain", [])
    assert with_log_tail("tb", []) == "tb"
