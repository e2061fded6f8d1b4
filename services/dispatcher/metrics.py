"""Metrics of the dispatcher: jobs by status, jobs submitted and ended, job-master processes,
submission latency and leadership.

Read from the :class:`Dispatcher` when scraped. Ended jobs are counted once each, the first time a
scrape sees them in a terminal status (the dispatcher keeps them for
``jobstore.expiration-time``, so none is missed). The submission latency (validate, persist,
acknowledge) is the duration of successful ``SubmitJob`` RPCs.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Histogram
from prometheus_client.core import Metric

from sparkmill.common.core.ids import JobID
from sparkmill.common.core.states import JobStatus
from sparkmill.common.runtime.metrics import PREFIX, RPC_BUCKETS, ProcessMetrics, counter, gauge
from sparkmill.services.dispatcher.dispatcher import Dispatcher

ENDED_STATUSES = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED)


class DispatcherCollector:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self._ended: dict[JobStatus, int] = dict.fromkeys(ENDED_STATUSES, 0)
        self._counted: set[JobID] = set()

    def _count_ended(self) -> None:
        jobs = self.dispatcher.jobs
        for job in list(jobs.values()):
            if job.status.is_globally_terminal and job.job_id not in self._counted:
                self._counted.add(job.job_id)
                self._ended[job.status] += 1
        self._counted &= jobs.keys()  # expired jobs can never come back

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        d = self.dispatcher
        self._count_ended()
        leader = gauge(
            "leader", "1 while this process leads its role (dispatcher, resource manager)."
        )
        leader.add_metric([], 1.0 if d.session_id is not None else 0.0)
        submitted = counter("dispatcher_jobs_submitted", "Jobs accepted by this dispatcher.")
        submitted.add_metric([], d.submitted_total)
        ended = counter(
            "dispatcher_jobs_ended",
            "Jobs that ended, by final status (FINISHED, FAILED, CANCELED).",
            ["status"],
        )
        for status, value in self._ended.items():
            ended.add_metric([status.name], value)
        by_status = gauge(
            "dispatcher_jobs",
            "Jobs the dispatcher knows by status (ended jobs until they expire).",
            ["status"],
        )
        counts = {status.name: 0 for status in JobStatus}
        for job in d.jobs.values():
            counts[job.status.name] += 1
        for status_name, value in counts.items():
            by_status.add_metric([status_name], float(value))
        processes = gauge(
            "dispatcher_job_master_processes", "Job-master processes registered at the dispatcher."
        )
        processes.add_metric([], float(len(d.processes)))
        timeouts = counter(
            "heartbeat_timeouts",
            "Heartbeat targets declared dead (no heartbeat within heartbeat.timeout, or too many "
            "failed heartbeat RPCs), by the kind of peer watched.",
            ["peer"],
        )
        timeouts.add_metric(["job-master-process"], d.heartbeats.timeouts_total)
        yield from (leader, submitted, ended, by_status, processes, timeouts)


def register(dispatcher: Dispatcher, metrics: ProcessMetrics) -> None:
    metrics.register(DispatcherCollector(dispatcher))
    submission = Histogram(
        PREFIX + "dispatcher_job_submission_seconds",
        "Time to accept a job submission: validate, persist and acknowledge it.",
        buckets=RPC_BUCKETS,
        registry=metrics.registry,
    )

    def observe(service: str, method: str, code: str, seconds: float) -> None:
        if method == "SubmitJob" and code == "OK":
            submission.observe(seconds)

    metrics.rpc.add_listener(observe)
