"""The JobMaster's side of automatic parallelism when a job starts: the sources sized off the
event loop, then :func:`~sparkmill.common.jobgraph.auto_parallelism.plan_parallelism` (what is
decided now, what waits for its producers)."""

from __future__ import annotations

from collections.abc import Callable

from sparkmill.common.jobgraph.auto_parallelism import (
    ParallelismPlan,
    plan_parallelism,
    size_sources,
)
from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import AutoParallelismSettings
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from sparkmill.services.jobmaster.executiongraph.graph_building import build_execution_graph


async def plan_open_parallelism(
    graph: JobGraph, settings: AutoParallelismSettings, runtime: ServiceRuntime
) -> ParallelismPlan:
    """The plan for ``graph``'s open parallelisms; listing the sources' files is blocking disk
    work, so it runs in the runtime's executor."""
    if not any(vertex.is_auto for vertex in graph.vertices):
        return ParallelismPlan(graph, {}, {}, {})
    sizes = await runtime.run_blocking(size_sources, graph)
    return plan_parallelism(graph, sizes, settings)


async def build_decided_graph(
    job_graph: JobGraph,
    settings: AutoParallelismSettings,
    runtime: ServiceRuntime,
    *,
    stopped: Callable[[], bool],
    on_slice: Callable[[], None] | None = None,
) -> tuple[ParallelismPlan, ExecutionGraph | None]:
    """The plan of ``job_graph``'s open parallelisms (its layout is what a successor must
    match to keep finished subtasks), and the execution graph built by it (None when
    ``stopped`` said so while it was built; ``on_slice`` as for :func:`build_execution_graph`):
    the late vertices still without subtasks. Raises
    ``ValueError`` for a graph that cannot be expanded."""
    plan = await plan_open_parallelism(job_graph, settings, runtime)
    graph = await build_execution_graph(
        plan.graph, stopped=stopped, late_bounds=plan.late_bounds, on_slice=on_slice
    )
    if graph is not None:
        graph.parallelism_decisions = {vid: d.text for vid, d in plan.decisions.items()}
        graph.parallelism_decisions.update(
            {vid: plan.pending_text(vid) for vid in plan.late_bounds}
        )
    return plan, graph
