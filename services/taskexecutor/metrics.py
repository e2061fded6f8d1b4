"""Metrics of a task executor: slots and tasks by state, task attempts and their I/O by job and
vertex, the Spark session.

Slots and live tasks are read from the :class:`TaskSlotTable` when scraped. Attempt outcomes and
record/byte counts are counted from the task state changes (the task executor calls
:meth:`TaskExecutorCollector.on_task_state` for each). Series labelled with a job id are dropped
:data:`~sparkmill.common.runtime.metrics.ENDED_JOB_RETENTION_S` after the job last had a slot or
task here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter

from prometheus_client.core import Metric

from sparkmill.common.core.ids import JobID
from sparkmill.common.core.io_counters import NO_IO, IOCounters
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.deployment.state_update import TaskFailure
from sparkmill.common.runtime.metrics import ExpiringKeys, ProcessMetrics, counter, gauge
from sparkmill.services.taskexecutor.context import TaskOutcome
from sparkmill.services.taskexecutor.pipeline.link import SERVICE_KEY as PIPELINE_WORKER_KEY
from sparkmill.services.taskexecutor.pipeline.link import PipelineWorkerLink
from sparkmill.services.taskexecutor.slot_table import TaskSlotState
from sparkmill.services.taskexecutor.task import Task
from sparkmill.services.taskexecutor.task_executor import TaskExecutor

LIVE_TASK_STATES = (
    ExecutionState.DEPLOYING,
    ExecutionState.INITIALIZING,
    ExecutionState.RUNNING,
    ExecutionState.CANCELING,
)


@dataclass(slots=True)
class _AttemptCounts:
    started: int = 0
    finished: int = 0
    failed: int = 0
    canceled: int = 0
    io: IOCounters = NO_IO


_COUNTERS = (
    ("task_attempts_started", "started", "Task attempts started on this task executor."),
    ("task_attempts_finished", "finished", "Task attempts that ended FINISHED."),
    ("task_attempts_failed", "failed", "Task attempts that ended FAILED."),
    ("task_attempts_canceled", "canceled", "Task attempts that ended CANCELED."),
    ("task_records_in", "io.records_in", "Records read by finished task attempts."),
    ("task_records_out", "io.records_out", "Records written by finished task attempts."),
    ("task_bytes_in", "io.bytes_in", "Bytes read by finished task attempts."),
    ("task_bytes_out", "io.bytes_out", "Bytes written by finished task attempts."),
)


def spark_session_up(services: dict[str, object]) -> bool:
    """Whether a task service (the data plane's Spark session manager) reports ``is_up``."""
    for service in list(services.values()):
        try:
            up = getattr(service, "is_up", None)
            if callable(up):
                up = up()
        except Exception:
            continue
        if up is True:
            return True
    return False


class TaskExecutorCollector:
    def __init__(self, te: TaskExecutor, retention: ExpiringKeys | None = None) -> None:
        self.te = te
        self._counts: dict[tuple[str, str], _AttemptCounts] = {}
        self._live: set[str] = set()  # attempts seen started and not yet ended
        self._jobs = retention or ExpiringKeys()

    # -- events (on the loop) ---------------------------------------------------------------

    def on_task_state(
        self,
        task: Task,
        state: ExecutionState,
        failure: TaskFailure | None,
        outcome: TaskOutcome | None,
    ) -> None:
        job_id, attempt = task.tdd.job_id, task.tdd.attempt_id
        counts = self._counts.setdefault((job_id, task.tdd.vertex_name), _AttemptCounts())
        self._jobs.touch(job_id)
        if attempt not in self._live:
            counts.started += 1
            self._live.add(attempt)
        if not state.is_terminal:
            return
        self._live.discard(attempt)
        if state is ExecutionState.FINISHED:
            counts.finished += 1
        elif state is ExecutionState.FAILED:
            counts.failed += 1
        else:
            counts.canceled += 1
        if outcome is not None:
            counts.io += outcome.io

    # -- scrape -----------------------------------------------------------------------------

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        te = self.te
        table = te.slot_table
        slots = gauge(
            "task_executor_slots",
            "Slots of this task executor by state: free, allocated (reserved, not yet accepted "
            "by the JobMaster), active (tasks may run) or releasing.",
            ["state"],
        )
        tasks = gauge(
            "task_executor_tasks",
            "Task attempts on this task executor by execution state.",
            ["state"],
        )
        slot_counts = {"free": 0, **{s.value.lower(): 0 for s in TaskSlotState}}
        task_counts = {s.name: 0 for s in LIVE_TASK_STATES}
        job_ids: list[JobID] = []
        if table is not None:
            used_static = 0
            job_ids = list(table.job_ids())
            for job_id in job_ids:
                for info in table.slots_of_job(job_id):
                    slot_counts[info.state.value.lower()] += 1
                    used_static += info.index < table.number_slots
                for task in table.tasks_of_job(job_id):
                    task_counts[task.state.name] = task_counts.get(task.state.name, 0) + 1
            slot_counts["free"] = table.number_slots - used_static
        for state, value in slot_counts.items():
            slots.add_metric([state], float(value))
        for name, value in task_counts.items():
            tasks.add_metric([name], float(value))
        registered = gauge(
            "task_executor_registered",
            "1 while this task executor is registered at a resource manager leader.",
        )
        registered.add_metric([], 1.0 if te.rm_link.is_registered else 0.0)
        spark = gauge(
            "spark_session_up", "1 while the task executor's Spark session is up, else 0."
        )
        spark.add_metric([], 1.0 if spark_session_up(te.task_services) else 0.0)
        worker = te.task_services.get(PIPELINE_WORKER_KEY)
        worker_up = gauge(
            "pipeline_worker_up",
            "1 while the task executor's pipeline worker (the process that runs pipeline code) "
            "is connected, else 0.",
        )
        worker_starts = counter(
            "pipeline_worker_starts",
            "Pipeline workers this task executor started or connected to.",
        )
        worker_losses = counter(
            "pipeline_worker_losses",
            "Pipeline workers that ended while this task executor needed them (a crash, "
            "pipeline code that killed it, an attempt that ignored its cancellation); the "
            "attempts on them failed and ran again.",
        )
        if isinstance(worker, PipelineWorkerLink):
            worker_up.add_metric([], 1.0 if worker.worker_running else 0.0)
            worker_starts.add_metric([], float(worker.starts_total))
            worker_losses.add_metric([], float(worker.losses_total))
        yield from (worker_up, worker_starts, worker_losses)
        timeouts = counter(
            "heartbeat_timeouts",
            "Heartbeat targets declared dead (no heartbeat within heartbeat.timeout, or too many "
            "failed heartbeat RPCs), by the kind of peer watched.",
            ["peer"],
        )
        timeouts.add_metric(["resource-manager-or-job-master"], te.heartbeats.timeouts_total)
        yield from (slots, tasks, registered, spark, timeouts)
        yield from self._attempt_families(job_ids)

    def _attempt_families(self, active_jobs: list[JobID]) -> Iterator[Metric]:
        for job_id in self._jobs.expired(active_jobs):
            for key in [k for k in self._counts if k[0] == job_id]:
                del self._counts[key]
        for name, field, documentation in _COUNTERS:
            family = counter(name, f"{documentation} By job and vertex.", ["job_id", "vertex"])
            for (job_id, vertex), counts in sorted(self._counts.items()):
                family.add_metric([job_id, vertex], attrgetter(field)(counts))
            yield family


def register(te: TaskExecutor, metrics: ProcessMetrics) -> None:
    collector = TaskExecutorCollector(te)
    metrics.register(collector)
    te.task_state_listener = collector.on_task_state
