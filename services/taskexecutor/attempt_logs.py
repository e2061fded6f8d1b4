"""Per-attempt logs of a task executor (what Flink's TaskManager log gives per task, per attempt).

While an attempt's thread runs, everything it logs through Python's ``logging`` and everything
it writes to ``sys.stdout`` / ``sys.stderr`` is kept in that attempt's log, besides going where
it went before (the task executor's own log). The capture is by *thread*: the task's thread
is bound to its attempt for as long as it runs (:meth:`AttemptLogStore.bind`). So it captures
the pipeline's ``transform`` functions and what builds the DataFrames, and the task's lifecycle
lines; it does **not** capture threads the user's code starts itself. UDFs run in Spark's Python
worker processes: with a local Spark master their printed and logged lines arrive tagged with
their attempt (:mod:`.spark.python_daemon`) and are added with
:meth:`AttemptLogStore.write_attempt_line`; with a remote master they stay in Spark's executor
logs.

Each attempt's log is capped (``taskmanager.log.attempt.max-size``): past the cap the oldest
lines are dropped and the reader is told how many bytes were dropped. Offsets count every byte
the attempt ever wrote, so a follower reading from an offset never sees a line twice.

Logs are kept under ``taskmanager.log.attempt.dir``, one directory per job, with an index
``<job id>/attempts.jsonl``: a line per attempt start, end and rewrite (its key, where its file
starts, whether it ended; the last line of an attempt counts). An attempt that runs longer than
a second, or ends with more than :data:`INLINE_MAX_BYTES` of log, gets a file of its own,
``<job id>/<attempt>.log``; a shorter one's few lines (most often only its lifecycle lines) go
into its index line, which the task executor writes within half a second of the attempt's end,
together with the other attempts that ended meanwhile (and when it stops). Creating a file
costs the file system far more than appending a line, and opening the index for each attempt
was a tenth of a short task's thread time: the task's thread does neither now. So a task
executor that dies within an attempt's first second, or half a second after a short one ended,
loses that attempt's lines here; they are in the task executor's own log too. (Logs of
earlier versions, with a ``.meta`` file per attempt, are still read.) A restarted task executor
still serves the logs of the attempts it ran, and a job's logs are removed
``taskmanager.log.attempt.retention`` after their last line.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol, TextIO

log = logging.getLogger(__name__)

_FORMAT = logging.Formatter(
    "%(asctime)s.%(msecs)03d %(levelname)-5s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S"
)
_SAFE = str.maketrans({c: "_" for c in "/\\:\0"})
INDEX = "attempts.jsonl"
# An attempt whose log is at most this big when it ends, and that ended within
# ``AttemptLogStore.defer_s``, keeps its log in its index line instead of a file of its own.
INLINE_MAX_BYTES = 4096
DEFER_S = 1.0


@dataclass(frozen=True, slots=True)
class AttemptKey:
    """One attempt of one subtask; attempt numbers start again under a JobMaster that took the
    job over, so (job_master_epoch, attempt_number) orders them."""

    job_id: str
    vertex_id: str
    vertex_name: str
    subtask_index: int
    attempt_number: int
    job_master_epoch: int
    attempt_id: str

    @property
    def file_stem(self) -> str:
        stem = (
            f"{self.vertex_id}-{self.subtask_index}-e{self.job_master_epoch}-a{self.attempt_number}"
        )
        return stem.translate(_SAFE)

    def order(self) -> tuple[int, int]:
        return (self.job_master_epoch, self.attempt_number)


@dataclass
class LogChunk:
    key: AttemptKey
    text: str
    offset: int  # where ``text`` starts (bytes since the attempt's first line)
    next_offset: int  # where the next read continues
    dropped_bytes: int  # bytes between the requested offset and ``offset`` no longer kept
    first_offset: int  # the oldest byte still kept
    ended: bool
    updated_at: float


@dataclass
class _Live:
    """The log of an attempt that runs (or ran since this process started)."""

    key: AttemptKey
    job_dir: str  # os.path strings: pathlib's joins cost a short attempt more than its log
    max_bytes: int
    lines: deque[bytes] = field(default_factory=deque)
    kept: int = 0  # bytes in ``lines``
    start: int = 0  # offset of lines[0]
    file_start: int = 0  # offset of the file's first byte
    file_bytes: int = 0
    ended: bool = False
    updated_at: float = 0.0
    partial: dict[str, str] = field(default_factory=dict)  # unfinished stdout/stderr lines
    # The log file, open while the attempt runs: opening it for every line cost a short task
    # more CPU than all the rest of its run on the task executor (a file open is tens of
    # microseconds). Unbuffered, so each line is in the file as soon as it is written.
    out: BinaryIO | None = None
    # Whether the file and the index's start line exist: not before the attempt has run for
    # ``defer_s`` (most short attempts end first and never create a file).
    on_disk: bool = False
    started_at: float = 0.0  # time.monotonic() when bound

    @property
    def end(self) -> int:
        return self.start + self.kept

    @property
    def path(self) -> str:
        return os.path.join(self.job_dir, f"{self.key.file_stem}.log")


class AttemptLogStore:
    """Every attempt log of this task executor; thread-safe (task threads append, the event
    loop reads)."""

    def __init__(
        self, directory: Path, max_bytes: int, retention_s: float, defer_s: float = DEFER_S
    ) -> None:
        self.directory = directory
        self.max_bytes = max(1024, max_bytes)
        self.retention_s = retention_s
        self.defer_s = defer_s
        self._lock = threading.Lock()
        self._live: dict[AttemptKey, _Live] = {}
        self._bound: dict[int, _Live] = {}  # thread ident -> the attempt it runs
        # Index lines of ended short attempts (with their whole log) not written yet.
        self._pending_index: list[tuple[str, _Live, bytes]] = []
        self._flush_lock = threading.Lock()  # one flush_index at a time: lines stay in order

    # -- writing (task threads) ------------------------------------------------------------------

    @contextlib.contextmanager
    def bind(self, key: AttemptKey) -> Iterator[None]:
        """Capture what the calling thread logs and prints into ``key``'s log until exit."""
        entry = self._open(key)
        ident = threading.get_ident()
        with self._lock:
            self._bound[ident] = entry
        try:
            yield
        finally:
            with self._lock:
                self._bound.pop(ident, None)
                for stream in list(entry.partial):
                    self._append_locked(entry, entry.partial.pop(stream))
                if entry.out is not None:
                    entry.out.close()
                    entry.out = None
                entry.ended = True
                if not entry.on_disk and entry.kept <= INLINE_MAX_BYTES:
                    # Written with others by the next flush_index (off this thread).
                    self._pending_index.append((entry.job_dir, entry, b"".join(entry.lines)))
                elif not entry.on_disk:
                    self._to_disk_locked(entry)
                else:
                    self._write_meta_locked(entry)

    def bound(self) -> bool:
        return threading.get_ident() in self._bound

    def write_line(self, line: str) -> None:
        """Append ``line`` to the log of the attempt the calling thread runs (if any)."""
        with self._lock:
            entry = self._bound.get(threading.get_ident())
            if entry is not None:
                self._append_locked(entry, line)

    def write_stream(self, stream: str, text: str) -> bool:
        """A ``write()`` to stdout/stderr from the calling thread; False if it runs no attempt."""
        with self._lock:
            entry = self._bound.get(threading.get_ident())
            if entry is None:
                return False
            pending = entry.partial.get(stream, "") + text
            *complete, rest = pending.split("\n")
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            for line in complete:
                self._append_locked(entry, f"{stamp} {stream}: {line}")
            if rest:
                entry.partial[stream] = rest
            else:
                entry.partial.pop(stream, None)
            return True

    def write_attempt_line(self, attempt_id: str, stream: str, line: str) -> bool:
        """A line ``stream`` of a Spark Python worker printed for attempt ``attempt_id``;
        False (dropped) when that attempt does not run here now."""
        with self._lock:
            entry = next((e for e in self._bound.values() if e.key.attempt_id == attempt_id), None)
            if entry is None:
                return False
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            self._append_locked(entry, f"{stamp} {stream} (python worker): {line}")
            return True

    def write_forwarded_line(self, attempt_id: str, line: str) -> bool:
        """A line the pipeline worker sent for attempt ``attempt_id`` (already formatted there);
        False (dropped) when that attempt does not run here now."""
        with self._lock:
            entry = next((e for e in self._bound.values() if e.key.attempt_id == attempt_id), None)
            if entry is None:
                return False
            self._append_locked(entry, line)
            return True

    def _open(self, key: AttemptKey) -> _Live:
        job_dir = os.path.join(self.directory, key.job_id.translate(_SAFE))
        entry = _Live(
            key, job_dir, self.max_bytes, updated_at=time.time(), started_at=time.monotonic()
        )
        with self._lock:
            self._live[key] = entry
        return entry

    def due_on_disk(self, now: float | None = None) -> bool:
        """Whether :meth:`put_due_on_disk` has work: a running attempt that has run ``defer_s``
        without a file yet, or index lines to write (cheap: no I/O)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return bool(self._pending_index) or any(
                not e.on_disk and now - e.started_at >= self.defer_s for e in self._bound.values()
            )

    def put_due_on_disk(self, now: float | None = None) -> int:
        """Give every attempt that has run ``defer_s`` its file, and write the index lines of
        the short attempts that ended; how many attempts got a file. Blocking (file creation):
        called off the event loop, twice per ``defer_s``."""
        self.flush_index()
        now = time.monotonic() if now is None else now
        with self._lock:
            due = [
                e
                for e in self._bound.values()
                if not e.on_disk and now - e.started_at >= self.defer_s
            ]
            for entry in due:
                self._to_disk_locked(entry)
        return len(due)

    def _to_disk_locked(self, entry: _Live) -> None:
        """Create the attempt's file with what the cap keeps, and its index line."""
        if entry.on_disk:
            return
        entry.on_disk = True
        try:
            os.makedirs(entry.job_dir, exist_ok=True)
            out = open(entry.path, "wb", buffering=0)  # noqa: SIM115 - closed when it ends
            out.write(b"".join(entry.lines))
        except OSError:
            return  # best effort, as every write of the log
        entry.file_start, entry.file_bytes = entry.start, entry.kept
        if entry.ended:
            out.close()
        else:
            entry.out = out
        self._write_meta_locked(entry)

    def _append_locked(self, entry: _Live, line: str) -> None:
        data = (line.rstrip("\n") + "\n").encode("utf-8", "replace")
        if len(data) > entry.max_bytes:  # one huge line: keep its end
            data = b"...[cut]" + data[-(entry.max_bytes - 8) :]
        entry.lines.append(data)
        entry.kept += len(data)
        while entry.kept > entry.max_bytes:
            dropped = entry.lines.popleft()
            entry.kept -= len(dropped)
            entry.start += len(dropped)
        entry.updated_at = time.time()
        if not entry.on_disk:
            if time.monotonic() - entry.started_at >= self.defer_s:
                self._to_disk_locked(entry)  # writes ``data`` with the rest
            return
        try:
            if entry.file_bytes + len(data) > 2 * entry.max_bytes:
                # Rewrite the file with what the cap keeps (rarely: once per cap's worth).
                if entry.out is not None:
                    entry.out.close()
                entry.out = open(entry.path, "wb", buffering=0)  # noqa: SIM115
                entry.out.write(b"".join(entry.lines))
                entry.file_start, entry.file_bytes = entry.start, entry.kept
                self._write_meta_locked(entry)
            elif entry.out is not None:
                entry.out.write(data)
                entry.file_bytes += len(data)
            else:  # the attempt ended: its file is closed
                with open(entry.path, "ab") as out:
                    out.write(data)
                entry.file_bytes += len(data)
        except OSError:
            pass  # the log is best effort: a full disk must not fail the task

    def flush_index(self) -> None:
        """Write the index lines of the short attempts that ended: one open per job, not one
        per attempt, and off the task threads."""
        with self._flush_lock:
            with self._lock:
                pending, self._pending_index = self._pending_index, []
            by_job: dict[str, list[str]] = {}
            for job_dir, entry, inline in pending:
                by_job.setdefault(job_dir, []).append(_index_line(entry, inline))
            for job_dir, lines in by_job.items():
                _append_index(job_dir, "".join(lines))

    def _write_meta_locked(self, entry: _Live) -> None:
        _append_index(entry.job_dir, _index_line(entry, None))

    # -- reading (event loop) --------------------------------------------------------------------

    def attempts(self, job_id: str) -> list[AttemptKey]:
        """Every attempt of ``job_id`` with a log here, oldest first."""
        keys = {k for k in self._snapshot_keys() if k.job_id == job_id}
        keys.update(r.key for r in _read_index(self.directory / job_id.translate(_SAFE)))
        return sorted(keys, key=lambda k: (k.vertex_name, k.subtask_index, k.order()))

    def read(self, key: AttemptKey, offset: int, max_bytes: int) -> LogChunk:
        """Up to ``max_bytes`` from ``offset`` (negative: the last ``-offset`` bytes)."""
        with self._lock:
            entry = self._live.get(key)
            if entry is not None:
                data = b"".join(entry.lines)
                start, ended, updated = entry.start, entry.ended, entry.updated_at
            else:
                data, start, ended, updated = self._read_file(key)
        end = start + len(data)
        if offset < 0:
            offset = max(start, end + offset)
        begin = min(max(offset, start), end)
        piece = data[begin - start : begin - start + max(0, max_bytes)]
        if begin - start + len(piece) < len(data):  # do not split a line
            cut = piece.rfind(b"\n")
            piece = piece[: cut + 1] if cut >= 0 else piece
        return LogChunk(
            key=key,
            text=piece.decode("utf-8", "replace"),
            offset=begin,
            next_offset=begin + len(piece),
            dropped_bytes=max(0, start - offset),
            first_offset=start,
            ended=ended,
            updated_at=updated,
        )

    def tail(self, key: AttemptKey, lines: int) -> list[str]:
        with self._lock:
            entry = self._live.get(key)
            kept = list(entry.lines)[-lines:] if entry is not None else []
        return [line.decode("utf-8", "replace").rstrip("\n") for line in kept]

    def _snapshot_keys(self) -> list[AttemptKey]:
        with self._lock:
            return list(self._live)

    def _read_file(self, key: AttemptKey) -> tuple[bytes, int, bool, float]:
        path = self.directory / key.job_id.translate(_SAFE) / f"{key.file_stem}.log"
        found = next((r for r in _read_index(path.parent, key.attempt_id) if r.key == key), None)
        file_start, ended = (found.file_start, found.ended) if found else (0, True)
        if found is not None and found.inline is not None:
            return found.inline, file_start, ended, found.updated_at
        try:
            data = path.read_bytes()
            updated = path.stat().st_mtime
        except OSError:
            return b"", 0, True, 0.0
        if len(data) > self.max_bytes:  # the file may hold up to twice the cap: apply it
            cut = data.find(b"\n", len(data) - self.max_bytes)
            skip = cut + 1 if cut >= 0 else len(data) - self.max_bytes
            data, file_start = data[skip:], file_start + skip
        return data, file_start, ended, updated

    # -- retention -------------------------------------------------------------------------------

    def sweep(self, now: float | None = None) -> list[str]:
        """Remove the logs of every job whose last line is older than the retention; the ids
        of the removed jobs."""
        now = time.time() if now is None else now
        removed: list[str] = []
        self.flush_index()  # what is kept only in memory must not be taken for expired
        if not self.directory.is_dir():
            return removed
        running = {k.job_id for k in self._snapshot_keys_running()}
        for job_dir in self.directory.iterdir():
            if not job_dir.is_dir() or job_dir.name in running:
                continue
            try:
                newest = max((p.stat().st_mtime for p in job_dir.iterdir()), default=0.0)
            except OSError:
                continue
            if now - newest >= self.retention_s:
                shutil.rmtree(job_dir, ignore_errors=True)
                with self._lock:
                    for key in [k for k in self._live if k.job_id == job_dir.name]:
                        del self._live[key]
                removed.append(job_dir.name)
        # Ended attempts need not stay in memory: their file has what the cap keeps.
        with self._lock:
            idle = [k for k, e in self._live.items() if e.ended and now - e.updated_at > 60.0]
            for key in idle:
                del self._live[key]
        return removed

    def _snapshot_keys_running(self) -> list[AttemptKey]:
        with self._lock:
            return [e.key for e in self._bound.values()]


def _index_line(entry: _Live, inline: bytes | None) -> str:
    """The index line of ``entry`` now; with ``inline``, its whole log in place of a file."""
    key = entry.key
    meta: dict[str, object] = {
        "job_id": key.job_id,
        "vertex_id": key.vertex_id,
        "vertex_name": key.vertex_name,
        "subtask_index": key.subtask_index,
        "attempt_number": key.attempt_number,
        "job_master_epoch": key.job_master_epoch,
        "attempt_id": key.attempt_id,
        "file_start": entry.file_start,
        "ended": entry.ended,
    }
    if inline is not None:
        meta.update(
            file_start=entry.start,
            text=inline.decode("utf-8", "replace"),
            updated_at=entry.updated_at,
        )
    return json.dumps(meta) + "\n"


def _append_index(job_dir: str, text: str) -> None:
    """Append ``text`` (whole lines) to the job's index in one ``write``: the flush of ended
    attempts and an attempt with a file of its own append at the same time, and a buffered
    file could cut a long append into pieces with the other's line in between."""
    index, data = os.path.join(job_dir, INDEX), text.encode("utf-8")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        try:
            fd = os.open(index, flags, 0o644)
        except FileNotFoundError:  # the job's first line on this task executor
            os.makedirs(job_dir, exist_ok=True)
            fd = os.open(index, flags, 0o644)
        try:
            written = os.write(fd, data)
            while written < len(data):  # a write cut short (a signal, a nearly full disk)
                written += os.write(fd, data[written:])
        finally:
            os.close(fd)
    except OSError:
        pass  # best effort, as every write of the log


@dataclass(frozen=True, slots=True)
class _IndexRecord:
    key: AttemptKey
    file_start: int
    ended: bool
    inline: bytes | None = None  # the whole log of an attempt that has no file
    updated_at: float = 0.0


def _read_index(job_dir: Path, attempt_id: str = "") -> list[_IndexRecord]:
    """Each attempt of a job directory with where its file starts and whether it ended: the
    index's last line per attempt, and the ``.meta`` files of earlier versions (with
    ``attempt_id``: only lines that name it are parsed)."""
    found: dict[AttemptKey, _IndexRecord] = {}
    texts = []
    with contextlib.suppress(OSError):
        texts = [meta.read_text() for meta in sorted(job_dir.glob("*.meta"))]
    with contextlib.suppress(OSError):
        texts += (job_dir / INDEX).read_text().splitlines()
    for text in texts:
        if attempt_id not in text:
            continue
        record = _parse_meta(text)
        if record is not None:
            found[record.key] = record
    return list(found.values())


def _parse_meta(text: str) -> _IndexRecord | None:
    try:
        meta = json.loads(text)
        key = AttemptKey(
            job_id=str(meta["job_id"]),
            vertex_id=str(meta["vertex_id"]),
            vertex_name=str(meta["vertex_name"]),
            subtask_index=int(meta["subtask_index"]),
            attempt_number=int(meta["attempt_number"]),
            job_master_epoch=int(meta["job_master_epoch"]),
            attempt_id=str(meta["attempt_id"]),
        )
        inline = meta.get("text")
        return _IndexRecord(
            key,
            int(meta.get("file_start", 0)),
            bool(meta.get("ended", True)),
            inline.encode("utf-8") if isinstance(inline, str) else None,
            float(meta.get("updated_at", 0.0)),
        )
    except (ValueError, KeyError, TypeError):  # a line cut short by a crash, or not ours
        return None


# -- process-wide capture --------------------------------------------------------------------


class AttemptCapture(Protocol):
    """What :func:`install` captures into: this module's :class:`AttemptLogStore` in a task
    executor; in a pipeline worker, a sink that forwards each line to the task executor."""

    def bound(self) -> bool: ...

    def write_line(self, line: str) -> None: ...

    def write_stream(self, stream: str, text: str) -> bool: ...

    def write_attempt_line(self, attempt_id: str, stream: str, line: str) -> bool: ...


class _AttemptHandler(logging.Handler):
    """Copies every record logged on a bound task thread into its attempt's log."""

    def __init__(self, store: AttemptCapture) -> None:
        super().__init__(logging.DEBUG)
        self.store = store
        self.setFormatter(_FORMAT)

    def emit(self, record: logging.LogRecord) -> None:
        if not self.store.bound():
            return
        try:
            self.store.write_line(self.format(record))
        except Exception:
            self.handleError(record)


class CopyingStream(io.TextIOBase):
    """A text stream (``sys.stdout``/``sys.stderr``) whose writes go to ``inner`` as before and
    are handed to ``copy`` too; the copy never makes the user's write fail."""

    def __init__(self, inner: TextIO, copy: Callable[[str], object]) -> None:
        self._inner = inner
        self._copy = copy

    def write(self, text: str) -> int:
        written = self._inner.write(text)
        with contextlib.suppress(Exception):
            self._copy(text)
        return written

    def flush(self) -> None:
        self._inner.flush()

    def fileno(self) -> int:
        return self._inner.fileno()

    def isatty(self) -> bool:
        return self._inner.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", "utf-8")


class _TeeStream(CopyingStream):
    """sys.stdout / sys.stderr: a bound task thread's writes also go to its attempt's log."""

    def __init__(self, inner: TextIO, store: AttemptCapture, name: str) -> None:
        super().__init__(inner, functools.partial(store.write_stream, name))


_installed: AttemptCapture | None = None


def install(store: AttemptCapture) -> None:
    """Capture for ``store`` in this process: the root logger's records from bound threads and
    bound threads' stdout/stderr writes. Once per process (a second call replaces the store)."""
    global _installed
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _AttemptHandler)]:
        root.removeHandler(handler)
    root.addHandler(_AttemptHandler(store))
    if not isinstance(sys.stdout, _TeeStream):
        sys.stdout = _TeeStream(sys.stdout, store, "stdout")
    if not isinstance(sys.stderr, _TeeStream):
        sys.stderr = _TeeStream(sys.stderr, store, "stderr")
    _installed = store


def installed() -> AttemptCapture | None:
    """What this process captures into (None outside a task executor or pipeline worker)."""
    return _installed


def directory_for(configured: str, fallback_root: str) -> Path:
    """``taskmanager.log.attempt.dir``, or ``attempt-logs`` under ``fallback_root``."""
    return Path(configured) if configured else Path(fallback_root) / "attempt-logs"


def format_record(record: logging.LogRecord) -> str:
    """A log record as an attempt's log shows it."""
    return _FORMAT.format(record)


__all__ = [
    "AttemptCapture",
    "AttemptKey",
    "AttemptLogStore",
    "CopyingStream",
    "LogChunk",
    "directory_for",
    "install",
    "installed",
]
