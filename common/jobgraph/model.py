"""The JobGraph: what a client submits (Flink's ``JobGraph``), as plain Python objects.

A job graph is a DAG of :class:`JobVertex` objects. A vertex *produces* intermediate data sets
(:class:`IntermediateDataSet`); a :class:`JobEdge` connects one data set to one consuming vertex
with a :class:`DistributionPattern`. The wire form is ``sparkmill.v1.JobGraph``
(see :mod:`sparkmill.common.jobgraph.codec`); this module is what the services reason about.

Validation lives in :mod:`sparkmill.common.jobgraph.validation`; nothing here assumes the graph is
valid except :meth:`JobGraph.topological_order`, which raises on a cycle.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from sparkmill.common.core.ids import IntermediateDataSetID, JobID, JobVertexID
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile

DEFAULT_MAX_PARALLELISM = 32768

AUTO_PARALLELISM = -1
"""The parallelism of a vertex the JobMaster decides from the data: a source's when the job
starts, from the size of its input, any other's once its producers finished, from the bytes
they wrote (Flink's ``ExecutionConfig.PARALLELISM_DEFAULT`` under its adaptive batch
scheduler)."""

NOOP_OPERATOR_KIND = "noop"
"""The built-in test operator (its payload: common/pipeline/noop.py)."""

SPARK_OPERATOR_KIND = "spark"
"""A chain of PySpark operators (the data plane)."""

KNOWN_OPERATOR_KINDS = frozenset({NOOP_OPERATOR_KIND, SPARK_OPERATOR_KIND})
DEFAULT_SLOT_SHARING_GROUP = "default"


class DistributionPattern(enum.Enum):
    """How producer subtasks connect to consumer subtasks (Flink's ``DistributionPattern``)."""

    POINTWISE = 1  # each consumer reads a contiguous range of producers (or vice versa)
    ALL_TO_ALL = 2  # every consumer reads every producer's partition


class ResultPartitionType(enum.Enum):
    """BLOCKING results are fully produced before consumers start (batch); PIPELINED stream."""

    BLOCKING = 1
    PIPELINED = 2


@dataclass(slots=True)
class OperatorSpec:
    """What a vertex runs: an operator ``kind`` (e.g. ``noop``) and its opaque ``payload``."""

    kind: str
    payload: bytes = b""


@dataclass(slots=True)
class IntermediateDataSet:
    id: IntermediateDataSetID
    producer: JobVertexID
    result_type: ResultPartitionType = ResultPartitionType.BLOCKING


@dataclass(slots=True)
class JobEdge:
    source: IntermediateDataSetID  # the data set read
    target: JobVertexID  # the consuming vertex
    pattern: DistributionPattern = DistributionPattern.ALL_TO_ALL
    # How records are routed to consumers ("hash", "forward", "rebalance", "broadcast"); the
    # control plane only needs the pattern, the data plane reads the partitioner.
    partitioner: str = "forward"


@dataclass(slots=True)
class JobVertex:
    id: JobVertexID
    name: str
    parallelism: int
    operator: OperatorSpec
    max_parallelism: int = DEFAULT_MAX_PARALLELISM
    resource_profile: ResourceProfile = UNKNOWN_PROFILE
    slot_sharing_group: str = DEFAULT_SLOT_SHARING_GROUP
    produced: list[IntermediateDataSet] = field(default_factory=list)
    inputs: list[JobEdge] = field(default_factory=list)
    # Where its sinks write, declared for the control plane's checks (the payload is opaque).
    sink_paths: list[str] = field(default_factory=list)
    # What its file sources read, declared so that an automatic parallelism can be decided
    # from the input's size (the payload is opaque to the control plane).
    source_paths: list[str] = field(default_factory=list)
    # The positions in ``inputs`` of the hash inputs whose skewed sub-partitions may be split
    # across subtasks (a join's sides that allow it; see common/exchange/skewed_splits.py).
    skew_splittable_inputs: list[int] = field(default_factory=list)

    @property
    def is_auto(self) -> bool:
        """Whether the JobMaster decides this vertex's parallelism."""
        return self.parallelism == AUTO_PARALLELISM


@dataclass(slots=True)
class JobGraph:
    job_id: JobID
    name: str
    vertices: list[JobVertex] = field(default_factory=list)
    # Job-level configuration keys that override the cluster's (e.g. restart-strategy.*).
    config: dict[str, str] = field(default_factory=dict)

    def vertex(self, vertex_id: JobVertexID) -> JobVertex:
        for v in self.vertices:
            if v.id == vertex_id:
                return v
        raise KeyError(vertex_id)

    def datasets(self) -> dict[IntermediateDataSetID, IntermediateDataSet]:
        return {ds.id: ds for v in self.vertices for ds in v.produced}

    def topological_order(self) -> list[JobVertex]:
        """Vertices sorted so every producer precedes its consumers (Kahn's algorithm, O(V+E)).

        Raises ``ValueError`` naming the vertices on a cycle, or on an edge whose data set or
        producer is unknown.
        """
        by_id = {v.id: v for v in self.vertices}
        producer_of = {ds.id: v.id for v in self.vertices for ds in v.produced}
        indegree = {v.id: 0 for v in self.vertices}
        consumers: dict[JobVertexID, list[JobVertexID]] = {v.id: [] for v in self.vertices}
        for v in self.vertices:
            for edge in v.inputs:
                producer = producer_of.get(edge.source)
                if producer is None:
                    raise ValueError(f"vertex '{v.name}' reads unknown data set {edge.source}")
                consumers[producer].append(v.id)
                indegree[v.id] += 1
        ready = deque(vid for vid, d in indegree.items() if d == 0)
        order: list[JobVertex] = []
        while ready:
            vid = ready.popleft()
            order.append(by_id[vid])
            for consumer in consumers[vid]:
                indegree[consumer] -= 1
                if indegree[consumer] == 0:
                    ready.append(consumer)
        if len(order) != len(self.vertices):
            cyclic = sorted(by_id[vid].name for vid, d in indegree.items() if d > 0)
            raise ValueError(f"the job graph has a cycle through vertices {cyclic}")
        return order
