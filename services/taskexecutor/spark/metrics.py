"""Records and bytes a task read and wrote, from Spark's own task metrics (no per-row Python).

Every Spark job of an attempt carries the attempt's job tag. After the task's actions, the
stages of the jobs that appeared under the tag since :class:`SparkIOMetrics` was created are
looked up in Spark's status store, and their input/output records and bytes summed. The store
is fed asynchronously by Spark's listener bus, so the lookup waits (briefly) until each stage
shows a final status.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sparkmill.common.core.io_counters import IOCounters

log = logging.getLogger(__name__)

_FINAL = frozenset({"COMPLETE", "SKIPPED", "FAILED"})


class SparkIOMetrics:
    def __init__(self, spark_context: Any, tag: str) -> None:
        self._sc = spark_context
        self._tag = tag
        self._before = set(self._job_ids())
        self._input_jobs: set[int] | None = None

    def mark_inputs_read(self) -> None:
        """The task's input has been read once: later jobs (a further output written from a
        persisted result or from the files of the first output, which Spark counts as input
        again) add outputs only."""
        if self._input_jobs is None:
            self._input_jobs = set(self._job_ids()) - self._before

    def _job_ids(self) -> list[int]:
        try:
            return [int(j) for j in self._sc._jsc.sc().statusTracker().getJobIdsForTag(self._tag)]
        except Exception:  # an older Spark without job tags
            return []

    def totals(self, wait_s: float = 3.0) -> IOCounters:
        records_in = records_out = bytes_in = bytes_out = 0
        jobs = sorted(set(self._job_ids()) - self._before)
        input_jobs = self._input_jobs if self._input_jobs is not None else set(jobs)
        tracker = self._sc.statusTracker()
        stages: set[int] = set()
        input_stages: set[int] = set()
        for job in jobs:
            info = tracker.getJobInfo(job)
            if info is not None:
                ids = {int(s) for s in info.stageIds}
                stages.update(ids)
                if job in input_jobs:
                    input_stages.update(ids)
        store = self._sc._jsc.sc().statusStore()
        deadline = time.monotonic() + wait_s
        pending = sorted(stages)
        while pending:
            still: list[int] = []
            for stage in pending:
                data = _stage(store, stage)
                final = data is not None and str(data.status().toString()) in _FINAL
                if not final and time.monotonic() < deadline:
                    still.append(stage)
                    continue
                if data is not None:
                    if stage in input_stages:
                        records_in += int(data.inputRecords())
                        bytes_in += int(data.inputBytes())
                    records_out += int(data.outputRecords())
                    bytes_out += int(data.outputBytes())
            pending = still
            if pending:
                time.sleep(0.05)
        return IOCounters(records_in, records_out, bytes_in, bytes_out)


def _stage(store: Any, stage: int) -> Any:
    try:
        return store.lastStageAttempt(stage)
    except Exception:  # not (yet) in the store
        return None
