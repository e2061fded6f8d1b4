"""Compile a :class:`~sparkmill.pipeline.Pipeline` into a JobGraph of ``spark`` vertices.

1. Only operators that lead to a sink or ``collect()`` are kept; a pipeline without one fails.
2. Parallelism: an explicit ``set_parallelism`` wins; sources, aggregations, hash joins and
   operators after ``rebalance()`` take the pipeline's default; other operators inherit their
   (forward) input's, a broadcast join its probe side's and a union the largest of its inputs'.
   A pipeline without a default leaves those open (``AUTO_PARALLELISM``): the JobMaster decides
   them from the input's size, so a vertex with file sources declares their paths.
3. Aggregations made only of aliased ``count``/``sum``/``min``/``max`` are split in two: a
   partial aggregation chained to the upstream operator, then the exchange, then the merge.
4. Chaining: an operator joins its input's vertex when the edge is forward, both have the same
   parallelism, resources and slot sharing group, and the input feeds nothing else (a sink or
   collect joins also an input that feeds other operators: it is one more output). A vertex is
   thus an in-tree of operators with one root; every other edge becomes a BLOCKING data set:
   forward → POINTWISE, hash / rebalance / broadcast → ALL_TO_ALL.
5. Every sink and collect vertex also produces an empty data set read by a final
   parallelism-1 ``commit`` vertex, which publishes the sinks and drops the exchange data.
"""

from __future__ import annotations

import contextlib
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkmill._logical import LogicalPlan, Node
from sparkmill._plan_check import check_plan
from sparkmill.common.core.errors import PipelineError
from sparkmill.common.core.ids import new_dataset_id, new_job_id, new_vertex_id
from sparkmill.common.core.partitions import NO_DATA_PARTITIONER
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.exchange.skewed_splits import splittable_sides
from sparkmill.common.jobgraph.model import (
    AUTO_PARALLELISM,
    SPARK_OPERATOR_KIND,
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
)
from sparkmill.common.pipeline import plan as S
from sparkmill.common.pipeline.expressions import Expr

COMMIT_VERTEX_NAME = "commit"
_MERGE_OF = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}
_PROJECT_PACKAGES = frozenset({"sparkmill", "services", "common", "pyspark", "py4j"})


@dataclass(eq=False)
class _Op:
    """A working copy of a logical node (the compiler may add partial aggregations)."""

    label: str
    op: Any
    parallelism: int
    resources: ResourceProfile | None
    slot_sharing_group: str | None
    inputs: list[tuple[_Op, str, tuple[str, ...]]] = field(default_factory=list)
    consumers: list[_Op] = field(default_factory=list)
    origin: str = ""  # file:line of the pipeline code that created it

    @property
    def is_terminal(self) -> bool:
        return isinstance(self.op, S.Terminal)


@dataclass
class CompiledPipeline:
    graph: JobGraph
    collect_vertices: dict[str, str]  # collect name -> job vertex name
    vertex_ops: dict[str, list[str]]  # job vertex name -> operator labels (for tests/explain)


def compile_pipeline(pipeline: LogicalPlan) -> CompiledPipeline:
    check_plan(pipeline)  # schema strings and known column names, before anything else
    ops = _working_copy(pipeline)
    ops = _split_aggregations(ops)
    _check_sinks(ops)
    groups = _chain(ops)
    return _build_graph(pipeline, ops, groups)


# -- 1 + 2: reachability and parallelism ------------------------------------------------------


def _working_copy(pipeline: LogicalPlan) -> list[_Op]:
    needed: set[int] = set()
    for node in reversed(pipeline.nodes):
        if node.is_terminal or node.index in needed:
            needed.add(node.index)
            needed.update(edge.node.index for edge in node.inputs)
    if not any(n.is_terminal for n in pipeline.nodes):
        raise PipelineError(
            f"pipeline '{pipeline.name}' has no sink: end it with write_parquet(), write_csv(), "
            "write_json(), write_jdbc() or collect()"
        )
    copies: dict[int, _Op] = {}
    for node in pipeline.nodes:
        if node.index not in needed:
            continue
        inputs = [(copies[e.node.index], e.partitioner, e.keys) for e in node.inputs]
        parallelism = node.parallelism or _default_parallelism(pipeline, node, inputs)
        op = _Op(
            node.label,
            node.op,
            parallelism,
            node.resources,
            node.slot_sharing_group,
            inputs,
            origin=node.origin,
        )
        if isinstance(node.op, S.Aggregate) and not node.combine:
            op.op = _NoCombine(node.op)
        copies[node.index] = op
    ordered = list(copies.values())
    _link_consumers(ordered)
    return ordered


@dataclass(frozen=True)
class _NoCombine:
    """An aggregation the user asked not to split (unwrapped when the chain spec is built)."""

    aggregate: S.Aggregate


def _default_parallelism(
    pipeline: LogicalPlan, node: Node, inputs: list[tuple[_Op, str, tuple[str, ...]]]
) -> int:
    default = AUTO_PARALLELISM if pipeline.parallelism is None else pipeline.parallelism
    if not inputs or isinstance(node.op, S.Aggregate):
        return default
    if isinstance(node.op, S.Join):
        probe = [op for op, partitioner, _ in inputs if partitioner != S.BROADCAST]
        broadcast = len(probe) < len(inputs)
        return probe[0].parallelism if broadcast and probe else default
    if isinstance(node.op, S.Union):
        return max(op.parallelism for op, _, _ in inputs)
    upstream, partitioner, _ = inputs[0]
    return upstream.parallelism if partitioner == S.FORWARD else default


def _link_consumers(ops: list[_Op]) -> None:
    for op in ops:
        op.consumers = []
    for op in ops:
        for upstream, _, _ in op.inputs:
            upstream.consumers.append(op)


# -- 3: split aggregations ----------------------------------------------------------------------


def split_aggregates(
    aggs: tuple[Any, ...],
) -> tuple[tuple[Expr, ...], tuple[tuple[str, str, str], ...]] | None:
    """Partial aggregates and (merge function, partial column, output name) per aggregate, or
    None when some aggregate is not an aliased count/sum/min/max of one argument."""
    partials: list[Expr] = []
    merges: list[tuple[str, str, str]] = []
    for i, agg in enumerate(aggs):
        if not isinstance(agg, Expr) or agg.method_target is None or agg.method_name != "alias":
            return None
        alias_args = agg.call_args
        if len(alias_args) != 1 or not isinstance(alias_args[0], str) or agg.call_kwargs:
            return None
        inner = agg.method_target
        function = inner.function_name
        if function not in _MERGE_OF or len(inner.call_args) != 1 or inner.call_kwargs:
            return None
        partial = f"__sm_agg{i}"
        partials.append(inner.alias(partial))
        merges.append((_MERGE_OF[function], partial, alias_args[0]))
    return tuple(partials), tuple(merges)


def _split_aggregations(ops: list[_Op]) -> list[_Op]:
    out: list[_Op] = []
    for op in ops:
        if isinstance(op.op, S.Aggregate) and len(op.inputs) == 1:
            upstream, partitioner, keys = op.inputs[0]
            split = split_aggregates(op.op.aggs)
            if split is not None and partitioner == S.HASH and len(upstream.consumers) == 1:
                partials, merges = split
                partial = _Op(
                    f"partial {op.label}",
                    S.PartialAgg(op.op.keys, partials),
                    upstream.parallelism,
                    upstream.resources,
                    upstream.slot_sharing_group,
                    [(upstream, S.FORWARD, ())],
                )
                out.append(partial)
                op.inputs = [(partial, S.HASH, keys)]
                op.op = S.FinalAgg(op.op.keys, merges)
        out.append(op)
    _link_consumers(out)
    return out


# -- sinks ----------------------------------------------------------------------------------------


def _check_sinks(ops: list[_Op]) -> None:
    seen: dict[str, str] = {}
    tables: dict[tuple[str, str], str] = {}
    for op in ops:
        if isinstance(op.op, S.JdbcSinkOutput):
            table = (op.op.url, op.op.table.lower())
            if table in tables:
                raise PipelineError(
                    f"two sinks write to table {op.op.table} ('{tables[table]}' and '{op.label}')",
                    origin=op.origin,
                )
            tables[table] = op.label
            continue
        if not isinstance(op.op, S.SinkOutput):
            continue
        path = op.op.path
        if path in seen:
            raise PipelineError(
                f"two sinks write to {path} ('{seen[path]}' and '{op.label}')", origin=op.origin
            )
        seen[path] = op.label
        local = Path(path.removeprefix("file://").removeprefix("file:"))
        if op.op.mode == "error" and "://" not in path.removeprefix("file://") and local.is_dir():
            existing = [p.name for p in local.iterdir() if p.name != "_temporary"]
            if existing:
                raise PipelineError(
                    f"'{op.label}': the output path {path} already exists and is not empty "
                    "(write with mode='overwrite' to replace it)",
                    origin=op.origin,
                )


# -- 4: chaining ----------------------------------------------------------------------------------


def _chainable(upstream: _Op, downstream: _Op, partitioner: str) -> bool:
    # A sink or collect joins its input's vertex even when that input feeds other operators
    # too: it is one more output of the vertex's result (written from the files of its
    # exchange output), not an operator of its own, so the rows are not written to an
    # exchange and read back by a subtask that only writes them out again.
    return (
        partitioner == S.FORWARD
        and upstream.parallelism == downstream.parallelism
        and (len(upstream.consumers) == 1 or downstream.is_terminal)
        and upstream.resources == downstream.resources
        and upstream.slot_sharing_group == downstream.slot_sharing_group
    )


def _chain(ops: list[_Op]) -> list[list[_Op]]:
    """Groups of chained operators, each in topological order, groups ordered by their root."""
    index = {id(op): i for i, op in enumerate(ops)}
    parent = list(range(len(ops)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, op in enumerate(ops):
        for upstream, partitioner, _ in op.inputs:
            if _chainable(upstream, op, partitioner):
                parent[find(index[id(upstream)])] = find(i)
    members: dict[int, list[_Op]] = {}
    for i, op in enumerate(ops):
        members.setdefault(find(i), []).append(op)
    return sorted(members.values(), key=lambda group: index[id(group[-1])])


# -- 5: the job graph -----------------------------------------------------------------------------


@dataclass
class _Vertex:
    vertex: JobVertex
    members: list[_Op]
    outputs: list[S.Output] = field(default_factory=list)


def _build_graph(
    pipeline: LogicalPlan, ops: list[_Op], groups: list[list[_Op]]
) -> CompiledPipeline:
    graph = JobGraph(new_job_id(), pipeline.name, config=dict(pipeline.config))
    vertex_of: dict[int, _Vertex] = {}
    names: set[str] = {COMMIT_VERTEX_NAME}
    built: list[_Vertex] = []
    for members in groups:
        root = members[-1]
        name = _unique(" -> ".join(m.label for m in members), names)
        vertex = JobVertex(
            id=new_vertex_id(),
            name=name,
            parallelism=root.parallelism,
            operator=OperatorSpec(SPARK_OPERATOR_KIND),
            resource_profile=root.resources or UNKNOWN_PROFILE,
        )
        if root.slot_sharing_group:
            vertex.slot_sharing_group = root.slot_sharing_group
        for member in members:
            if isinstance(member.op, S.FileSource):
                vertex.source_paths.extend(member.op.paths)
        entry = _Vertex(vertex, members)
        built.append(entry)
        for member in members:
            vertex_of[id(member)] = entry
        graph.vertices.append(vertex)

    # Data sets for every edge between vertices.
    gate_of: dict[tuple[int, int], str] = {}
    for op in ops:
        for position, (upstream, partitioner, keys) in enumerate(op.inputs):
            producer, consumer = vertex_of[id(upstream)], vertex_of[id(op)]
            if producer is consumer:
                continue
            dataset = IntermediateDataSet(new_dataset_id(), producer.vertex.id)
            producer.vertex.produced.append(dataset)
            pattern = (
                DistributionPattern.POINTWISE
                if partitioner == S.FORWARD
                else DistributionPattern.ALL_TO_ALL
            )
            consumer.vertex.inputs.append(
                JobEdge(dataset.id, consumer.vertex.id, pattern, partitioner)
            )
            producer.outputs.append(S.ExchangeOutput(dataset.id, partitioner, keys, op.parallelism))
            gate_of[(id(op), position)] = dataset.id

    for entry in built:
        entry.vertex.skew_splittable_inputs = _skew_splittable_inputs(entry, gate_of)

    commit = JobVertex(
        id=new_vertex_id(),
        name=COMMIT_VERTEX_NAME,
        parallelism=1,
        operator=OperatorSpec(SPARK_OPERATOR_KIND),
    )
    sink_commits: list[S.SinkCommit] = []
    jdbc_commits: list[S.JdbcCommit] = []
    collect_vertices: dict[str, str] = {}
    for entry in built:
        terminals = [m for m in entry.members if m.is_terminal]
        if terminals:
            # One data set tells the commit that the vertex's subtasks have all finished,
            # whatever sinks it writes.
            done = IntermediateDataSet(new_dataset_id(), entry.vertex.id)
            entry.vertex.produced.append(done)
            commit.inputs.append(
                JobEdge(done.id, commit.id, DistributionPattern.ALL_TO_ALL, NO_DATA_PARTITIONER)
            )
        for terminal in terminals:
            entry.outputs.append(terminal.op)
            if isinstance(terminal.op, S.SinkOutput):
                entry.vertex.sink_paths.append(terminal.op.path)
                commit.sink_paths.append(terminal.op.path)
                sink_commits.append(
                    S.SinkCommit(
                        terminal.op.path,
                        terminal.op.format,
                        terminal.op.mode,
                        terminal.parallelism,
                        terminal.op.partition_by,
                        done.id,
                    )
                )
            elif isinstance(terminal.op, S.JdbcSinkOutput):
                jdbc_commits.append(S.JdbcCommit(terminal.op, terminal.parallelism, done.id))
            else:
                collect_vertices[terminal.op.name] = entry.vertex.name
        entry.vertex.operator.payload = _encode(_chain_spec(entry, gate_of))
    commit.operator.payload = _encode(S.CommitSpec(tuple(sink_commits), tuple(jdbc_commits)))
    graph.vertices.append(commit)
    return CompiledPipeline(
        graph,
        collect_vertices,
        {e.vertex.name: [m.label for m in e.members] for e in built},
    )


# Operators after a join that see each row alone: a split sub-partition (some rows of a key in
# each of several subtasks) gives them the same rows, only in more subtasks.
_ROW_BY_ROW = frozenset({"select", "where", "withColumn", "withColumnRenamed", "drop"})


def _skew_splittable_inputs(entry: _Vertex, gate_of: dict[tuple[int, int], str]) -> list[int]:
    """The positions of the vertex's inputs whose skewed sub-partitions the JobMaster may split:
    only for a vertex decided late that starts with a hash join of two other vertices, of a
    type that allows it, followed only by row-by-row operators (or the partial half of an
    aggregation, which the exchange after it completes)."""
    vertex = entry.vertex
    joins = [m for m in entry.members if isinstance(m.op, S.Join)]
    if vertex.parallelism != AUTO_PARALLELISM or len(joins) != 1 or len(vertex.inputs) != 2:
        return []
    join = joins[0]
    if any(partitioner != S.HASH for _, partitioner, _ in join.inputs):
        return []
    for member in entry.members:
        if member is join or isinstance(member.op, S.PartialAgg | S.Terminal):
            continue  # a sink or collect takes each subtask's rows as they come
        if not (isinstance(member.op, S.Apply) and member.op.method in _ROW_BY_ROW):
            return []
    datasets: list[str] = [edge.source for edge in vertex.inputs]
    left, right = gate_of.get((id(join), 0)), gate_of.get((id(join), 1))
    if left is None or right is None or sorted((left, right)) != sorted(datasets):
        return []
    positions = (datasets.index(left), datasets.index(right))
    return sorted(positions[side] for side in splittable_sides(join.op.how))


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate = f"{name} #{n}"
        n += 1
    taken.add(candidate)
    return candidate


def _chain_spec(entry: _Vertex, gate_of: dict[tuple[int, int], str]) -> S.ChainSpec:
    nodes: list[S.NodeSpec] = []
    local: dict[int, int] = {}
    for member in entry.members:
        if member.is_terminal:
            # A sink is the chain's output, not an operator: the chain ends at its input.
            upstream, partitioner, _ = member.inputs[0]
            if id(upstream) not in local:
                dataset = gate_of[(id(member), 0)]
                nodes.append(S.NodeSpec(len(nodes), "input", S.GateInput(dataset, partitioner)))
                local[id(upstream)] = len(nodes) - 1
            local[id(member)] = local[id(upstream)]
            continue
        inputs: list[int] = []
        for position, (upstream, partitioner, _) in enumerate(member.inputs):
            if id(upstream) in local:
                inputs.append(local[id(upstream)])
            else:
                dataset = gate_of[(id(member), position)]
                nodes.append(
                    S.NodeSpec(
                        len(nodes), f"input of {member.label}", S.GateInput(dataset, partitioner)
                    )
                )
                inputs.append(len(nodes) - 1)
        op = member.op.aggregate if isinstance(member.op, _NoCombine) else member.op
        _check_shippable(member.label, op, member.origin)
        nodes.append(S.NodeSpec(len(nodes), member.label, op, tuple(inputs)))
        local[id(member)] = len(nodes) - 1
    root = local[id(entry.members[-1])]
    return S.ChainSpec(entry.vertex.name, tuple(nodes), root, tuple(entry.outputs))


# -- payloads -------------------------------------------------------------------------------------


def _check_shippable(label: str, op: Any, origin: str) -> None:
    column = _find_pyspark_object(op)
    if column is not None:
        raise PipelineError(
            f"operator '{label}': a {column} is bound to a local Spark session and cannot be "
            "shipped to the task executors; build expressions with "
            "'from sparkmill import functions as F' (same API as pyspark.sql.functions), "
            "a SQL string, or inside a transform() function",
            origin=origin,
        )
    try:
        with _user_modules_by_value(op):
            _dumps(op)
    except Exception as exc:
        raise PipelineError(
            f"operator '{label}' cannot be shipped to the task executors: it does not "
            f"serialize with cloudpickle ({type(exc).__name__}: {exc})",
            origin=origin,
        ) from exc


def _dumps(obj: Any) -> bytes:
    from pyspark import cloudpickle

    pickler: Any = cloudpickle
    return bytes(pickler.dumps(obj))


def _encode(spec: S.Spec) -> bytes:
    with _user_modules_by_value(spec):
        return S.encode_spec(spec)


def _children(value: Any) -> Iterable[Any]:
    """What an operator argument holds: items of containers, an expression's arguments, a
    dataclass's fields (walked to find what cannot or must be shipped)."""
    if isinstance(value, list | tuple):
        return value
    if isinstance(value, dict):
        return value.values()
    if isinstance(value, Expr):
        return (*value.call_args, *value.call_kwargs.values(), value.method_target)
    if hasattr(value, "__dataclass_fields__"):
        return [getattr(value, f) for f in value.__dataclass_fields__]
    return ()


def _find_pyspark_object(value: Any, depth: int = 0) -> str | None:
    if depth > 50:
        return None
    kind = type(value)
    if kind.__module__.startswith("pyspark.") and kind.__name__ in ("Column", "DataFrame"):
        return f"pyspark {kind.__name__}"
    for child in _children(value):
        found = _find_pyspark_object(child, depth + 1)
        if found is not None:
            return found
    return None


def _callables(value: Any, depth: int = 0) -> Iterator[Any]:
    if depth > 50:
        return
    if callable(value) and hasattr(value, "__module__") and not isinstance(value, Expr | type):
        yield value
    for child in _children(value):
        yield from _callables(child, depth + 1)


def _ships_by_value(module_name: str) -> bool:
    """Is this module user code the task executors may not be able to import?"""
    module = sys.modules.get(module_name)
    if (
        module is None
        or module_name == "__main__"
        or module_name.split(".")[0] in _PROJECT_PACKAGES
    ):
        return False
    filename = getattr(module, "__file__", None)
    if not filename:
        return False
    path = Path(filename).resolve()
    paths = sysconfig.get_paths()
    libraries = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return not any(path.is_relative_to(Path(lib).resolve()) for lib in libraries)


@contextlib.contextmanager
def _user_modules_by_value(value: Any) -> Iterator[None]:
    """Pickle functions of user modules (tests, pipeline packages) by value, not by name."""
    from pyspark import cloudpickle as pickler_module

    cloudpickle: Any = pickler_module
    registered = []
    for fn in _callables(value):
        name = getattr(fn, "__module__", None)
        if isinstance(name, str) and _ships_by_value(name):
            with contextlib.suppress(ValueError):
                cloudpickle.register_pickle_by_value(sys.modules[name])
                registered.append(sys.modules[name])
    try:
        yield
    finally:
        for module in registered:
            with contextlib.suppress(ValueError):
                cloudpickle.unregister_pickle_by_value(module)


def describe_graph(graph: JobGraph) -> str:
    """One line per vertex: name, parallelism and where its inputs come from."""
    producer = {ds.id: v.name for v in graph.vertices for ds in v.produced}
    lines = []
    for vertex in graph.vertices:
        inputs = ", ".join(
            f"{producer[e.source]} ({e.partitioner}, {e.pattern.name})" for e in vertex.inputs
        )
        shown = "auto" if vertex.is_auto else vertex.parallelism
        lines.append(f"[{shown}] {vertex.name}" + (f"  <- {inputs}" if inputs else ""))
    return "\n".join(lines)
