"""Speculative execution of slow subtasks (Flink's ``SpeculativeScheduler``, FLIP-168) and the
blocklist of slow task executors (FLIP-224).

Every ``slow-task-detector.check-interval`` the :class:`SlowTaskDetector` (Flink's
``ExecutionTimeBasedSlowTaskDetector``) looks at each job vertex whose every input and output is
BLOCKING (a pipelined region's subtasks run only together) and that has at least
``baseline-ratio`` of its subtasks FINISHED. Its baseline is the median time of those subtasks,
from deployment to the end, times ``baseline-multiplier``, and never less than
``baseline-lower-bound``; a live attempt (deployed, not finished) that has run longer is slow.

For every subtask with a slow attempt, :class:`SpeculativeExecution`:

* blocks the task executors of its slow attempts for ``block-slow-node-duration``: no new slot
  of the job comes from them (idle ones are freed), neither for speculative attempts nor for
  the job's other subtasks;
* starts one more attempt (up to ``max-concurrent-executions`` racing ones) in a slot of its
  own, on a task executor none of the subtask's attempts runs on.

The first attempt to FINISH becomes the subtask's current attempt (consumers read its output,
and its accumulators and counters count); the others are cancelled. A racing attempt that fails
fails alone while another one still runs: only the last one's failure goes to the restart
strategy. A sink commits exactly one attempt's output per subtask (see the task executor's
``sinks`` module: the job commit claims one committed directory per subtask).

Everything here runs on the job master's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sparkmill.common.core.ids import JobVertexID, ResourceID, is_valid_name_id, short
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.jobgraph.model import ResultPartitionType
from sparkmill.common.runtime.settings import SpeculativeSettings
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    Execution,
    ExecutionGraph,
    ExecutionJobVertex,
    ExecutionVertex,
)

log = logging.getLogger(__name__)

ES = ExecutionState
_DEPLOYED = frozenset({ES.DEPLOYING, ES.INITIALIZING, ES.RUNNING})
_RACING = frozenset({ES.CREATED, ES.SCHEDULED, *_DEPLOYED})


def racing_attempts(vertex: ExecutionVertex) -> Iterator[Execution]:
    """The subtask's attempts still in the race: live and not being cancelled."""
    if vertex.current_execution.state in _RACING:
        yield vertex.current_execution
    for execution in vertex.speculative_executions:
        if execution.state in _RACING:
            yield execution


def _run_time(execution: Execution, now: float) -> float | None:
    """Seconds since the attempt was deployed (until it finished); None if never deployed."""
    deployed = execution.state_timestamp(ES.DEPLOYING)
    if deployed is None:
        return None
    finished = execution.state_timestamp(ES.FINISHED)
    return (finished if finished is not None else now) - deployed


def may_speculate(vertex: ExecutionJobVertex) -> bool:
    """Only a subtask that is a pipelined region of its own can run twice at once."""
    results = (*vertex.produced_results, *vertex.inputs)
    return vertex.initialized and all(
        r.result_type is ResultPartitionType.BLOCKING for r in results
    )


class SlowTaskDetector:
    """Finds the attempts that run much longer than their vertex's finished subtasks."""

    def __init__(self, settings: SpeculativeSettings) -> None:
        self.settings = settings

    def baseline(self, vertex: ExecutionJobVertex, now: float) -> float | None:
        """How long an attempt of ``vertex`` may run before it is slow; None while too few of
        its subtasks have finished to tell."""
        times = [
            t
            for v in vertex.task_vertices
            if v.current_execution.state is ES.FINISHED
            and (t := _run_time(v.current_execution, now)) is not None
        ]
        needed = max(1, math.ceil(self.settings.baseline_ratio * vertex.parallelism))
        if len(times) < needed:
            return None
        median = statistics.median(times) * self.settings.baseline_multiplier
        return max(self.settings.baseline_lower_bound_s, median)

    def slow_attempts(
        self, graph: ExecutionGraph, now: float
    ) -> dict[ExecutionVertex, list[Execution]]:
        """Per subtask with a slow attempt, its slow attempts. O(subtasks)."""
        found: dict[ExecutionVertex, list[Execution]] = {}
        for job_vertex in graph.job_vertices:
            if not may_speculate(job_vertex):
                continue
            baseline = self.baseline(job_vertex, now)
            if baseline is None:
                continue
            for vertex in job_vertex.task_vertices:
                slow = [
                    e
                    for e in racing_attempts(vertex)
                    if e.state in _DEPLOYED and (_run_time(e, now) or 0.0) > baseline
                ]
                if slow:
                    found[vertex] = slow
        return found


@dataclass
class Blocklist:
    """Task executors that get no new slot of the job until a moment (wall-clock seconds)."""

    until: dict[ResourceID, float] = field(default_factory=dict)

    def block(self, resource_id: ResourceID, until: float) -> bool:
        """Block ``resource_id`` until ``until`` (a later block extends it); True if new."""
        new = resource_id not in self.until
        self.until[resource_id] = max(until, self.until.get(resource_id, 0.0))
        return new

    def expire(self, now: float) -> bool:
        """Unblock what is due; True if anything was."""
        due = [r for r, until in self.until.items() if until <= now]
        for resource_id in due:
            del self.until[resource_id]
        return bool(due)

    def blocked(self) -> frozenset[ResourceID]:
        return frozenset(self.until)


class SpeculationHost(Protocol):
    """What :class:`SpeculativeExecution` needs from the scheduler."""

    def start_speculative_attempt(
        self, execution: Execution, excluded: frozenset[ResourceID]
    ) -> None: ...

    def cancel_attempt(self, execution: Execution) -> None: ...

    def blocklist_changed(self, blocked: frozenset[ResourceID]) -> None: ...


class SpeculativeExecution:
    """Starts speculative attempts of slow subtasks and keeps the blocklist; see the module
    docstring. Disabled (``settings.enabled`` off), it does nothing at all."""

    def __init__(
        self,
        graph: ExecutionGraph,
        settings: SpeculativeSettings,
        host: SpeculationHost,
        clock: Callable[[], float],
    ) -> None:
        self.graph = graph
        self.settings = settings
        self.detector = SlowTaskDetector(settings)
        self.blocklist = Blocklist()
        self._host = host
        self._clock = clock
        self._timer: asyncio.TimerHandle | None = None
        # Per job vertex: speculative attempts started, and those that finished first.
        self.attempts_started: Counter[JobVertexID] = Counter()
        self.attempts_won: Counter[JobVertexID] = Counter()

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def start(self) -> None:
        if self.enabled and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                self.settings.check_interval_s, self._tick
            )

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        self._timer = None
        try:
            self.check()
        except Exception:  # a bug here must not stop the checks nor break the loop
            log.exception("BUG: the slow-task check of job %s raised", short(self.graph.job_id))
        self.start()

    def check(self) -> None:
        """One round: expire blocks, find slow attempts, block and speculate."""
        now = self._clock()
        changed = self.blocklist.expire(now)
        slow = self.detector.slow_attempts(self.graph, now)
        duration = self.settings.block_duration_s
        for execution in (e for attempts in slow.values() for e in attempts):
            where = ResourceID(execution.task_executor_id)
            if duration > 0 and where and self.blocklist.block(where, now + duration):
                changed = True
                log.info(
                    "job %s: blocking task executor %s for %gs: %s is slow",
                    short(self.graph.job_id),
                    short(where),
                    duration,
                    execution.description,
                )
        if changed:
            self._host.blocklist_changed(self.blocklist.blocked())
        for vertex in slow:
            racing = list(racing_attempts(vertex))
            if len(racing) >= self.settings.max_concurrent_executions:
                continue
            excluded = frozenset(
                ResourceID(e.task_executor_id) for e in racing if e.task_executor_id
            )
            execution = self.graph.add_speculative_execution(vertex)
            self.attempts_started[vertex.job_vertex.id] += 1
            log.info(
                "job %s: %s is slow; starting %s",
                short(self.graph.job_id),
                racing[0].description,
                execution.description,
            )
            self._host.start_speculative_attempt(execution, excluded)

    def restore_blocklist(self, until: Mapping[str, float]) -> None:
        """Block what an earlier JobMaster of the job blocked (what has not expired yet), for
        no longer than this JobMaster would block it itself."""
        now = self._clock()
        latest = now + self.settings.block_duration_s
        for resource_id, moment in until.items():
            if moment > now and is_valid_name_id(resource_id):
                self.blocklist.block(ResourceID(resource_id), min(moment, latest))
        if self.blocklist.until:
            log.info(
                "job %s: task executors still blocked by an earlier JobMaster: %s",
                short(self.graph.job_id),
                ", ".join(short(r) for r in sorted(self.blocklist.until)),
            )
            self._host.blocklist_changed(self.blocklist.blocked())

    def before_finished(self, execution: Execution) -> None:
        """``execution`` is about to be FINISHED: it wins its subtask's race (it becomes the
        current attempt if it was a speculative one) and every other attempt is cancelled."""
        vertex = execution.vertex
        if execution.is_speculative:
            loser = self.graph.make_current(execution)
            self.attempts_won[vertex.job_vertex.id] += 1
            log.info(
                "job %s: %s finished first; cancelling %s",
                short(self.graph.job_id),
                execution.description,
                loser.description,
            )
        for other in list(vertex.speculative_executions):
            self._host.cancel_attempt(other)

    def absorbs_failure(self, execution: Execution) -> bool:
        """Whether ``execution``'s failure stays its own: another attempt of the subtask is
        still racing. If ``execution`` was the current attempt, a racing one takes its place."""
        vertex = execution.vertex
        others = [e for e in racing_attempts(vertex) if e is not execution]
        if not others:
            return False
        if not execution.is_speculative:
            self.graph.make_current(others[0])
        return True


__all__ = [
    "Blocklist",
    "SlowTaskDetector",
    "SpeculationHost",
    "SpeculativeExecution",
    "may_speculate",
    "racing_attempts",
]
