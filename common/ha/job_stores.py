"""The submitted-job-graph store (Flink's ``JobGraphStore``) and the job result store.

A job graph is put here before its submission is acknowledged and removed once the job reached
a globally terminal state; a new dispatcher leader recovers whatever is left. The methods are
blocking (the ZooKeeper form talks to ZooKeeper and the storage directory), so the dispatcher
calls them through ``run_blocking``. The standalone form keeps graphs in memory: without HA
there is no second dispatcher to recover them.
"""

from __future__ import annotations

import abc
import threading
from dataclasses import dataclass, field

from sparkmill.common.core.ids import JobID
from sparkmill.common.v1 import common_pb2, jobs_pb2


@dataclass(frozen=True)
class UnrecoverableJobGraph:
    """A stored job whose graph cannot be read back; the dispatcher fails it with ``reason``."""

    job_id: str
    reason: str


@dataclass
class RecoveredJobGraphs:
    graphs: list[common_pb2.JobGraph] = field(default_factory=list)
    unrecoverable: list[UnrecoverableJobGraph] = field(default_factory=list)


class JobGraphStore(abc.ABC):
    @abc.abstractmethod
    def put(self, graph: common_pb2.JobGraph, fence: str | None = None) -> None:
        """Store ``graph``; with a ``fence`` (see ``LeaderElectionService.leadership_fence``)
        only while that leadership holds, else :class:`NotLeaderError` and nothing stored."""

    @abc.abstractmethod
    def remove(self, job_id: JobID) -> None: ...

    @abc.abstractmethod
    def recover(self) -> RecoveredJobGraphs:
        """Every stored graph, locked for this owner, and the jobs whose graph is unreadable.

        One unreadable graph never stops the recovery of the others.
        """

    def release_all(self) -> None:  # noqa: B027 - only stores with locks need it
        """Give up this owner's locks (a dispatcher that lost leadership)."""


class JobResultStore(abc.ABC):
    """Results of globally terminal jobs: *dirty* until the job's clean-up is done (FLIP-194)."""

    @abc.abstractmethod
    def create_dirty(self, result: jobs_pb2.JobResult) -> None: ...

    @abc.abstractmethod
    def mark_clean(self, job_id: JobID) -> None: ...

    @abc.abstractmethod
    def has_result(self, job_id: JobID) -> bool: ...

    @abc.abstractmethod
    def results(self) -> list[tuple[jobs_pb2.JobResult, bool]]:
        """Every stored result with its dirty flag."""


class InMemoryJobResultStore(JobResultStore):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._results: dict[str, tuple[bytes, bool]] = {}

    def create_dirty(self, result: jobs_pb2.JobResult) -> None:
        with self._lock:
            self._results[result.job_id] = (result.SerializeToString(), True)

    def mark_clean(self, job_id: JobID) -> None:
        with self._lock:
            if job_id in self._results:
                self._results[job_id] = (self._results[job_id][0], False)

    def has_result(self, job_id: JobID) -> bool:
        with self._lock:
            return job_id in self._results

    def results(self) -> list[tuple[jobs_pb2.JobResult, bool]]:
        with self._lock:
            items = list(self._results.values())
        out = []
        for blob, dirty in items:
            result = jobs_pb2.JobResult()
            result.ParseFromString(blob)
            out.append((result, dirty))
        return out


class InMemoryJobGraphStore(JobGraphStore):
    def __init__(self) -> None:
        self._lock = threading.Lock()  # called from executor threads
        self._graphs: dict[str, bytes] = {}

    def put(self, graph: common_pb2.JobGraph, fence: str | None = None) -> None:
        with self._lock:
            self._graphs[graph.job_id] = graph.SerializeToString()

    def remove(self, job_id: JobID) -> None:
        with self._lock:
            self._graphs.pop(job_id, None)

    def recover(self) -> RecoveredJobGraphs:
        with self._lock:
            blobs = list(self._graphs.values())
        recovered = RecoveredJobGraphs()
        for blob in blobs:
            graph = common_pb2.JobGraph()
            graph.ParseFromString(blob)
            recovered.graphs.append(graph)
        return recovered
