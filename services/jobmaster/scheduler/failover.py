"""Which subtasks a failure touches, and which lost results must be produced again.

Graph questions only, no state is changed here; the scheduler
(:class:`~sparkmill.services.jobmaster.scheduler.default_scheduler.DefaultScheduler`) acts on the
answers:

* :func:`vertices_to_restart` - Flink's ``FailoverStrategy``: ``region`` restarts the failed
  pipelined regions and every started region downstream of them
  (``RestartPipelinedRegionFailoverStrategy``), ``full`` restarts everything
  (``RestartAllFailoverStrategy``);
* :func:`producers_of_lost_partitions` - a task that could not read its inputs names the lost
  partitions; their finished producers run again with it;
* :func:`lost_results_still_needed` - the finished results lost with a task executor
  (``exchange.storage: local``) that some consumer still needs.

Each runs in time linear in the vertices and wiring groups: an ALL_TO_ALL connection is visited
once through its shared groups, never pair by pair.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sparkmill.common.core.ids import IntermediateDataSetID
from sparkmill.common.core.partitions import NO_DATA_PARTITIONER
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from sparkmill.services.jobmaster.executiongraph.execution_topology import (
    ExecutionVertex,
    PartitionID,
    PipelinedRegion,
)

ES = ExecutionState


def no_data_results(job_graph: JobGraph) -> frozenset[IntermediateDataSetID]:
    """Data sets whose every consumer only waits for them (no records): never "lost"."""
    consumed = [e for jv in job_graph.vertices for e in jv.inputs]
    return frozenset(e.source for e in consumed if e.partitioner == NO_DATA_PARTITIONER) - {
        e.source for e in consumed if e.partitioner != NO_DATA_PARTITIONER
    }


def vertices_to_restart(
    graph: ExecutionGraph, origins: Sequence[ExecutionVertex], strategy: str
) -> list[ExecutionVertex]:
    """The subtasks to restart when ``origins`` failed, under failover ``strategy``."""
    if strategy == "full":
        return list(graph.all_execution_vertices())
    # The failed regions and every region downstream of them that has started: their
    # inputs will be produced again, so whatever they did with the old ones is void.
    # Each consumed group is looked at once (ALL_TO_ALL producers all share one), so this
    # stays linear in vertices and groups however many origins there are.
    regions: dict[int, PipelinedRegion] = {}
    seen_groups: set[int] = set()
    todo = [graph.region_of(v) for v in origins]
    while todo:
        region = todo.pop()
        if region.index in regions:
            continue
        regions[region.index] = region
        for vertex in region:
            for partition in vertex.produced_partitions:
                for group in partition.consumed_partition_groups:
                    if id(group) in seen_groups:
                        continue
                    seen_groups.add(id(group))
                    for consumer in group.consumer_vertex_group:
                        if consumer.current_execution.state is ES.CREATED:
                            continue
                        consumer_region = graph.region_of(consumer)
                        if consumer_region.index not in regions:
                            todo.append(consumer_region)
    return [v for r in regions.values() for v in r]


def producers_of_lost_partitions(
    graph: ExecutionGraph, lost: Iterable[tuple[str, int, str]]
) -> list[ExecutionVertex]:
    """The finished producers whose current results are the ``lost`` partitions (dataset id,
    partition number, producer attempt id); reports about results that are already being
    produced again are ignored."""
    found: dict[int, ExecutionVertex] = {}
    for dataset_id, number, attempt_id in lost:
        try:
            partition = graph.partition(PartitionID(IntermediateDataSetID(dataset_id), number))
        except (KeyError, IndexError):
            continue
        producer = partition.producer.current_execution
        if producer.attempt_id == attempt_id and producer.state is ES.FINISHED:
            found.setdefault(id(partition.producer), partition.producer)
    return list(found.values())


def results_lost_with(
    graph: ExecutionGraph,
    resource_id: str,
    pending: set[int],
    no_data_results: frozenset[IntermediateDataSetID],
    strategy: str,
) -> list[ExecutionVertex]:
    """The finished subtasks whose results were written on task executor ``resource_id``
    (now lost with it) and must be produced again; those a pending restart resets anyway
    (``pending``: their ids) are left to it."""
    written_there = [
        v
        for v in graph.all_execution_vertices()
        if v.current_execution.state is ES.FINISHED
        and v.current_execution.task_executor_id == resource_id
        and id(v) not in pending
    ]
    return lost_results_still_needed(graph, written_there, no_data_results, strategy)


def lost_results_still_needed(
    graph: ExecutionGraph,
    written_there: Sequence[ExecutionVertex],
    no_data_results: frozenset[IntermediateDataSetID],
    strategy: str,
) -> list[ExecutionVertex]:
    """Of the finished subtasks in ``written_there``, whose results were lost, those whose
    results are still needed and must be produced again."""
    # Needed: a consumer has not finished, or will run again because of another lost
    # result (so until nothing changes; one round when consumers are all unfinished).
    lost: list[ExecutionVertex] = []
    restarting: set[int] = set()
    while True:
        chosen = {id(v) for v in lost}
        needed_by_group: dict[int, bool] = {}  # consumer groups are shared: decide once
        more = [
            v
            for v in written_there
            if id(v) not in chosen
            and _result_still_needed(v, no_data_results, restarting, needed_by_group)
        ]
        if not more:
            return lost
        lost.extend(more)
        restarting = {id(v) for v in vertices_to_restart(graph, lost, strategy)}


def _result_still_needed(
    vertex: ExecutionVertex,
    no_data_results: frozenset[IntermediateDataSetID],
    restarting: set[int],
    cache: dict[int, bool],
) -> bool:
    for partition in vertex.produced_partitions:
        if partition.result.id in no_data_results:
            continue
        if not partition.consumer_vertex_groups and partition.result.subpartitions:
            return True  # read by a vertex not decided yet: all of it will be read
        for group in partition.consumer_vertex_groups:
            needed = cache.get(id(group))
            if needed is None:
                needed = cache[id(group)] = any(
                    c.current_execution.state is not ES.FINISHED or id(c) in restarting
                    for c in group.vertices
                )
            if needed:
                return True
    return False


__all__ = [
    "lost_results_still_needed",
    "producers_of_lost_partitions",
    "results_lost_with",
    "vertices_to_restart",
]
