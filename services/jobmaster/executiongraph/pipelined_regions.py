"""Pipelined regions: the units the scheduler deploys (and restarts) together.

Subtasks connected by a PIPELINED result exchange data while both run, so they must be deployed
together: a region is a connected component of the graph whose edges are the PIPELINED
connections (computed with union-find). A BLOCKING result is fully written before it is read,
so it does not join its producer and consumer; in a pure batch job every subtask is its own
region.

One more rule keeps scheduling free of deadlocks: if BLOCKING connections make regions depend on
each other in a cycle (region A feeds region B through a BLOCKING result and B feeds A), no
region of the cycle could ever start first, so the regions of the cycle are merged into one.

Everything here is O(V + S + T) over the wiring groups: an ALL_TO_ALL connection is visited once
through its shared groups, never pair by pair.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence

from sparkmill.common.jobgraph.graphs import strongly_connected_components
from sparkmill.common.jobgraph.model import ResultPartitionType
from sparkmill.services.jobmaster.executiongraph.execution_topology import (
    ConsumedPartitionGroup,
    ExecutionVertex,
    PipelinedRegion,
)


class _UnionFind:
    __slots__ = ("parent",)

    def __init__(self, size: int) -> None:
        self.parent = list(range(size))

    def find(self, x: int) -> int:
        parent = self.parent
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # The smaller index becomes the root: deterministic, cheap, good enough here.
            if ra < rb:
                self.parent[rb] = ra
            else:
                self.parent[ra] = rb


def compute_pipelined_regions(
    vertices: Sequence[ExecutionVertex], groups: Sequence[ConsumedPartitionGroup]
) -> list[PipelinedRegion]:
    """Compute the regions of ``vertices`` (in topological order, ``v._index == position``)
    given every consumed partition group of the graph (each group once).

    Sets ``_region`` on every vertex and returns the regions ordered by their first vertex.
    """
    steps = compute_pipelined_regions_in_steps(vertices, groups, chunk=len(vertices) + 1)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            regions: list[PipelinedRegion] = done.value
            return regions


def compute_pipelined_regions_in_steps(
    vertices: Sequence[ExecutionVertex], groups: Sequence[ConsumedPartitionGroup], *, chunk: int
) -> Generator[None, None, list[PipelinedRegion]]:
    """:func:`compute_pipelined_regions`, pausing (yielding) after about ``chunk`` vertices or
    wired members; returns the regions when exhausted (part of the graph built in steps)."""
    uf = _UnionFind(len(vertices))
    blocking: list[ConsumedPartitionGroup] = []
    work = 0
    for group in groups:
        if group.result_type is not ResultPartitionType.PIPELINED:
            blocking.append(group)
            continue
        anchor = group.consumer_vertex_group.vertices[0]._index
        for partition in group.partitions:
            uf.union(anchor, partition.producer._index)
        for consumer in group.consumer_vertex_group.vertices:
            uf.union(anchor, consumer._index)
        work += len(group.partitions) + len(group.consumer_vertex_group.vertices)
        if work >= chunk:
            work = 0
            yield

    if blocking and any(uf.find(i) != i for i in range(len(vertices))):
        # Some region has several vertices, so BLOCKING edges might close a cycle of regions.
        _merge_regions_on_cycles(uf, blocking)
        yield

    members: dict[int, list[ExecutionVertex]] = {}
    for position, vertex in enumerate(vertices, 1):
        members.setdefault(uf.find(vertex._index), []).append(vertex)
        if position % chunk == 0:
            yield
    regions: list[PipelinedRegion] = []
    work = 0
    for index, region_vertices in enumerate(members.values()):
        region = PipelinedRegion(index, region_vertices)
        regions.append(region)
        for vertex in region_vertices:
            vertex._region = region
        work += len(region_vertices)
        if work >= chunk:
            work = 0
            yield
    yield from _attach_blocking_inputs(regions, blocking, chunk)
    return regions


def _merge_regions_on_cycles(uf: _UnionFind, blocking: Sequence[ConsumedPartitionGroup]) -> None:
    """Merge the regions that depend on each other in a cycle through BLOCKING groups.

    The dependency graph has one node per region root and one "hub" node per BLOCKING group:
    producer regions -> hub -> consumer regions. A hub stands for the complete bipartite set of
    region edges of its group, so region reachability (and thus the cycles) is preserved while
    the graph stays linear in size.
    """
    node_of_root: dict[int, int] = {}
    successors: list[list[int]] = []

    def node(root: int) -> int:
        found = node_of_root.get(root)
        if found is None:
            found = len(successors)
            node_of_root[root] = found
            successors.append([])
        return found

    for group in blocking:
        producer_nodes = {node(uf.find(p.producer._index)) for p in group.partitions}
        consumer_nodes = {node(uf.find(v._index)) for v in group.consumer_vertex_group.vertices}
        hub = len(successors)
        successors.append(sorted(consumer_nodes))
        for producer_node in producer_nodes:
            successors[producer_node].append(hub)

    root_of_node = {n: root for root, n in node_of_root.items()}
    for component in strongly_connected_components(successors):
        roots = [root_of_node[n] for n in component if n in root_of_node]
        for other in roots[1:]:
            uf.union(roots[0], other)


def _attach_blocking_inputs(
    regions: Sequence[PipelinedRegion], blocking: Sequence[ConsumedPartitionGroup], chunk: int
) -> Iterator[None]:
    # A group whose producers all sit in one region is internal to that region (only possible
    # after a cycle merge); find that region once per group, in O(partitions).
    sole_producer_region: dict[int, PipelinedRegion | None] = {}
    work = 0
    for group in blocking:
        first = group.partitions[0].producer._region
        same = all(p.producer._region is first for p in group.partitions)
        sole_producer_region[id(group)] = first if same else None
        work += len(group.partitions)
        if work >= chunk:
            work = 0
            yield
    for region in regions:
        seen: set[int] = set()
        inputs: list[ConsumedPartitionGroup] = []
        for vertex in region.vertices:
            for group in vertex.consumed_partition_groups:
                key = id(group)
                if key in seen or key not in sole_producer_region:
                    continue
                seen.add(key)
                if sole_producer_region[key] is not region:
                    inputs.append(group)
        region.blocking_consumed_groups = tuple(inputs)
        work += len(region.vertices)
        if work >= chunk:
            work = 0
            yield


__all__ = ["compute_pipelined_regions", "compute_pipelined_regions_in_steps"]
