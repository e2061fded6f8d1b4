"""Building a job's :class:`ExecutionGraph` without holding the JobMaster's event loop.

A 10,000 x 10,000 job has 20,000 subtasks, each with its first attempt and its partitions:
about 0.2 s of CPU on an idle core, seconds on a loaded one. Built in one go on the loop, that
stalls every other job of the job-master process (their heartbeats, RPCs and deployments).

:func:`build_execution_graph` drives :meth:`ExecutionGraph.build_in_steps` on the loop and gives
the loop a turn whenever a slice of about :data:`BUILD_SLICE_S` has run. It is built on the
loop rather than in a worker thread: the graph is pure Python (a thread would hold the GIL the
loop needs anyway), and on the loop the builder can be stopped between two slices without any
hand-over. Until the build returns, the graph is reachable only from the builder: it becomes
the JobMaster's state in one step at the end, so nobody ever sees half a graph.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sparkmill.common.core.ids import JobVertexID, short
from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    BUILD_CHUNK,
    ExecutionGraph,
)

log = logging.getLogger(__name__)

BUILD_SLICE_S = 0.01
"""How long the builder may hold the loop before it gives the loop a turn."""


@dataclass
class BuildStats:
    """How a build went: how many slices, the longest one (what the loop waited at worst) and
    the whole time from the first slice to the last (turns of the loop included)."""

    slices: int = 0
    longest_slice_s: float = 0.0
    elapsed_s: float = 0.0


async def build_execution_graph(
    job_graph: JobGraph,
    *,
    stopped: Callable[[], bool],
    clock: Callable[[], float] = time.time,
    slice_s: float = BUILD_SLICE_S,
    chunk: int = BUILD_CHUNK,
    monotonic: Callable[[], float] = time.monotonic,
    stats: BuildStats | None = None,
    late_bounds: Mapping[JobVertexID, int] | None = None,
    on_slice: Callable[[], None] | None = None,
) -> ExecutionGraph | None:
    """Build the execution graph of ``job_graph`` in slices, yielding to the loop between them.

    ``stopped`` is asked after every pause: when it answers True (the job was cancelled or the
    JobMaster let go of it meanwhile) the half-built graph is dropped and None is returned.
    ``clock`` stamps the attempts' states; ``monotonic`` measures the slices (``stats``, if
    given, is filled in; a completed build is logged with them). ``late_bounds``: see
    :meth:`ExecutionGraph.build`. Raises what
    :meth:`ExecutionGraph.build` raises for a malformed job graph.

    ``on_slice`` is called after every slice of a build that takes more than one (a large
    graph: the JobMaster freezes what it built so far, see ``common/runtime/heap.py``).
    """
    stats = stats if stats is not None else BuildStats()
    steps = ExecutionGraph.build_in_steps(
        job_graph, clock=clock, chunk=chunk, late_bounds=late_bounds
    )
    started = slice_started = monotonic()

    def end_slice(now: float) -> None:
        stats.slices += 1
        stats.longest_slice_s = max(stats.longest_slice_s, now - slice_started)
        stats.elapsed_s = now - started

    try:
        while True:
            try:
                next(steps)
            except StopIteration as done:
                end_slice(monotonic())
                if on_slice is not None and stats.slices > 1:
                    on_slice()
                graph: ExecutionGraph = done.value
                log.info(
                    "job %s: execution graph of %d subtasks built in %.3f s, %d slices, "
                    "longest %.1f ms",
                    short(job_graph.job_id),
                    graph.num_execution_vertices,
                    stats.elapsed_s,
                    stats.slices,
                    stats.longest_slice_s * 1000,
                )
                return graph
            now = monotonic()
            if now - slice_started >= slice_s:
                end_slice(now)
                if on_slice is not None:
                    on_slice()
                await asyncio.sleep(0)
                if stopped():
                    return None
                slice_started = monotonic()
    finally:
        steps.close()


__all__ = ["BUILD_SLICE_S", "BuildStats", "build_execution_graph"]
