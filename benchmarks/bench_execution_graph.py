"""Build a two-vertex ALL_TO_ALL execution graph of P x P subtasks; print time and memory.

A plain script, not a test::

    PYTHONPATH=. python benchmarks/bench_execution_graph.py --parallelism 10000

Thanks to the shared wiring groups the build is O(P), so 10,000 x 10,000 (10^8 logical edges)
should take well under a second and a few tens of MiB.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
import tracemalloc

from sparkmill.common.core.ids import new_dataset_id, new_job_id, new_vertex_id
from sparkmill.common.jobgraph.model import (
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
    ResultPartitionType,
)
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph


def two_vertex_job(
    parallelism: int, pattern: DistributionPattern, result_type: ResultPartitionType
) -> JobGraph:
    source_id, sink_id, dataset_id = new_vertex_id(), new_vertex_id(), new_dataset_id()
    source = JobVertex(
        source_id,
        "source",
        parallelism,
        OperatorSpec("noop"),
        produced=[IntermediateDataSet(dataset_id, source_id, result_type)],
    )
    sink = JobVertex(
        sink_id,
        "sink",
        parallelism,
        OperatorSpec("noop"),
        inputs=[JobEdge(dataset_id, sink_id, pattern)],
    )
    return JobGraph(new_job_id(), "bench", [source, sink])


def _max_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--parallelism", type=int, default=10_000, help="P (default 10000)")
    parser.add_argument(
        "--pattern",
        choices=[p.name for p in DistributionPattern],
        default=DistributionPattern.ALL_TO_ALL.name,
    )
    parser.add_argument(
        "--result-type",
        choices=[t.name for t in ResultPartitionType],
        default=ResultPartitionType.BLOCKING.name,
    )
    parser.add_argument(
        "--regions", action="store_true", help="also time the pipelined region computation"
    )
    args = parser.parse_args(argv)

    job = two_vertex_job(
        args.parallelism,
        DistributionPattern[args.pattern],
        ResultPartitionType[args.result_type],
    )
    rss_before = _max_rss_mib()

    # Untraced run first: tracemalloc slows allocation down, so it would distort the time.
    gc.collect()
    started = time.perf_counter()
    graph = ExecutionGraph.build(job)
    build_s = time.perf_counter() - started
    regions_s = None
    if args.regions:
        started = time.perf_counter()
        regions = graph.pipelined_regions()
        regions_s = time.perf_counter() - started
    rss_after = _max_rss_mib()
    del graph
    gc.collect()

    tracemalloc.start()
    traced_graph = ExecutionGraph.build(job)
    if args.regions:
        regions = traced_graph.pipelined_regions()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    p = args.parallelism
    print(
        f"graph:            {p} x {p} {args.pattern} ({args.result_type}), {p * p:,} logical edges"
    )
    print(f"subtasks:         {traced_graph.num_execution_vertices:,}")
    print(f"build wall time:  {build_s * 1000:.1f} ms")
    if regions_s is not None:
        print(f"regions:          {len(regions):,} computed in {regions_s * 1000:.1f} ms")
    print(f"traced memory:    {current / 2**20:.1f} MiB held, {peak / 2**20:.1f} MiB peak")
    print(f"max RSS:          {rss_before:.1f} MiB before build, {rss_after:.1f} MiB after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
