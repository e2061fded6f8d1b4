"""Test operators: pipelines that exercise the control plane without touching data.

Like Flink's ``NoOpInvokable``, a ``noop`` vertex does nothing (or sleeps, or fails on purpose),
so tests and benchmarks can drive scheduling, slots, failover and metrics at scale without Spark.
These are *test operators*: real pipelines use :class:`sparkmill.Pipeline`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkmill.common.core.ids import new_dataset_id, new_job_id, new_vertex_id
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.jobgraph.job_config import JobConfigValue, normalize_job_config
from sparkmill.common.jobgraph.model import (
    NOOP_OPERATOR_KIND,
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
    ResultPartitionType,
)
from sparkmill.common.pipeline.noop import NoOpOptions, encode_noop_payload


@dataclass
class TestPipeline:
    """A chain of ``noop`` vertices; anything with ``build_job_graph()`` can be submitted."""

    __test__ = False  # not a pytest test class

    name: str
    parallelism: int
    vertices: int = 1
    pattern: str = "ALL_TO_ALL"
    sleep_s: float = 0.0
    fail_attempts: int = 0
    config: dict[str, str] = field(default_factory=dict)
    resource_profile: ResourceProfile = UNKNOWN_PROFILE
    # BLOCKING: each vertex is a region of its own; PIPELINED: the chain is one region.
    result_type: str = "BLOCKING"
    # Slot sharing group of vertex i (all share the default group when empty).
    slot_sharing_groups: tuple[str, ...] = ()

    def build_job_graph(self) -> JobGraph:
        try:
            pattern = DistributionPattern[self.pattern.upper()]
        except KeyError:
            raise ValueError(
                f"pattern must be one of {[p.name for p in DistributionPattern]}, "
                f"not {self.pattern!r}"
            ) from None
        try:
            result_type = ResultPartitionType[self.result_type.upper()]
        except KeyError:
            raise ValueError(
                f"result_type must be one of {[t.name for t in ResultPartitionType]}, "
                f"not {self.result_type!r}"
            ) from None
        if self.slot_sharing_groups and len(self.slot_sharing_groups) != self.vertices:
            raise ValueError(
                f"slot_sharing_groups names {len(self.slot_sharing_groups)} groups "
                f"for {self.vertices} vertices"
            )
        payload = encode_noop_payload(NoOpOptions(self.sleep_s, self.fail_attempts))
        graph = JobGraph(new_job_id(), self.name, config=dict(self.config))
        previous: JobVertex | None = None
        for index in range(self.vertices):
            vertex = JobVertex(
                id=new_vertex_id(),
                name=f"noop-{index}",
                parallelism=self.parallelism,
                operator=OperatorSpec(NOOP_OPERATOR_KIND, payload),
                resource_profile=self.resource_profile,
            )
            if self.slot_sharing_groups:
                vertex.slot_sharing_group = self.slot_sharing_groups[index]
            if previous is not None:
                dataset = IntermediateDataSet(new_dataset_id(), previous.id, result_type)
                previous.produced.append(dataset)
                vertex.inputs.append(JobEdge(dataset.id, vertex.id, pattern))
            graph.vertices.append(vertex)
            previous = vertex
        return graph


def noop_pipeline(
    name: str,
    parallelism: int,
    vertices: int = 1,
    pattern: str = "ALL_TO_ALL",
    sleep_s: float = 0.0,
    fail_attempts: int = 0,
    config: Mapping[str, JobConfigValue] | None = None,
    resource_profile: ResourceProfile = UNKNOWN_PROFILE,
    result_type: str = "BLOCKING",
    slot_sharing_groups: Sequence[str] = (),
) -> TestPipeline:
    """A pipeline of ``vertices`` chained test vertices, each with ``parallelism`` subtasks.

    ``fail_attempts``: every subtask fails its first N attempts. ``config``: job-level keys that
    override the cluster's (e.g. ``restart-strategy.type``). ``result_type``: ``BLOCKING``
    (default) or ``PIPELINED`` results between the vertices. ``slot_sharing_groups``: the slot
    sharing group of each vertex (default: all share one group, as in Flink).
    """
    return TestPipeline(
        name,
        parallelism,
        vertices,
        pattern,
        sleep_s,
        fail_attempts,
        normalize_job_config(config or {}),
        resource_profile,
        result_type,
        tuple(slot_sharing_groups),
    )
