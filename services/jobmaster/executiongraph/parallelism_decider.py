"""The JobMaster's side of automatic parallelism: the sources sized off the event loop, then
the decisions of :mod:`sparkmill.common.jobgraph.auto_parallelism`."""

from __future__ import annotations

from collections.abc import Callable

from sparkmill.common.core.ids import JobVertexID
from sparkmill.common.jobgraph.auto_parallelism import (
    ParallelismDecision,
    decide_parallelism,
    layout_of,
    size_sources,
)
from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import AutoParallelismSettings
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from sparkmill.services.jobmaster.executiongraph.graph_building import build_execution_graph


async def decide_open_parallelism(
    graph: JobGraph, settings: AutoParallelismSettings, runtime: ServiceRuntime
) -> tuple[JobGraph, dict[JobVertexID, ParallelismDecision]]:
    """``graph`` with its open parallelisms decided; listing the sources' files is blocking
    disk work, so it runs in the runtime's executor."""
    if not any(vertex.is_auto for vertex in graph.vertices):
        return graph, {}
    sizes = await runtime.run_blocking(size_sources, graph)
    return decide_parallelism(graph, sizes, settings)


async def build_decided_graph(
    job_graph: JobGraph,
    settings: AutoParallelismSettings,
    runtime: ServiceRuntime,
    *,
    stopped: Callable[[], bool],
) -> tuple[str, ExecutionGraph | None]:
    """The execution graph of ``job_graph`` with its open parallelisms decided (None when
    ``stopped`` said so while it was built), and the layout fingerprint of the decisions
    (what a successor must match to keep finished subtasks). Raises ``ValueError`` for a
    graph that cannot be expanded."""
    decided, decisions = await decide_open_parallelism(job_graph, settings, runtime)
    graph = await build_execution_graph(decided, stopped=stopped)
    if graph is not None:
        graph.parallelism_decisions = {vid: d.text for vid, d in decisions.items()}
    return layout_of(decided), graph
