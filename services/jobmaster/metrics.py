"""Metrics of a job-master process: its jobs by status, restarts, running time, tasks by
execution state, and the scheduling and deployment latency of task attempts.

Everything is read from the hosted :class:`JobMaster` objects when scraped:

* per-job gauges come from ``JobMaster.status``, ``scheduler.restarts`` and
  ``graph.state_counts()`` (the numbers ``GetJobDetails`` / ``sparkmill jobs status`` report);
* latencies come from each attempt's ``Execution.state_timestamps``: scheduling latency is
  SCHEDULED → DEPLOYING (waiting for a slot), deployment latency DEPLOYING → RUNNING. Every
  attempt (including superseded ones) is observed once.

The collector learns about a JobMaster when the process stores it in ``job_masters`` (a dict that
tells the collector about insertions), so even a job shorter than a scrape interval is seen. A job
that left the process (it ended, or was suspended) is read one last time and its final numbers are
kept for :data:`~sparkmill.common.runtime.metrics.ENDED_JOB_RETENTION_S`, then its series are
dropped. Per-job series come only from the JobMaster that leads the job (it has a session id);
standby JobMasters (ZooKeeper HA) are only counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import Histogram
from prometheus_client.core import Metric

from sparkmill.common.core.ids import ExecutionAttemptID, JobID
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.common.runtime.metrics import (
    ENDED_JOB_RETENTION_S,
    LATENCY_BUCKETS,
    PREFIX,
    ProcessMetrics,
    RetainedCounter,
    counter,
    gauge,
    one_hot,
)
from sparkmill.services.jobmaster.job_master import JobMaster
from sparkmill.services.jobmaster.service import JobMasterProcess

ES = ExecutionState


@dataclass(slots=True)
class _JobSnapshot:
    job_id: str
    name: str
    status: JobStatus
    restarts: int
    running_time_s: float
    tasks: dict[ExecutionState, int]
    speculative_attempts: int = 0
    speculative_wins: int = 0
    blocked_task_executors: int = 0


def _snapshot(jm: JobMaster) -> _JobSnapshot:
    end = jm.ended_at or time.time()
    speculation = jm.scheduler.speculation
    return _JobSnapshot(
        jm.job_id,
        jm.job_graph.name,
        jm.status,
        jm.scheduler.restarts,
        max(0.0, end - jm.submitted_at),
        jm.graph.state_counts(),
        sum(speculation.attempts_started.values()),
        sum(speculation.attempts_won.values()),
        len(speculation.blocklist.until),
    )


@dataclass(eq=False, slots=True)
class _Tracked:
    jm: JobMaster
    scheduling_seen: set[ExecutionAttemptID] = field(default_factory=set)
    done: set[ExecutionAttemptID] = field(default_factory=set)


class _JobMasters(dict[JobID, JobMaster]):
    """``JobMasterProcess.job_masters`` that tells the collector about every JobMaster stored."""

    def __init__(self, initial: dict[JobID, JobMaster], on_store: Callable[[JobMaster], None]):
        super().__init__(initial)
        self._on_store = on_store

    def __setitem__(self, key: JobID, value: JobMaster) -> None:
        super().__setitem__(key, value)
        self._on_store(value)


class JobMasterCollector:
    def __init__(
        self,
        process: JobMasterProcess,
        scheduling: Histogram,
        deployment: Histogram,
        retention_s: float = ENDED_JOB_RETENTION_S,
    ) -> None:
        self.process = process
        self.scheduling = scheduling
        self.deployment = deployment
        self.retention_s = retention_s
        self._tracked: dict[int, _Tracked] = {}  # by id(JobMaster): a job may come back
        self._ended: dict[str, tuple[float, _JobSnapshot]] = {}
        self._heartbeat_timeouts = RetainedCounter()

    def track(self, jm: JobMaster) -> None:
        self._tracked.setdefault(id(jm), _Tracked(jm))

    # -- latencies ------------------------------------------------------------------------------

    def _observe(self, tracked: _Tracked) -> None:
        for vertex in tracked.jm.graph.all_execution_vertices():
            for execution in (*vertex.prior_executions, vertex.current_execution):
                attempt = execution.attempt_id
                if attempt in tracked.done:
                    continue
                stamps = execution.state_timestamps
                deploying = stamps.get(ES.DEPLOYING)
                if deploying is not None and attempt not in tracked.scheduling_seen:
                    scheduled = stamps.get(ES.SCHEDULED)
                    if scheduled is not None:
                        self.scheduling.observe(max(0.0, deploying - scheduled))
                    tracked.scheduling_seen.add(attempt)
                running = stamps.get(ES.RUNNING)
                if deploying is not None and running is not None:
                    self.deployment.observe(max(0.0, running - deploying))
                if running is not None or execution.state.is_terminal:
                    tracked.done.add(attempt)
                    tracked.scheduling_seen.discard(attempt)

    def _refresh(self) -> tuple[list[_JobSnapshot], int]:
        """Observe new latencies; retire JobMasters that left the process. Returns the leading
        JobMasters' snapshots and the number of standby JobMasters (ZooKeeper HA: they wait for
        the job's leadership and have run nothing)."""
        hosted = {id(jm) for jm in self.process.job_masters.values()}
        for jm in self.process.job_masters.values():
            self.track(jm)
        live: list[_JobSnapshot] = []
        standby = 0
        now = time.monotonic()
        for key, tracked in list(self._tracked.items()):
            jm = tracked.jm
            self._observe(tracked)
            if key in hosted:
                if jm.session_id:
                    live.append(_snapshot(jm))
                else:
                    standby += 1
                continue
            del self._tracked[key]
            self._heartbeat_timeouts.retire(jm.heartbeats.timeouts_total)
            if jm.session_id:
                snapshot = _snapshot(jm)
                self._ended[snapshot.job_id] = (now, snapshot)
        live_ids = {s.job_id for s in live}
        for job_id, (ended, _) in list(self._ended.items()):
            if job_id in live_ids or now - ended > self.retention_s:
                del self._ended[job_id]
        return live, standby

    # -- scrape -------------------------------------------------------------------------------

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        live, standby = self._refresh()
        jobs = [*live, *(s for _, s in self._ended.values())]
        by_status = gauge(
            "job_master_jobs",
            "Jobs led by this job-master process by status (ended jobs stay for a while).",
            ["status"],
        )
        counts = {status.name: 0 for status in JobStatus}
        for job in jobs:
            counts[job.status.name] += 1
        for status, value in counts.items():
            by_status.add_metric([status], float(value))
        standbys = gauge(
            "job_master_standby_jobs",
            "Jobs this process hosts a standby JobMaster for (waiting for the job's leadership).",
        )
        standbys.add_metric([], float(standby))
        registered = gauge(
            "job_master_registered",
            "1 while this job-master process is registered at a dispatcher leader.",
        )
        dispatcher = self.process.dispatcher
        registered.add_metric([], 1.0 if dispatcher is not None and dispatcher.registered else 0.0)
        timeouts = counter(
            "heartbeat_timeouts",
            "Heartbeat targets declared dead (no heartbeat within heartbeat.timeout, or too many "
            "failed heartbeat RPCs), by the kind of peer watched.",
            ["peer"],
        )
        live_timeouts = (t.jm.heartbeats.timeouts_total for t in self._tracked.values())
        timeouts.add_metric(
            ["task-executor-or-resource-manager"], self._heartbeat_timeouts.value(live_timeouts)
        )
        yield from (by_status, standbys, registered, timeouts)
        yield from _job_families(jobs)


def _job_families(jobs: Iterable[_JobSnapshot]) -> Iterator[Metric]:
    status = gauge(
        "job_status",
        "1 for the job's current status, 0 for the others (one series per status).",
        ["job_id", "job_name", "status"],
    )
    restarts = counter("job_restarts", "Times the job was restarted after failures.", ["job_id"])
    running = gauge(
        "job_running_time_seconds",
        "Seconds since the job was submitted, until it ended.",
        ["job_id"],
    )
    tasks = gauge(
        "job_tasks",
        "The job's current task attempts (one per subtask) by execution state.",
        ["job_id", "state"],
    )
    speculative = counter(
        "job_speculative_attempts",
        "Speculative attempts started beside slow subtasks of the job (speculative execution).",
        ["job_id"],
    )
    wins = counter(
        "job_speculative_wins",
        "Speculative attempts that finished before the attempt they raced.",
        ["job_id"],
    )
    blocked = gauge(
        "job_blocked_task_executors",
        "Task executors that get no new slot of the job for a while: one of its attempts was "
        "slow on them (the blocklist).",
        ["job_id"],
    )
    names = [s.name for s in JobStatus]
    for job in sorted(jobs, key=lambda j: j.job_id):
        speculative.add_metric([job.job_id], job.speculative_attempts)
        wins.add_metric([job.job_id], job.speculative_wins)
        blocked.add_metric([job.job_id], float(job.blocked_task_executors))
        one_hot(status, [job.job_id, job.name], names, job.status.name)
        restarts.add_metric([job.job_id], job.restarts)
        running.add_metric([job.job_id], job.running_time_s)
        for state in ExecutionState:
            tasks.add_metric([job.job_id, state.name], float(job.tasks.get(state, 0)))
    yield from (status, restarts, running, tasks, speculative, wins, blocked)


def register(process: JobMasterProcess, metrics: ProcessMetrics) -> JobMasterCollector:
    scheduling = Histogram(
        PREFIX + "job_scheduling_latency_seconds",
        "Time a task attempt waited for a slot: from SCHEDULED to DEPLOYING.",
        buckets=LATENCY_BUCKETS,
        registry=metrics.registry,
    )
    deployment = Histogram(
        PREFIX + "job_deployment_latency_seconds",
        "Time from deploying a task attempt to a task executor until it runs (DEPLOYING to "
        "RUNNING); an attempt that ended within the task executor's batching window reports "
        "only its final state and is not counted.",
        buckets=LATENCY_BUCKETS,
        registry=metrics.registry,
    )
    collector = JobMasterCollector(process, scheduling, deployment)
    process.job_masters = _JobMasters(process.job_masters, collector.track)
    metrics.register(collector)
    return collector
