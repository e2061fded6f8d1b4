"""``sparkmill explain FILE [-- ARGS...] [--json]``: what a pipeline becomes, without a cluster.

The file is loaded and compiled exactly as ``submit`` would (so every build-time check runs:
schema strings, known columns, sinks), but nothing is started: no service, no Spark JVM. The
output lists the job vertices (each a chain of operators), the exchanges between them with
their partitioner, the parallelism and the sinks, the way Flink's ``ExecutionPlan`` JSON
describes a job before it runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sparkmill.cli.exit_codes import EXIT_OK
from sparkmill.cli.options import SubParsers
from sparkmill.cli.pipeline_loading import (
    PipelineLoadError,
    attach_pipeline_args,
    load_pipeline,
)
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import PipelineError, SparkmillError
from sparkmill.common.core.ids import JobVertexID
from sparkmill.common.jobgraph.auto_parallelism import (
    ParallelismDecision,
    decide_parallelism,
    plan_parallelism,
    size_sources,
)
from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.common.runtime.settings import job_settings_from_config


def add_parser(sub: SubParsers[argparse.ArgumentParser]) -> None:
    explain = sub.add_parser(
        "explain",
        help="show the job a pipeline file becomes (no cluster needed)",
        description="Load and compile a pipeline file, without a cluster or a Spark JVM, and "
        "show its vertices, chains, exchanges, parallelism and sinks: "
        "sparkmill explain FILE [-- ARGS...]",
    )
    explain.add_argument(
        "pipeline", type=Path, metavar="FILE", help="the pipeline file (its arguments after --)"
    )
    explain.add_argument("--json", action="store_true", help="print the plan as JSON")


def explain(args: argparse.Namespace) -> int:
    pipeline = load_pipeline(args.pipeline, args.pipeline_args)
    document = plan_document(pipeline, args.pipeline, args.pipeline_args)
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(plan_text(document))
    return EXIT_OK


def plan_document(pipeline: Any, path: Path, pipeline_args: list[str]) -> dict[str, Any]:
    """The compiled plan as a JSON-ready document (a :class:`PipelineLoadError` naming
    ``path`` when the pipeline does not build)."""
    from sparkmill.pipeline import Pipeline

    operators: dict[str, list[str]] = {}
    collects: dict[str, str] = {}
    sinks: dict[str, dict[str, str]] = {}
    try:
        if isinstance(pipeline, Pipeline):
            from sparkmill._compile import compile_pipeline
            from sparkmill.common.pipeline import plan as S

            compiled = compile_pipeline(pipeline)
            graph = compiled.graph
            operators = compiled.vertex_ops
            collects = {vertex: name for name, vertex in compiled.collect_vertices.items()}
            for node in pipeline.nodes:
                if isinstance(node.op, S.SinkOutput):
                    sinks[node.op.path] = {"format": node.op.format, "mode": node.op.mode}
        else:
            graph = pipeline.build_job_graph()
    except (PipelineError, ValueError, TypeError) as exc:
        raise PipelineLoadError(
            f"{getattr(exc, 'origin', '') or path}: building the pipeline failed: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    except SparkmillError:
        raise
    attach_pipeline_args(graph, pipeline_args)
    producer = {ds.id: v.name for v in graph.vertices for ds in v.produced}
    vertices: list[dict[str, Any]] = []
    exchanges: list[dict[str, str]] = []
    expected, late = expected_parallelism(graph)
    for vertex in graph.vertices:
        decision = expected.get(vertex.id)
        vertices.append(
            {
                "name": vertex.name,
                "parallelism": "auto" if vertex.is_auto else vertex.parallelism,
                # What the cluster's defaults would decide from the files as seen here; for a
                # vertex decided late, the most it may get (its producers' split).
                "expected_parallelism": decision.parallelism if decision else None,
                "expected_because": decision.reason if decision else None,
                "decided_late": vertex.id in late,
                "operators": operators.get(vertex.name, [vertex.name]),
                "slot_sharing_group": vertex.slot_sharing_group,
                "sinks": list(vertex.sink_paths) if vertex.name != "commit" else [],
                "collect": collects.get(vertex.name),
            }
        )
        for edge in vertex.inputs:
            exchanges.append(
                {
                    "from": producer.get(edge.source, "?"),
                    "to": vertex.name,
                    "partitioner": edge.partitioner,
                    "pattern": edge.pattern.name,
                }
            )
    return {
        "file": str(path),
        "name": graph.name,
        "arguments": list(pipeline_args),
        "vertices": vertices,
        "exchanges": exchanges,
        "sinks": [
            {"vertex": v["name"], "path": p, **sinks.get(p, {})}
            for v in vertices
            for p in v["sinks"]
        ],
        "collects": [{"vertex": v, "name": n} for v, n in collects.items()],
        # An open vertex counts with its expected parallelism.
        "subtasks": sum(
            v["parallelism"] if v["parallelism"] != "auto" else v["expected_parallelism"] or 1
            for v in vertices
        ),
        "auto_vertices": sum(1 for v in vertices if v["parallelism"] == "auto"),
        "config": dict(graph.config),
    }


def expected_parallelism(
    graph: JobGraph,
) -> tuple[dict[JobVertexID, ParallelismDecision], set[JobVertexID]]:
    """What a JobMaster with the default keys (and the job's own) would decide for the open
    vertices when the job starts, from the input files as this machine sees them, and which of
    them it decides only once their producers have finished (their number here is their
    bound: the most they may get)."""
    if not any(vertex.is_auto for vertex in graph.vertices):
        return {}, set()
    settings = job_settings_from_config(
        Configuration().with_overrides(graph.config, job_scope=True)
    ).auto_parallelism
    sizes = size_sources(graph)
    _, decisions = decide_parallelism(graph, sizes, settings)
    late = plan_parallelism(graph, sizes, settings).late_bounds
    for vertex_id, bound in late.items():
        decisions[vertex_id] = ParallelismDecision(
            bound,
            f"decided once its inputs have finished, from the bytes they wrote; at most {bound} "
            f"(estimated: {decisions[vertex_id].reason})",
        )
    return decisions, set(late)


def plan_text(document: dict[str, Any]) -> str:
    """The plan as tables: vertices (with their operator chains), exchanges, sinks."""
    args = " ".join(document["arguments"])
    lines = [
        f"pipeline '{document['name']}' from {document['file']}"
        + (f" with arguments: {args}" if args else ""),
        f"{len(document['vertices'])} vertices, {document['subtasks']} subtasks"
        + (
            f" (the cluster decides {document['auto_vertices']} parallelisms from the data: "
            "'auto (n)': what its default keys decide from the files as seen here when the job "
            "starts; 'auto (<=n)': decided once its inputs have finished, at most n)"
            if document.get("auto_vertices")
            else ""
        ),
        "",
        f"{'#':>3}  {'PARALLELISM':>11}  VERTEX (operators chained into one task)",
    ]
    for number, vertex in enumerate(document["vertices"], 1):
        shown = vertex["parallelism"]
        if vertex.get("expected_parallelism"):
            at_most = "<=" if vertex.get("decided_late") else ""
            shown = f"auto ({at_most}{vertex['expected_parallelism']})"
        lines.append(f"{number:>3}  {shown:>11}  {vertex['name']}")
        if vertex.get("expected_because"):
            lines.append(f"{'':>18}auto: {vertex['expected_because']}")
        if len(vertex["operators"]) > 1:
            lines.append(f"{'':>18}chain: {' | '.join(vertex['operators'])}")
    lines += ["", f"{'PARTITIONER':<12} {'PATTERN':<11} FROM -> TO"]
    for exchange in document["exchanges"]:
        lines.append(
            f"{exchange['partitioner']:<12} {exchange['pattern']:<11} "
            f"{exchange['from']} -> {exchange['to']}"
        )
    lines += ["", "SINKS"]
    for sink in document["sinks"]:
        kind = f"{sink.get('format', '?')}, mode {sink.get('mode', '?')}"
        lines.append(f"  {sink['path']} ({kind}) <- {sink['vertex']}")
    for collect in document["collects"]:
        lines.append(f"  collect '{collect['name']}' <- {collect['vertex']}")
    if not document["sinks"] and not document["collects"]:
        lines.append("  (none)")
    return "\n".join(lines)


__all__ = ["add_parser", "explain", "plan_document", "plan_text"]
