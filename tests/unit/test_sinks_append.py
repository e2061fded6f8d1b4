"""The file sinks' commit protocol for ``append`` and ``partition_by`` (no Spark: attempts'
files are made by hand, as Spark lays them out)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from sparkmill.common.core.errors import CommitError
from sparkmill.common.pipeline import plan as S
from sparkmill.services.taskexecutor.spark import sinks


def _job() -> str:
    return uuid.uuid4().hex


def _attempt(
    out: Path,
    job: str,
    subtask: int,
    files: dict[str, str],
    *,
    mode: str = "append",
    partition_by: tuple[str, ...] = (),
    attempt: int = 0,
    epoch: int = 0,
) -> None:
    """One attempt of a sink subtask writes ``files`` (relative path -> content), then commits."""
    output = S.SinkOutput("csv", str(out), mode, {}, partition_by)
    written = sinks.attempt_dir(str(out), job, subtask, uuid.uuid4().hex)
    for relative, content in {**files, "_SUCCESS": "", ".part.crc": "x"}.items():
        target = written / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    sinks.commit_task(output, job, subtask, written, attempt, epoch)


def _commit(
    out: Path, job: str, parallelism: int, mode: str = "append", partition_by: tuple[str, ...] = ()
) -> int:
    return sinks.commit_job(S.SinkCommit(str(out), "csv", mode, parallelism, partition_by), job)


def _contents(out: Path) -> dict[str, str]:
    """Published data files (relative path -> content), hidden files left out."""
    return {
        str(p.relative_to(out)): p.read_text()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not any(part.startswith(("_", ".")) for part in p.relative_to(out).parts)
    }


def _values(out: Path) -> list[str]:
    return sorted(_contents(out).values())


def test_append_adds_each_job_files_beside_the_others(tmp_path: Path) -> None:
    out = tmp_path / "table"
    first, second = _job(), _job()
    for job, day in ((first, "1"), (second, "2")):
        _attempt(out, job, 0, {"part-0.csv": f"a{day}"})
        _attempt(out, job, 1, {"part-0.csv": f"b{day}"})
        assert _commit(out, job, 2) == 2
    assert _values(out) == ["a1", "a2", "b1", "b2"]
    assert all(first in name or second in name for name in _contents(out))
    assert (out / "_SUCCESS").exists()
    assert not (out / "_temporary").exists()


def test_a_repeated_append_commit_adds_nothing(tmp_path: Path) -> None:
    out = tmp_path / "table"
    job = _job()
    _attempt(out, job, 0, {"part-0.csv": "a", "part-1.csv": "b"})
    assert _commit(out, job, 1) == 2
    assert _commit(out, job, 1) == 0  # the report of the first commit got lost
    assert _values(out) == ["a", "b"]


def test_an_interrupted_append_commit_is_finished_by_the_next_try(tmp_path: Path) -> None:
    out = tmp_path / "table"
    old = _job()
    _attempt(out, old, 0, {"part-0.csv": "old"})
    _commit(out, old, 1)
    job = _job()
    _attempt(out, job, 0, {"part-0.csv": "a", "part-1.csv": "b", "part-2.csv": "c"})
    sink = S.SinkCommit(str(out), "csv", "append", 1)
    plan = sinks._plan(sink, job)
    src, dst = plan[0]
    Path(src).replace(dst)  # the first try died after moving one file
    assert _commit(out, job, 1) == 3
    assert _values(out) == ["a", "b", "c", "old"]


def test_a_rerun_attempt_supersedes_the_earlier_one(tmp_path: Path) -> None:
    out = tmp_path / "table"
    job = _job()
    _attempt(out, job, 0, {"part-0.csv": "first try"}, attempt=0)
    _attempt(out, job, 0, {"part-0.csv": "second try"}, attempt=1)
    # A late attempt of a deposed JobMaster (lower epoch) never replaces a newer one.
    _attempt(out, job, 0, {"part-0.csv": "late"}, attempt=5, epoch=-1)
    _commit(out, job, 1)
    assert _values(out) == ["second try"]


def test_partition_by_keeps_the_key_value_directories(tmp_path: Path) -> None:
    out = tmp_path / "table"
    job = _job()
    _attempt(out, job, 0, {"day=1/part-0.csv": "a", "day=2/part-0.csv": "b"}, partition_by=("day",))
    _attempt(out, job, 1, {"day=2/part-0.csv": "c"}, partition_by=("day",))
    _commit(out, job, 2, partition_by=("day",))
    by_partition: dict[str, list[str]] = {name.split("/")[0]: [] for name in _contents(out)}
    for name, value in _contents(out).items():
        by_partition[name.split("/")[0]].append(value)
    assert {k: sorted(v) for k, v in by_partition.items()} == {"day=1": ["a"], "day=2": ["b", "c"]}


def test_overwrite_with_partition_by_replaces_only_the_partitions_written(tmp_path: Path) -> None:
    out = tmp_path / "table"
    old = _job()
    _attempt(
        out, old, 0, {"day=1/part-0.csv": "old1", "day=2/part-0.csv": "old2"}, partition_by=("day",)
    )
    _commit(out, old, 1, partition_by=("day",))
    (out / "day=2" / "stray.csv").write_text("stray")  # written by someone else: replaced too
    job = _job()
    _attempt(
        out,
        job,
        0,
        {"day=2/part-0.csv": "new2", "day=3/part-0.csv": "new3"},
        mode="overwrite",
        partition_by=("day",),
    )
    _commit(out, job, 1, "overwrite", ("day",))
    assert sorted(_contents(out).items(), key=lambda kv: kv[1]) == [
        (next(n for n in _contents(out) if n.startswith("day=2/")), "new2"),
        (next(n for n in _contents(out) if n.startswith("day=3/")), "new3"),
        (next(n for n in _contents(out) if n.startswith("day=1/")), "old1"),
    ]
    assert _commit(out, job, 1, "overwrite", ("day",)) == 0


def test_overwrite_without_partitions_replaces_everything(tmp_path: Path) -> None:
    out = tmp_path / "table"
    old = _job()
    _attempt(out, old, 0, {"day=1/part-0.csv": "old"}, partition_by=("day",))
    _commit(out, old, 1, partition_by=("day",))
    job = _job()
    _attempt(out, job, 0, {"part-0.csv": "new"}, mode="overwrite")
    _commit(out, job, 1, "overwrite")
    assert _contents(out) == {"part-00000-000.csv": "new"}


def test_error_mode_refuses_existing_content_and_points_at_append(tmp_path: Path) -> None:
    out = tmp_path / "table"
    old = _job()
    _attempt(out, old, 0, {"part-0.csv": "old"})
    _commit(out, old, 1)
    job = _job()
    _attempt(out, job, 0, {"part-0.csv": "new"}, mode="error")
    with pytest.raises(CommitError, match="mode='append'"):
        _commit(out, job, 1, "error")
    assert _values(out) == ["old"]


def test_slots_of_one_process_register_a_sink_at_the_same_time(tmp_path: Path) -> None:
    # Two slots of a task executor are two threads of one process: each registration needs a
    # scratch file of its own, or one thread's rename finds the other's gone.
    import threading

    from sparkmill.common.exchange.layout import SINKS_DIR, job_exchange_dir, register_sink

    job = _job()
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def register() -> None:
        start.wait()
        try:
            for _ in range(20):
                register_sink(str(tmp_path), job, str(tmp_path / "out"))
                for entry in (job_exchange_dir(str(tmp_path), job) / SINKS_DIR).iterdir():
                    if not entry.name.endswith(".tmp"):
                        entry.unlink(missing_ok=True)  # register again next round
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=register) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@pytest.mark.parametrize(
    ("mode", "partition_by"),
    [("error", ()), ("overwrite", ()), ("append", ()), ("overwrite", ("day",))],
)
def test_a_commit_run_again_after_it_finished_publishes_nothing(
    tmp_path: Path, mode: str, partition_by: tuple[str, ...]
) -> None:
    # The JobMaster that ran the commit died before recording it; its successor re-ran sink
    # attempts (new temporaries, other content) and runs the commit again.
    out = tmp_path / "table"
    job = _job()
    name = "day=1/part-0.csv" if partition_by else "part-0.csv"
    _attempt(out, job, 0, {name: "first"}, mode=mode, partition_by=partition_by)
    assert _commit(out, job, 1, mode, partition_by) == 1
    published = _contents(out)
    _attempt(out, job, 0, {name: "rerun", "part-9.csv": "extra"}, mode=mode, attempt=0, epoch=7)
    assert (out / "_temporary").exists()
    assert _commit(out, job, 1, mode, partition_by) == 0
    assert _contents(out) == published
    assert not (out / "_temporary").exists()
    assert sinks.committed_jobs(str(out)) == [job]


def test_success_names_the_appending_jobs_and_keeps_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sinks, "COMMIT_HISTORY", 3)
    out = tmp_path / "table"
    (out).mkdir()
    (out / "_SUCCESS").write_text("")  # written by Spark: names no job
    jobs = [_job() for _ in range(5)]
    for i, job in enumerate(jobs):
        _attempt(out, job, 0, {"part-0.csv": str(i)})
        _commit(out, job, 1)
        assert sinks.committed_jobs(str(out)) == jobs[max(0, i - 2) : i + 1]
    assert len(_values(out)) == 5
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("_")) == ["_SUCCESS"]


def test_jobs_appending_at_the_same_moment_are_all_recorded(tmp_path: Path) -> None:
    # No line is lost to a concurrent writer, also when each write trims the file (replacing
    # it) while the others wait for the lock on the file it replaced: the 1,000 lines written
    # before make every write drop the oldest, never one of these 200.
    import threading

    out = tmp_path / "table"
    out.mkdir()
    (out / "_SUCCESS").write_text("".join(f"{_job()}\n" for _ in range(sinks.COMMIT_HISTORY)))
    commit = S.SinkCommit(str(out), "csv", "append", 1)
    jobs = [[_job() for _ in range(25)] for _ in range(8)]
    start = threading.Barrier(len(jobs))
    failures: list[BaseException] = []

    def record(own: list[str]) -> None:
        start.wait()
        try:
            for job in own:
                sinks._record_commit(commit, out, job)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=record, args=(own,)) for own in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    recorded = sinks.committed_jobs(str(out))
    assert len(recorded) == sinks.COMMIT_HISTORY
    assert {job for own in jobs for job in own} <= set(recorded)
    assert [p.name for p in out.iterdir()] == ["_SUCCESS"]
