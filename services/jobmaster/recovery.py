"""Taking over a running batch job without running its finished subtasks again.

The leading JobMaster records progress through :class:`ProgressRecorder` (a
:class:`~sparkmill.services.jobmaster.scheduler.default_scheduler.ProgressListener`): every
finished attempt, and every finished attempt that a restart made void, goes to this JobMaster
session's own progress log (:mod:`sparkmill.common.ha.progress_log`) in the order the scheduler saw
them - one writer, batched, off the event loop, each record numbered.

A JobMaster that takes the job over calls :func:`recover_finished_subtasks` before it
schedules anything. A recorded attempt is restored as FINISHED - its consumers read its
partitions, it never runs again - only if

* its result partitions are still readable under ``exchange.dir``;
* every producer it read from is restored too (a consumer's output is only valid with the very
  inputs it read);
* its whole pipelined region is restorable (regions run all or nothing).

Parallelisms decided while the job ran (its late vertices) are applied first, as recorded.
Everything else runs again as usual. Losing the log (or part of it) costs re-running, never
correctness: a subtask without a valid record simply runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping

from sparkmill.common.core.ids import ExecutionAttemptID, JobVertexID, ResourceID, short
from sparkmill.common.core.io_counters import NO_IO, IOCounters
from sparkmill.common.core.partitions import InputPartitionInfo
from sparkmill.common.exchange.layout import partition_readable
from sparkmill.common.ha.progress_log import (
    ADOPTED,
    BLOCKED,
    DECIDED,
    FINISHED,
    INVALIDATED,
    LEADER,
    FinishedAttempt,
    JobProgressStore,
    LogId,
    NoJobProgressStore,
    ProgressEvent,
    replay,
)
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    Execution,
    ExecutionGraph,
    ExecutionVertex,
)
from sparkmill.services.jobmaster.scheduler.default_scheduler import DefaultScheduler

log = logging.getLogger(__name__)

SubtaskKey = tuple[str, int]


class ProgressRecorder:
    """Appends the scheduler's progress to this session's log, in order, in batches."""

    def __init__(self, store: JobProgressStore, job_id: str, runtime: ServiceRuntime) -> None:
        self.store = store
        self.job_id = job_id
        self.runtime = runtime
        self.session_id = ""
        self.log: LogId | None = None
        self._seq = 0
        self._pending: list[ProgressEvent] = []
        self._writer: asyncio.Task[None] | None = None
        self.failed_writes = 0
        # Without HA nothing is kept: skip the work (and the thread hop per batch) entirely.
        self.enabled = not isinstance(store, NoJobProgressStore)
        # The fingerprint of the job's parallelisms (set once they are decided): attempts of
        # an earlier JobMaster are kept only if it ran the job with the same ones.
        self.layout = ""

    def start(self, session_id: str, epoch: int) -> None:
        """Open this leader's own log (named by its epoch, so successors read it in order)."""
        if not self.enabled:
            return
        self.session_id = session_id
        self.log = LogId(epoch, session_id)
        self._enqueue(ProgressEvent(LEADER, session_id, layout=self.layout))

    def adopt(self, trusted: dict[str, int]) -> None:
        """Record how far this JobMaster trusts each earlier log - before anything else it
        records, so a successor never trusts what a deposed predecessor appended later."""
        if self.session_id:
            self._enqueue(
                ProgressEvent(ADOPTED, self.session_id, trusted=tuple(sorted(trusted.items())))
            )

    def invalidate(self, subtasks: Iterable[SubtaskKey]) -> None:
        """Records of earlier JobMasters that this one does not use."""
        stale = tuple(subtasks)
        if self.session_id and stale:
            self._enqueue(ProgressEvent(INVALIDATED, self.session_id, subtasks=stale))

    def attempt_finished(
        self, execution: Execution, accumulator: bytes, io: IOCounters | None
    ) -> None:
        if not self.session_id:
            return
        vertex = execution.vertex
        attempt = FinishedAttempt(
            vertex.job_vertex.id,
            vertex.subtask_index,
            execution.attempt_id,
            execution.attempt_number,
            execution.task_executor_id,
            accumulator,
            io or NO_IO,
        )
        self._enqueue(ProgressEvent(FINISHED, self.session_id, attempt))

    def vertex_decided(
        self, vertex_id: JobVertexID, parallelism: int, reason: str, ranges: tuple[int, ...] = ()
    ) -> None:
        if self.session_id:
            decision = (vertex_id, parallelism, reason)
            self._enqueue(ProgressEvent(DECIDED, self.session_id, decision=decision, ranges=ranges))

    def blocklist_changed(self, until: Mapping[ResourceID, float]) -> None:
        if self.session_id:
            blocked = tuple(sorted(until.items()))
            self._enqueue(ProgressEvent(BLOCKED, self.session_id, blocked=blocked))

    def attempts_invalidated(self, vertices: list[ExecutionVertex]) -> None:
        if not self.session_id or not vertices:
            return
        keys = tuple((v.job_vertex.id, v.subtask_index) for v in vertices)
        self._enqueue(ProgressEvent(INVALIDATED, self.session_id, subtasks=keys))

    def stop(self) -> None:
        """Record nothing more (the job ended or this JobMaster was deposed)."""
        self.session_id = ""

    async def flush(self) -> None:
        """Wait until everything recorded so far is written (or its write failed)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.wait({self._writer})  # never raises: the runtime logs a failure

    @property
    def idle(self) -> bool:
        return not self._pending and (self._writer is None or self._writer.done())

    def _enqueue(self, event: ProgressEvent) -> None:
        self._seq += 1
        self._pending.append(dataclasses.replace(event, seq=self._seq))
        if self._writer is None or self._writer.done():
            self._writer = self.runtime.spawn(self._write(), "progress-log")

    async def _write(self) -> None:
        log_id = self.log
        assert log_id is not None, "progress recorded before the recorder was started"
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await self.runtime.run_blocking(self.store.append, self.job_id, log_id, batch)
            except OSError as exc:
                # Readers trust a log only up to its first missing record, so the batch is
                # written again with the next one (a part that did land is then a duplicate,
                # which readers skip). Until then, a JobMaster taking over would run those
                # subtasks again: progress is an optimisation.
                self.failed_writes += 1
                self._pending = batch + self._pending
                log.warning(
                    "job %s: %d progress events not recorded yet (%s); a JobMaster taking "
                    "over now would run those subtasks again",
                    short(self.job_id),
                    len(batch),
                    exc,
                )
                return


def _data_partitions(
    graph: ExecutionGraph, scheduler: DefaultScheduler, vertex: ExecutionVertex, attempt_id: str
) -> list[InputPartitionInfo]:
    return [
        InputPartitionInfo(p.result.id, p.partition_number, attempt_id, "")
        for p in vertex.produced_partitions
        if p.result.id not in scheduler.no_data_results
    ]


def plan_recovery(
    graph: ExecutionGraph,
    finished: dict[SubtaskKey, FinishedAttempt],
    readable: Callable[[ExecutionVertex, FinishedAttempt], bool],
) -> list[tuple[ExecutionVertex, FinishedAttempt]]:
    """Which recorded attempts to restore (see the module docstring). Pure but for
    ``readable``; O(vertices + partitions) per pass, one pass for all-blocking graphs."""
    candidates: dict[int, FinishedAttempt] = {}
    for vertex in graph.all_execution_vertices():
        record = finished.get((vertex.job_vertex.id, vertex.subtask_index))
        if record is not None and readable(vertex, record):
            candidates[id(vertex)] = record
    while True:
        restored: dict[int, FinishedAttempt] = {}
        group_ok: dict[int, bool] = {}
        for vertex in graph.all_execution_vertices():  # producers come first
            record = candidates.get(id(vertex))
            if record is None:
                continue
            inputs_ok = True
            for group in vertex.consumed_partition_groups:
                ok = group_ok.get(id(group))
                if ok is None:
                    ok = all(id(p.producer) in restored for p in group.partitions)
                    group_ok[id(group)] = ok
                if not ok:
                    inputs_ok = False
                    break
            if inputs_ok:
                restored[id(vertex)] = record
        dropped = False
        for region in graph.pipelined_regions():
            if any(id(v) in restored for v in region) and not all(
                id(v) in restored for v in region
            ):
                for v in region:
                    if candidates.pop(id(v), None) is not None:
                        dropped = True
        if not dropped:
            return [
                (v, restored[id(v)]) for v in graph.all_execution_vertices() if id(v) in restored
            ]


async def recover_finished_subtasks(
    graph: ExecutionGraph,
    scheduler: DefaultScheduler,
    recorder: ProgressRecorder,
    runtime: ServiceRuntime,
    exchange_dir: str,
    session_id: str,
    epoch: int,
) -> int:
    """Restore what an earlier JobMaster finished; returns how many subtasks were restored.
    Always opens ``recorder`` for ``session_id`` at ``epoch`` (also when nothing could be
    read)."""
    job_id = graph.job_id
    if not recorder.enabled:
        return 0
    first = False  # nothing was ever recorded for the job (known, not just unreadable)
    try:
        logs = await runtime.run_blocking(recorder.store.load, job_id)
        first = not logs
    except OSError as exc:
        log.warning(
            "job %s: progress log unreadable (%s); running it from the start", short(job_id), exc
        )
        logs = []
    # `leader` and `adopted` go to disk in one write (the writer starts once we yield).
    recorder.start(session_id, epoch)
    assert recorder.log is not None
    recovered = replay(logs, recorder.log, recorder.layout)
    recorder.adopt(recovered.trusted)
    if not first:
        # What we build on, on disk before we act: whatever a deposed JobMaster appends from
        # now on is past these marks, so no successor of ours will ever trust it.
        await recorder.flush()
    # Without any earlier log (a job's first JobMaster) there is nothing to build on, and the
    # job is deployed while the two records are written: readers trust no record of ours
    # before `adopted` (records are numbered), so dying before it lands loses only our own
    # progress, which costs re-running, never correctness - as losing any record does.
    if recovered.decisions:
        # Before anything is restored: the subtasks of a vertex decided while the job ran exist
        # only once its decision is applied.
        applied = scheduler.adaptive.apply_recorded(recovered.decisions, recovered.ranges)
        log.info("job %s: %d recorded parallelism decisions applied", short(job_id), applied)
    if recovered.blocked:
        scheduler.speculation.restore_blocklist(recovered.blocked)
    finished = recovered.finished
    if not finished:
        return 0
    # The file checks run off the loop; the graph is only read here, on the loop.
    to_check = {
        key: _data_partitions(
            graph, scheduler, graph.vertex(JobVertexID(key[0]), key[1]), record.attempt_id
        )
        for key, record in finished.items()
        if _known(graph, key)
    }

    def readable(part: InputPartitionInfo) -> bool:
        try:
            return partition_readable(exchange_dir, job_id, part)
        except OSError as exc:  # EACCES, ESTALE, EIO on a network file system...
            log.warning("job %s: cannot check %s: %s", short(job_id), part, exc)
            return False

    def check() -> set[SubtaskKey]:
        return {key for key, parts in to_check.items() if all(readable(p) for p in parts)}

    readable_keys = await runtime.run_blocking(check)
    plan = plan_recovery(
        graph,
        finished,
        lambda v, _record: (v.job_vertex.id, v.subtask_index) in readable_keys,
    )
    for vertex, record in plan:
        graph.restore_finished(
            vertex,
            ExecutionAttemptID(record.attempt_id),
            record.attempt_number,
            record.task_executor_id,
        )
        scheduler.restore_finished(vertex, record.accumulator, record.io)
    restored = {(v.job_vertex.id, v.subtask_index) for v, _ in plan}
    recorder.invalidate([k for k in finished if k not in restored])
    log.info(
        "job %s: %d of %d recorded finished subtasks restored (%d not readable any more or "
        "depending on such)",
        short(job_id),
        len(plan),
        len(finished),
        len(finished) - len(plan),
    )
    return len(plan)


def _known(graph: ExecutionGraph, key: SubtaskKey) -> bool:
    try:
        graph.vertex(JobVertexID(key[0]), key[1])
    except (KeyError, IndexError):
        return False
    return True
