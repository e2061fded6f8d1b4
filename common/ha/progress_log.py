"""The job progress store: which subtasks of a running job have finished, for the next JobMaster.

Flink restarts a batch job from scratch when its JobMaster fails over (until FLIP-383). Here
the leading JobMaster records an event whenever an attempt FINISHES and whenever finished
attempts become void (their region is restarted). A JobMaster that takes the job over replays
what its predecessors recorded and keeps the finished attempts whose results are still
readable, so only the rest runs again.

**One log per JobMaster session.** The logs live on ``high-availability.storageDir``, which may
be NFS, where appends are not atomic and two hosts appending to one file can interleave. So no
two writers ever share a file: each JobMaster writes only its own log,
``job-progress/{job}/{epoch}-{session}.log``, named by its leader epoch (from ZooKeeper,
strictly increasing across the job's JobMasters - never a clock) and its leader session id.

**Every record is written whole and checked**: a line is ``{length} {crc32} {json}`` and the
JSON carries the record's sequence number in its log (1, 2, ...). A reader trusts a log's
records up to the first one that is missing, torn or corrupt (a torn tail, a hole NFS shows
as zeros, bytes of two writes mixed); a duplicate (a batch written again after a failed
write) is skipped. Losing records costs re-running subtasks, never correctness.

**A deposed JobMaster can never add to what its successors trust.** A JobMaster taking over
reads every earlier log, then records ``leader`` and an ``adopted`` event saying exactly how
far it trusts each of them (the ``trusted`` map: log name -> last sequence number), before it
records anything else, and waits for both to be on disk before it deploys anything (a job's
first JobMaster, which finds no log at all, builds on nothing and does not wait). Replay starts
from the latest log that has such an event: the logs it adopted, each up to its mark, then
that log itself. Whatever a deposed JobMaster appends after its successor read its log is past
the mark and ignored forever; a JobMaster that was deposed before it adopted anything did
nothing a successor must keep, and its log is ignored.

**The blocklist of speculative execution is recorded** (``blocked``: every blocked task
executor with the wall-clock moment it is unblocked) whenever it changes; a successor keeps the
last one it trusts, so a slow machine stays blocked across a takeover.

**A parallelism decided while the job runs is recorded too** (``decided``), before any subtask
of its vertex is deployed, so it precedes every record of that vertex's attempts: a successor
that keeps any of them applies the same decision, and one that lost the decision keeps none.

Without HA there is no second JobMaster to hand over to, and :class:`NoJobProgressStore` keeps
nothing.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparkmill.common.core.io_counters import NO_IO, IOCounters

log = logging.getLogger(__name__)

LEADER = "leader"
ADOPTED = "adopted"
FINISHED = "finished"
INVALIDATED = "invalidated"
DECIDED = "decided"
BLOCKED = "blocked"
_KINDS = (LEADER, ADOPTED, FINISHED, INVALIDATED, DECIDED, BLOCKED)


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
    kind: str  # LEADER | ADOPTED | FINISHED | INVALIDATED | DECIDED | BLOCKED
    session_id: str
    attempt: FinishedAttempt | None = None  # FINISHED
    subtasks: tuple[tuple[str, int], ...] = field(default=())  # INVALIDATED: (vertex, subtask)
    # ADOPTED: (log name, last trusted sequence number) of every earlier log this one builds on
    trusted: tuple[tuple[str, int], ...] = field(default=())
    seq: int = 0  # position in its session's log, from 1 (given by the writer)
    # LEADER: the fingerprint of the parallelisms the session ran the job with; a successor
    # with other parallelisms keeps none of its finished attempts ("" = not recorded).
    layout: str = ""
    # DECIDED: a vertex's parallelism decided while the job ran (vertex id, number, why).
    decision: tuple[str, int, str] | None = None
    # DECIDED: the sub-partition ranges its subtasks read, when balanced by bytes (n + 1), and
    # its skewed sub-partitions split across subtasks (a ReadPlan's flat form, see
    # common/exchange/skewed_splits.py).
    ranges: tuple[int, ...] = field(default=())
    # BLOCKED: the whole blocklist, (task executor resource id, unblocked at: wall-clock s).
    blocked: tuple[tuple[str, float], ...] = field(default=())

    def to_json(self) -> str:
        record: dict[str, Any] = {"kind": self.kind, "session": self.session_id, "seq": self.seq}
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
        if self.kind == ADOPTED:
            record["trusted"] = dict(self.trusted)
        if self.layout:
            record["layout"] = self.layout
        if self.decision is not None:
            record["vertex"], record["parallelism"], record["reason"] = self.decision
        if self.ranges:
            record["ranges"] = list(self.ranges)
        if self.kind == BLOCKED:
            record["blocked"] = dict(self.blocked)
        return json.dumps(record, separators=(",", ":"))

    @staticmethod
    def from_json(line: str) -> ProgressEvent:
        """Raises ``ValueError`` (or ``KeyError``/``TypeError``) for a line that is not one."""
        record = json.loads(line)
        kind = record["kind"]
        if kind not in _KINDS:
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
        decision = None
        if kind == DECIDED:
            decision = (str(record["vertex"]), int(record["parallelism"]), str(record["reason"]))
        subtasks = tuple((str(v), int(i)) for v, i in record.get("subtasks", ()))
        trusted = tuple(sorted((str(k), int(n)) for k, n in record.get("trusted", {}).items()))
        blocked = tuple(sorted((str(k), float(u)) for k, u in record.get("blocked", {}).items()))
        ranges = tuple(int(b) for b in record.get("ranges", ()))
        return ProgressEvent(
            kind,
            str(record["session"]),
            attempt,
            subtasks,
            trusted,
            int(record["seq"]),
            str(record.get("layout", "")),
            decision,
            ranges,
            blocked,
        )

    def to_record(self) -> bytes:
        """One line of a log: ``{length} {crc32} {json}\\n``, checkable on its own."""
        payload = self.to_json().encode("utf-8")
        return b"%d %08x %s\n" % (len(payload), zlib.crc32(payload), payload)

    @staticmethod
    def from_record(line: bytes) -> ProgressEvent:
        """Raises ``ValueError`` (or ``KeyError``/``TypeError``) unless ``line`` (without its
        newline) is one whole, intact record."""
        length, crc, payload = line.split(b" ", 2)
        if len(payload) != int(length) or zlib.crc32(payload) != int(crc, 16):
            raise ValueError("torn or corrupt record (length or checksum does not match)")
        return ProgressEvent.from_json(payload.decode("utf-8"))


@dataclass(frozen=True, slots=True)
class LogId:
    """One JobMaster session's log: ordered by the leader epoch, named by epoch and session."""

    epoch: int
    session_id: str

    @property
    def name(self) -> str:
        return f"{self.epoch:020d}-{self.session_id}"

    @staticmethod
    def parse(name: str) -> LogId | None:
        epoch, _, session = name.partition("-")
        return LogId(int(epoch), session) if epoch.isdigit() and session else None


@dataclass(frozen=True, slots=True)
class SessionLog:
    """What one JobMaster session wrote, as read (in file order, possibly with gaps)."""

    id: LogId
    events: list[ProgressEvent]


def trusted_prefix(log: SessionLog) -> list[ProgressEvent]:
    """The log's records up to the first missing one: sequence numbers 1, 2, ... without a
    gap, duplicates skipped, records naming another session (misplaced) ignored."""
    prefix: list[ProgressEvent] = []
    for event in log.events:
        if event.session_id != log.id.session_id or event.seq <= len(prefix):
            continue
        if event.seq != len(prefix) + 1:
            break  # a record is missing here: nothing after it can be trusted
        prefix.append(event)
    return prefix


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a JobMaster taking over builds on: the valid finished attempts, and how far it
    trusts each earlier log (recorded in its ``adopted`` event)."""

    finished: dict[tuple[str, int], FinishedAttempt]
    trusted: dict[str, int]
    # Vertex id -> (parallelism, why) of the vertices decided while the job ran.
    decisions: dict[str, tuple[int, str]] = field(default_factory=dict)
    # Vertex id -> the sub-partition ranges recorded with its decision (when balanced).
    ranges: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # The last recorded blocklist: task executor resource id -> unblocked at (wall-clock s).
    blocked: dict[str, float] = field(default_factory=dict)


def replay(logs: list[SessionLog], own: LogId | None = None, layout: str = "") -> Recovered:
    """The finished attempts that are still valid, by (vertex id, subtask index), as the logs
    of every JobMaster before ``own`` left them (see the module docstring). With ``layout``,
    the attempts of a session that recorded another layout (other parallelisms) are not."""
    earlier = sorted(
        (log for log in logs if own is None or (log.id.epoch, log.id.name) < (own.epoch, own.name)),
        key=lambda log: (log.id.epoch, log.id.name),
    )
    prefixes = {log.id.name: trusted_prefix(log) for log in earlier}
    trusted: dict[str, int] = {}
    for log in reversed(earlier):
        prefix = prefixes[log.id.name]
        adopted = next((e for e in prefix if e.kind == ADOPTED), None)
        if adopted is not None:
            trusted = {name: last for name, last in adopted.trusted if name in prefixes}
            trusted[log.id.name] = len(prefix)
            break
    finished: dict[tuple[str, int], FinishedAttempt] = {}
    decisions: dict[str, tuple[int, str]] = {}
    blocked: dict[str, float] = {}
    ranges: dict[str, tuple[int, ...]] = {}
    for log in earlier:
        events = prefixes[log.id.name][: trusted.get(log.id.name, 0)]
        recorded = next((e.layout for e in events if e.kind == LEADER), "")
        same_layout = not (layout and recorded) or recorded == layout
        for event in events:
            if event.kind == FINISHED and event.attempt is not None and same_layout:
                a = event.attempt
                finished[(a.vertex_id, a.subtask_index)] = a
            elif event.kind == INVALIDATED:
                for key in event.subtasks:
                    finished.pop(key, None)
            elif event.kind == DECIDED and event.decision is not None and same_layout:
                # The first decision stands: a successor applies it rather than deciding again.
                vertex_id, parallelism, reason = event.decision
                if vertex_id not in decisions:
                    decisions[vertex_id] = (parallelism, reason)
                    if event.ranges:
                        ranges[vertex_id] = event.ranges
            elif event.kind == BLOCKED:
                blocked = dict(event.blocked)
    return Recovered(finished, trusted, decisions, ranges, blocked)


class JobProgressStore(Protocol):
    def load(self, job_id: str) -> list[SessionLog]:
        """Every session log of the job as it reads now (empty when there is none). Blocking."""
        ...

    def append(self, job_id: str, log: LogId, events: list[ProgressEvent]) -> None:
        """Append ``events`` to the session's own log, in order. Blocking; raises ``OSError``."""
        ...

    def remove(self, job_id: str) -> None:
        """Forget the job (it reached a globally terminal state). Blocking, idempotent."""
        ...


class NoJobProgressStore:
    """Keeps nothing (standalone mode: no JobMaster ever takes a job over)."""

    def load(self, job_id: str) -> list[SessionLog]:
        return []

    def append(self, job_id: str, log: LogId, events: list[ProgressEvent]) -> None:
        pass

    def remove(self, job_id: str) -> None:
        pass


class InMemoryJobProgressStore:
    """For tests: the logs in a dict, shared by every JobMaster given the same instance."""

    def __init__(self) -> None:
        self.logs: dict[str, dict[LogId, list[ProgressEvent]]] = {}

    def load(self, job_id: str) -> list[SessionLog]:
        logs = self.logs.get(job_id, {})
        return [SessionLog(log, list(logs[log])) for log in sorted(logs, key=lambda i: i.name)]

    def events(self, job_id: str) -> list[ProgressEvent]:
        """Every event of the job, log after log (for assertions)."""
        return [event for log in self.load(job_id) for event in log.events]

    def append(self, job_id: str, log: LogId, events: list[ProgressEvent]) -> None:
        self.logs.setdefault(job_id, {}).setdefault(log, []).extend(events)

    def remove(self, job_id: str) -> None:
        self.logs.pop(job_id, None)


class FileJobProgressStore:
    """A directory per job under ``directory`` (on the HA storage directory), one file per
    JobMaster session in it: ``{job}/{epoch}-{session}.log``."""

    SUFFIX = ".log"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _job_dir(self, job_id: str) -> Path:
        if not _safe_name(job_id):
            raise ValueError(f"invalid job id {job_id!r}")
        return self.directory / job_id

    def _path(self, job_id: str, log: LogId) -> Path:
        if not _safe_name(log.session_id):
            raise ValueError(f"invalid leader session id {log.session_id!r}")
        return self._job_dir(job_id) / f"{log.name}{self.SUFFIX}"

    def load(self, job_id: str) -> list[SessionLog]:
        try:
            paths = sorted(self._job_dir(job_id).iterdir())
        except FileNotFoundError:
            return []
        logs: list[SessionLog] = []
        for path in paths:
            log_id = LogId.parse(path.name.removesuffix(self.SUFFIX))
            if path.suffix != self.SUFFIX or log_id is None:
                continue
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            logs.append(SessionLog(log_id, _records(path, data)))
        return logs

    def append(self, job_id: str, log: LogId, events: list[ProgressEvent]) -> None:
        if not events:
            return
        path = self._path(job_id, log)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = b"".join(event.to_record() for event in events)
        # Only this session ever writes this file, so writes never interleave; O_APPEND
        # is not relied upon for anything more.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # A torn last record (a failed write): end it, or our first record would be
                # glued to it and lost with it.
                data = b"\n" + data
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(f"short write to {path}: {written} of {len(data)} bytes")
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, job_id: str) -> None:
        job_dir = self._job_dir(job_id)
        shutil.rmtree(job_dir, ignore_errors=True)
        # The single-file log of earlier versions.
        (self.directory / f"{job_id}.jsonl").unlink(missing_ok=True)


def _safe_name(name: str) -> bool:
    return bool(name) and "/" not in name and not name.startswith(".")


def _records(path: Path, data: bytes) -> list[ProgressEvent]:
    """The intact records of a log, in file order; torn or corrupt lines are skipped."""
    events: list[ProgressEvent] = []
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip(b"\0 \t\r"):
            continue
        try:
            events.append(ProgressEvent.from_record(line))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            # A torn last line (the writer died mid-append) is expected; anything else is
            # worth a warning but must not stop the recovery.
            if number < len(lines):
                log.warning("%s:%d: skipping an unreadable progress record: %s", path, number, exc)
    return events


__all__ = [
    "FileJobProgressStore",
    "FinishedAttempt",
    "InMemoryJobProgressStore",
    "JobProgressStore",
    "LogId",
    "NoJobProgressStore",
    "ProgressEvent",
    "Recovered",
    "SessionLog",
    "replay",
    "trusted_prefix",
]
