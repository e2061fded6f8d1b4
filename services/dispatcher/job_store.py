"""The submitted-job-graph store (Flink's ``JobGraphStore``).

A job graph is put here before its submission is acknowledged and removed once the job reached
a globally terminal state; a new dispatcher leader recovers whatever is left. The methods are
blocking (the ZooKeeper form talks to ZooKeeper and the storage directory), so the dispatcher
calls them through ``run_blocking``. The standalone form keeps graphs in memory: without HA
there is no second dispatcher to recover them.
"""

from __future__ import annotations

import abc
import threading

from common.ids import JobID
from sparkmill.v1 import common_pb2


class JobGraphStore(abc.ABC):
    @abc.abstractmethod
    def put(self, graph: common_pb2.JobGraph) -> None: ...

    @abc.abstractmethod
    def remove(self, job_id: JobID) -> None: ...

    @abc.abstractmethod
    def recover_all(self) -> list[common_pb2.JobGraph]: ...


class InMemoryJobGraphStore(JobGraphStore):
    def __init__(self) -> None:
        self._lock = threading.Lock()  # called from executor threads
        self._graphs: dict[str, bytes] = {}

    def put(self, graph: common_pb2.JobGraph) -> None:
        with self._lock:
            self._graphs[graph.job_id] = graph.SerializeToString()

    def remove(self, job_id: JobID) -> None:
        with self._lock:
            self._graphs.pop(job_id, None)

    def recover_all(self) -> list[common_pb2.JobGraph]:
        with self._lock:
            blobs = list(self._graphs.values())
        graphs = []
        for blob in blobs:
            graph = common_pb2.JobGraph()
            graph.ParseFromString(blob)
            graphs.append(graph)
        return graphs
