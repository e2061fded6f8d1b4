"""The ``spark`` operator kind: a task that runs a chain of PySpark operators.

Each attempt runs its Spark jobs in the process's shared SparkSession, in the FAIR pool of its
slot, under a job group and job tag of its own (``sparkmill-{attempt_id}``). :meth:`cancel`
cancels that group and tag - which interrupts the running Spark jobs - and keeps doing so until
``invoke`` returns, so a job submitted just after a cancel is stopped as well.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from sparkmill.common.core.errors import TaskCancelledError
from sparkmill.common.pipeline import plan as S
from sparkmill.common.pipeline.expressions import set_live
from sparkmill.services.taskexecutor.context import TaskContext, TaskOutcome
from sparkmill.services.taskexecutor.spark.python_worker_logs import (
    ADDRESS_PROPERTY,
    JOB_GROUP_PREFIX,
)
from sparkmill.services.taskexecutor.spark.session import SERVICE_KEY, SparkSessionManager

log = logging.getLogger(__name__)

CANCEL_REPEAT_S = 0.5
CANCEL_GIVE_UP_S = 120.0


class SparkInvokable:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spark_context: Any = None
        self._tag = ""
        self._running = threading.Event()
        self._cancelled = threading.Event()
        self._finished = threading.Event()

    def invoke(self, context: TaskContext) -> TaskOutcome:
        from sparkmill.services.taskexecutor.spark.runner import run_chain, run_commit

        spec = S.decode_spec(context.payload)
        if isinstance(spec, S.CommitSpec) and not spec.jdbc:
            return run_commit(spec, context)  # files only: no Spark session needed
        manager = context.services.get(SERVICE_KEY)
        if not isinstance(manager, SparkSessionManager):
            raise RuntimeError("this task executor offers no Spark session (task services?)")
        spark = manager.session(context.cancelled)
        if isinstance(spec, S.CommitSpec):
            return run_commit(spec, context, spark)  # database sinks: the JVM's JDBC drivers
        set_live(True)  # sparkmill.functions inside user functions: real Columns here
        sc = spark.sparkContext
        tag = f"{JOB_GROUP_PREFIX}{context.attempt_id}"
        slot = getattr(context, "slot_index", None)
        with manager.pool(slot if isinstance(slot, int) else None) as pool:
            sc.setLocalProperty("spark.scheduler.pool", pool)
            sc.setJobGroup(
                tag,
                f"{context.vertex_name} ({context.subtask_index + 1}/{context.parallelism}) "
                f"attempt #{context.attempt_number} of job {context.job_name}",
                interruptOnCancel=True,
            )
            sc.addJobTag(tag)
            # Where this attempt's UDFs send what they print (Spark passes local properties to
            # its Python workers with each task).
            sc.setLocalProperty(ADDRESS_PROPERTY, manager.python_worker_log_address or None)
            with self._lock:
                self._spark_context, self._tag = sc, tag
                self._running.set()
            try:
                if context.cancelled.is_set() or self._cancelled.is_set():
                    raise TaskCancelledError("cancelled before it started running")
                return run_chain(spark, spec, context, tag)
            finally:
                # Before the attempt ends: what its UDFs printed last is still in flight.
                manager.flush_python_worker_logs()
                with self._lock:
                    self._running.clear()
                    self._finished.set()
                    self._spark_context = None
                try:
                    sc.removeJobTag(tag)
                    sc.setLocalProperty("spark.scheduler.pool", None)
                    sc.setLocalProperty(ADDRESS_PROPERTY, None)
                except Exception:
                    log.debug("resetting the task thread's Spark properties failed", exc_info=True)

    def cancel(self) -> None:
        """Called on the task executor's event loop: the Spark calls go to a thread."""
        self._cancelled.set()
        with self._lock:
            sc, tag = self._spark_context, self._tag
        if sc is None:
            return
        threading.Thread(
            target=self._cancel_jobs, args=(sc, tag), name=f"cancel-{tag}", daemon=True
        ).start()

    def _cancel_jobs(self, sc: Any, tag: str) -> None:
        deadline = time.monotonic() + CANCEL_GIVE_UP_S
        while self._running.is_set():
            try:
                # Only while one of its Spark jobs runs: between them (the attempt's own Python
                # code, a transform that sleeps) Spark would log a warning for every call.
                if _has_active_jobs(sc, tag):
                    sc.cancelJobGroup(tag)
                    sc.cancelJobsWithTag(tag)
            except Exception:
                log.warning("cancelling the Spark jobs of %s failed", tag, exc_info=True)
                return
            if self._finished.wait(CANCEL_REPEAT_S) or time.monotonic() > deadline:
                return


def _has_active_jobs(sc: Any, tag: str) -> bool:
    """Whether a Spark job of the attempt's job group runs now (the driver's status tracker:
    no Spark job runs for this)."""
    tracker = sc.statusTracker()
    return bool(set(tracker.getJobIdsForGroup(tag)) & set(tracker.getActiveJobsIds()))
