"""The job progress store: which subtasks of a running job have finished, for the next JobMaster.

Flink restarts a batch job from scratch when its JobMaster fails over (until FLIP-383). Here
the leading JobMaster appends an event to the job's progress log whenever an attempt FINISHES
and whenever finished attempts become void (their region is restarted). A JobMaster that takes
the job over replays the log and keeps the finished attempts whose results are still readable,
so only the rest runs again.

The log is a file of JSON lines per job under ``{high-availability.storageDir}/job-progress``,
appended with one ``write`` per batch. Each JobMaster starts its stretch of the log with a
``leader`` event carrying its leader session id - written and flushed before it reads the log -
and replay ignores events of any other session that come after it. A deposed JobMaster that has
not noticed yet may still append, but its late events never override the new leader's view.
(Appends rely on ``O_APPEND`` writes not interleaving, true of local file systems; on NFS,
which has no atomic append, a torn or interleaved line is skipped: a lost ``finished`` event
costs re-running that subtask; a lost ``invalidated`` one can bring back an attempt a restart
had voided - a complete output of its subtask, restored only if still readable.)

Without HA there is no second JobMaster to hand over to, and :class:`NoJobProgressStore` keeps
nothing.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparkmill.common.io_counters import NO_IO, IOCounters

log = logging.getLogger(__name__)

LEADER = "leader"
FINISHED = "finished"
INVALIDATED = "invalidated"


@dataclass(frozen=True, slots=True)
class FinishedAttempt:
    """One finished attempt of one subtask, as the JobMaster that ran it recorded it."""

    vertex_id: str
    subtask_index: int
    attempt_id: str
    attempt_number: int
    task_executor_id: str
    accumulator: bytes = b""
    io: IOCounters = NO_IO


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    kind: str  # LEADER | FINISHED | INVALIDATED
    session_id: str
    attempt: FinishedAttempt | None = None  # FINISHED
    subtasks: tuple[tuple[str, int], ...] = field(default=())  # INVALIDATED: (vertex, subtask)

    def to_json(self) -> str:
        record: dict[str, Any] = {"kind": self.kind, "session": self.session_id}
        if self.attempt is not None:
            a = self.attempt
            record.update(
                vertex=a.vertex_id,
                subtask=a.subtask_index,
                attempt=a.attempt_id,
                number=a.attempt_number,
                te=a.task_executor_id,
                io=list(a.io.as_tuple()),
            )
            if a.accumulator:
                record["acc"] = base64.b64encode(a.accumulator).decode("ascii")
        if self.subtasks:
            record["subtasks"] = [list(s) for s in self.subtasks]
        return json.dumps(record, separators=(",", ":"))

    @staticmethod
    def from_json(line: str) -> ProgressEvent:
        """Raises ``ValueError`` (or ``KeyError``/``TypeError``) for a line that is not one."""
        record = json.loads(line)
        kind = record["kind"]
        if kind not in (LEADER, FINISHED, INVALIDATED):
            raise ValueError(f"unknown progress event kind {kind!r}")
        attempt = None
        if kind == FINISHED:
            io = tuple(int(x) for x in record.get("io", (0, 0, 0, 0)))
            if len(io) != 4:
                raise ValueError("io must have four counters")
            attempt = FinishedAttempt(
                str(record["vertex"]),
                int(record["subtask"]),
                str(record["attempt"]),
                int(record["number"]),
                str(record.get("te", "")),
                base64.b64decode(record["acc"]) if "acc" in record else b"",
                IOCounters(*io),
            )
        subtasks = tuple((str(v), int(i)) for v, i in record.get("subtasks", ()))
        return ProgressEvent(kind, str(record["session"]), attempt, subtasks)


def replay(events: list[ProgressEvent]) -> dict[tuple[str, int], FinishedAttempt]:
    """The finished attempts that are still valid, by (vertex id, subtask index).

    Events of a session other than the one that wrote the latest ``leader`` event before them
    are stale (a deposed JobMaster) and ignored.
    """
    current: str | None = None
    finished: dict[tuple[str, int], FinishedAttempt] = {}
    for event in events:
        if event.kind == LEADER:
            current = event.session_id
            continue
        if event.session_id != current:
            continue
        if event.kind == FINISHED and event.attempt is not None:
            a = event.attempt
            finished[(a.vertex_id, a.subtask_index)] = a
        elif event.kind == INVALIDATED:
            for key in event.subtasks:
                finished.pop(key, None)
    return finished


class JobProgressStore(Protocol):
    def load(self, job_id: str) -> list[ProgressEvent]:
        """Every event of the job's log, oldest first (empty when there is none). Blocking."""
        ...

    def append(self, job_id: str, events: list[ProgressEvent]) -> None:
        """Append ``events`` in order. Blocking; raises ``OSError``."""
        ...

    def remove(self, job_id: str) -> None:
        """Forget the job (it reached a globally terminal state). Blocking, idempotent."""
        ...


class NoJobProgressStore:
    """Keeps nothing (standalone mode: no JobMaster ever takes a job over)."""

    def load(self, job_id: str) -> list[ProgressEvent]:
        return []

    def append(self, job_id: str, events: list[ProgressEvent]) -> None:
        pass

    def remove(self, job_id: str) -> None:
        pass


class InMemoryJobProgressStore:
    """For tests: the log in a dict, shared by every JobMaster given the same instance."""

    def __init__(self) -> None:
        self.logs: dict[str, list[ProgressEvent]] = {}

    def load(self, job_id: str) -> list[ProgressEvent]:
        return list(self.logs.get(job_id, ()))

    def append(self, job_id: str, events: list[ProgressEvent]) -> None:
        self.logs.setdefault(job_id, []).extend(events)

    def remove(self, job_id: str) -> None:
        self.logs.pop(job_id, None)


class FileJobProgressStore:
    """One JSON-lines file per job under ``directory`` (on the HA storage directory)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, job_id: str) -> Path:
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise ValueError(f"invalid job id {job_id!r}")
        return self.directory / f"{job_id}.jsonl"

    def load(self, job_id: str) -> list[ProgressEvent]:
        path = self._path(job_id)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        events: list[ProgressEvent] = []
        lines = text.split("\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                events.append(ProgressEvent.from_json(line))
            except (ValueError, KeyError, TypeError) as exc:
                # A torn last line (the writer died mid-append) loses only that batch's tail;
                # anything else is worth a warning but must not stop the recovery.
                if number < len(lines):
                    log.warning(
                        "%s:%d: skipping an unreadable progress event: %s", path, number, exc
                    )
        return events

    def append(self, job_id: str, events: list[ProgressEvent]) -> None:
        if not events:
            return
        path = self._path(job_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(event.to_json() + "\n" for event in events).encode("utf-8")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # A torn last line (a writer died, a disk ran full): end it, or our first
                # event would be glued to it and lost with it.
                data = b"\n" + data
            # One write per batch: concurrent appenders (a deposed JobMaster) never interleave
            # within a line on a local file system.
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(f"short write to {path}: {written} of {len(data)} bytes")
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, job_id: str) -> None:
        self._path(job_id).unlink(missing_ok=True)


__all__ = [
    "FileJobProgressStore",
    "FinishedAttempt",
    "InMemoryJobProgressStore",
    "JobProgressStore",
    "NoJobProgressStore",
    "ProgressEvent",
    "replay",
]
