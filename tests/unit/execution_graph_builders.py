"""Builders and helpers of the execution graph tests: a job graph builder, wiring views and
shortcuts that drive attempts through their states."""

from __future__ import annotations

from sparkmill.common.core.ids import new_dataset_id, new_job_id, new_vertex_id
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.jobgraph.model import (
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
    ResultPartitionType,
)
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    ExecutionGraph,
    PipelinedRegion,
)

E = ExecutionState
POINTWISE = DistributionPattern.POINTWISE
ALL_TO_ALL = DistributionPattern.ALL_TO_ALL
BLOCKING = ResultPartitionType.BLOCKING
PIPELINED = ResultPartitionType.PIPELINED


class JobBuilder:
    """Small helper to write job graphs tersely."""

    def __init__(self) -> None:
        self.vertices: dict[str, JobVertex] = {}

    def vertex(self, name: str, parallelism: int) -> JobVertex:
        v = JobVertex(new_vertex_id(), name, parallelism, OperatorSpec("noop"))
        self.vertices[name] = v
        return v

    def edge(
        self,
        producer: str,
        consumer: str,
        pattern: DistributionPattern = ALL_TO_ALL,
        result_type: ResultPartitionType = BLOCKING,
    ) -> None:
        src, dst = self.vertices[producer], self.vertices[consumer]
        ds = IntermediateDataSet(new_dataset_id(), src.id, result_type)
        src.produced.append(ds)
        dst.inputs.append(JobEdge(ds.id, dst.id, pattern))

    def job(self, order: list[str] | None = None) -> JobGraph:
        names = order if order is not None else list(self.vertices)
        return JobGraph(new_job_id(), "test-job", [self.vertices[n] for n in names])


def two_vertex_graph(
    sources: int,
    targets: int,
    pattern: DistributionPattern,
    result_type: ResultPartitionType = BLOCKING,
    **build_kwargs,
) -> tuple[ExecutionGraph, JobBuilder]:
    b = JobBuilder()
    b.vertex("src", sources)
    b.vertex("dst", targets)
    b.edge("src", "dst", pattern, result_type)
    return ExecutionGraph.build(b.job(), **build_kwargs), b


def subtasks(graph: ExecutionGraph, b: JobBuilder, name: str):
    return graph.job_vertex(b.vertices[name].id).task_vertices


def wiring(graph: ExecutionGraph, b: JobBuilder):
    """({partition number: consumer subtasks}, {consumer subtask: producer subtasks})."""
    result = graph.job_vertex(b.vertices["src"].id).produced_results[0]
    readers = {
        p.partition_number: [c.subtask_index for c in graph.consumers_of(p)]
        for p in result.partitions
    }
    reads = {
        c.subtask_index: [p.subtask_index for p in graph.producers_of(c)]
        for c in subtasks(graph, b, "dst")
    }
    return readers, reads


def run_to(execution, *states: ExecutionState) -> None:
    for state in states:
        execution.transition_to(state)


def finish(vertex) -> None:
    run_to(vertex.current_execution, E.SCHEDULED, E.DEPLOYING, E.INITIALIZING, E.RUNNING)
    vertex.current_execution.transition_to(E.FINISHED)


def progress(graph: ExecutionGraph) -> tuple[bool, bool]:
    return graph.all_vertices_terminal, graph.all_vertices_finished


# ------------------------------------------------------------------ pipelined regions


def region_members(region: PipelinedRegion) -> list[tuple[str, int]]:
    return sorted((ev.job_vertex.name, ev.subtask_index) for ev in region)


def naive_regions(graph: ExecutionGraph) -> list[set[tuple[str, int]]]:
    """Regions by brute force: pipelined components, then merge mutually reachable regions."""
    vertices = list(graph.all_execution_vertices())
    key = {id(v): (v.job_vertex.name, v.subtask_index) for v in vertices}
    pairs = [
        (key[id(p.producer)], key[id(c)], group.result_type)
        for c in vertices
        for group in c.consumed_partition_groups
        for p in group.partitions
    ]
    region = {key[id(v)]: {key[id(v)]} for v in vertices}

    def merge(a: tuple[str, int], b: tuple[str, int]) -> None:
        if region[a] is not region[b]:
            union = region[a] | region[b]
            for member in union:
                region[member] = union

    for producer, consumer, result_type in pairs:
        if result_type is PIPELINED:
            merge(producer, consumer)
    regions = {id(r): r for r in region.values()}
    succ: dict[int, set[int]] = {rid: set() for rid in regions}
    for producer, consumer, _ in pairs:
        if region[producer] is not region[consumer]:
            succ[id(region[producer])].add(id(region[consumer]))

    def reachable(start: int) -> set[int]:
        seen: set[int] = set()
        todo = [start]
        while todo:
            for nxt in succ[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reach = {rid: reachable(rid) for rid in regions}
    for a in regions:
        for b in regions:
            if a != b and b in reach[a] and a in reach[b]:
                merge(next(iter(regions[a])), next(iter(regions[b])))
    return sorted({id(r): r for r in region.values()}.values(), key=sorted)
