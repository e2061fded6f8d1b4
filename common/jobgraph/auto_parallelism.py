"""Deciding the parallelism a pipeline left open (Flink's ``DefaultVertexParallelismDecider``).

Shared by the JobMaster, which decides, and the client, which estimates a local run's slots.

A vertex submitted with :data:`~sparkmill.common.jobgraph.model.AUTO_PARALLELISM` gets its
number here, when the JobMaster builds its job's execution graph, from how much it will read:

* a source's input is the size of the files it declares (``source_paths``), listed on the
  JobMaster's host (:func:`size_sources`, blocking: run it off the event loop). Sources on file
  systems the JobMaster cannot list itself, ranges and database tables have no known size;
* every other vertex's input is estimated as the sum of what its producers read (a
  ``broadcast`` input is left out: every subtask reads all of it whatever their number; an
  input of unknown size counts only when no other input's size is known).

The number is ``ceil(input / avg-data-volume-per-task)`` within ``[min-parallelism,
max-parallelism]`` (and the vertex's own max parallelism); an input of unknown size gets
``default-source-parallelism``, as does every open vertex when automatic parallelism is off. A
vertex fed by a ``forward`` edge gets its producer's number, so that its subtasks still line
up one to one (Flink's forward groups).

That is the whole decision for :func:`decide_parallelism` (``explain`` shows it). When the job
runs, :func:`plan_parallelism` keeps only the sources' decisions (and those of vertices
forward-fed by them): every other open vertex is decided *late*, as in Flink's adaptive batch
scheduler, once all its producers have finished, from the bytes they wrote
(:func:`decide_from_written`). Its estimate above becomes its bound: the number of
sub-partitions its producers split their output into, of which each of its subtasks reads a
contiguous range (:mod:`sparkmill.common.exchange.subpartitions`), so the producers never need
the final number. A job with a PIPELINED exchange is decided whole at the start (its regions
must be known before anything runs).

The upfront decisions are deterministic for unchanged inputs: a JobMaster that takes the job
over decides the same, and :func:`ParallelismPlan.layout` lets it check that it did before it
keeps any finished subtask of the one before. Late decisions go to the job's progress log
before any of the vertex's subtasks runs, and a successor applies the recorded ones.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from sparkmill.common.core.ids import IntermediateDataSetID, JobVertexID
from sparkmill.common.jobgraph.model import (
    DistributionPattern,
    JobEdge,
    JobGraph,
    JobVertex,
    ResultPartitionType,
)

_GLOB_CHARACTERS = frozenset("*?[")
# A source declaring a huge tree (a graph naming "/") must not keep the JobMaster's executor
# walking the file system: past this many entries its size counts as unknown.
MAX_LISTED_ENTRIES = 100_000


class _TooManyEntries(Exception):
    pass


class AutoParallelismSettings(Protocol):
    """The ``execution.batch.adaptive.auto-parallelism.*`` keys a decision reads (the runtime
    resolves them: :class:`sparkmill.common.runtime.settings.AutoParallelismSettings`)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def min_parallelism(self) -> int: ...
    @property
    def max_parallelism(self) -> int: ...
    @property
    def bytes_per_task(self) -> int: ...
    @property
    def default_source_parallelism(self) -> int: ...
    @property
    def job_graph_max_parallelism(self) -> int: ...
    @property
    def job_graph_max_subtasks(self) -> int: ...
    @property
    def skewed_join_strategy(self) -> str: ...
    @property
    def skewed_join_factor(self) -> float: ...
    @property
    def skewed_join_threshold(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ParallelismDecision:
    """What the JobMaster decided for one open vertex, and why (shown by the status views)."""

    parallelism: int
    reason: str

    @property
    def text(self) -> str:
        return f"auto: {self.reason}"


def size_sources(graph: JobGraph) -> dict[JobVertexID, int | None]:
    """Bytes under the source paths of each vertex that declares some (an explicit one's
    size still feeds the estimates of the open vertices after it); None where a path is not
    on the local file system, matches nothing, or cannot be read. Blocking."""
    sizes: dict[JobVertexID, int | None] = {}
    if not any(vertex.is_auto for vertex in graph.vertices):
        return sizes
    for vertex in graph.vertices:
        if vertex.source_paths:
            sizes[vertex.id] = _bytes_under(vertex.source_paths)
    return sizes


def _bytes_under(paths: list[str]) -> int | None:
    """The size of the files ``paths`` name, as a source reads them: globs expanded,
    directories walked, hidden entries (``_*``, ``.*``) under a directory skipped."""
    files: dict[str, int] = {}
    seen = [0]  # entries looked at, files and directories alike
    for path in paths:
        local = path.removeprefix("file://").removeprefix("file:")
        if "://" in local:
            return None  # another file system: only the task executors' Hadoop can list it
        matches = glob.glob(local) if _GLOB_CHARACTERS & set(local) else [local]
        if not matches or len(matches) > MAX_LISTED_ENTRIES:
            return None
        for match in matches:
            try:
                _walk(match, files, seen)
            except (OSError, _TooManyEntries):
                return None
    return sum(files.values())


def _walk(path: str, files: dict[str, int], seen: list[int]) -> None:
    if not os.path.isdir(path):
        _count(seen, 1)
        files[os.path.realpath(path)] = os.stat(path).st_size
        return
    for root, dirs, names in os.walk(path, onerror=_raise):
        _count(seen, len(dirs) + len(names))
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in names:
            if not name.startswith(("_", ".")):
                full = os.path.join(root, name)
                files[os.path.realpath(full)] = os.stat(full).st_size


def _count(seen: list[int], entries: int) -> None:
    seen[0] += entries
    if seen[0] > MAX_LISTED_ENTRIES:
        raise _TooManyEntries


def _raise(error: OSError) -> None:
    raise error


def decide_parallelism(
    graph: JobGraph,
    source_sizes: Mapping[JobVertexID, int | None],
    settings: AutoParallelismSettings,
) -> tuple[JobGraph, dict[JobVertexID, ParallelismDecision]]:
    """``graph`` with every open parallelism decided, and the decisions by vertex id.

    A graph without open vertices is returned as it is. Raises ``ValueError`` on a cycle (as
    building the execution graph would).
    """
    if not any(vertex.is_auto for vertex in graph.vertices):
        return graph, {}
    producer_of = {ds.id: v for v in graph.vertices for ds in v.produced}
    estimates: dict[JobVertexID, int | None] = {}  # what each vertex reads, as far as known
    decided: dict[JobVertexID, int] = {}
    decisions: dict[JobVertexID, ParallelismDecision] = {}
    for vertex in graph.topological_order():
        estimate = _input_estimate(vertex, producer_of, estimates, source_sizes)
        estimates[vertex.id] = estimate
        if not vertex.is_auto:
            decided[vertex.id] = vertex.parallelism
            continue
        decision = _decide(vertex, estimate, producer_of, decided, settings)
        decided[vertex.id] = decision.parallelism
        decisions[vertex.id] = decision
    total = sum(decided.values())
    if total > settings.job_graph_max_subtasks:
        # What validation refuses at submission, a decision may not create afterwards.
        raise ValueError(
            f"the decided parallelisms add up to {total} subtasks, more than "
            f"jobmanager.job-graph.max-subtasks ({settings.job_graph_max_subtasks}); lower "
            "execution.batch.adaptive.auto-parallelism.max-parallelism or set parallelism"
        )
    vertices = [
        dataclasses.replace(v, parallelism=decided[v.id]) if v.is_auto else v
        for v in graph.vertices
    ]
    return dataclasses.replace(graph, vertices=vertices), decisions


def _input_estimate(
    vertex: JobVertex,
    producer_of: Mapping[IntermediateDataSetID, JobVertex],
    estimates: Mapping[JobVertexID, int | None],
    source_sizes: Mapping[JobVertexID, int | None],
) -> int | None:
    """What ``vertex`` reads, as far as known. An input of unknown size (a range, a database
    table, in-memory rows) counts as nothing beside inputs of known size - typically a small
    dimension joined to files - and makes the whole unknown only when nothing else is known."""
    known: list[int] = []
    unknown = False
    if vertex.source_paths:
        size = source_sizes.get(vertex.id)
        if size is None:
            return None  # files this host cannot see: their size may be anything
        known.append(size)
    for edge in vertex.inputs:
        if edge.partitioner == "broadcast":
            continue
        upstream = estimates.get(producer_of[edge.source].id)
        if upstream is None:
            unknown = True
        else:
            known.append(upstream)
    if not known:
        return None if unknown or not vertex.inputs else 0
    return sum(known)


def _decide(
    vertex: JobVertex,
    estimate: int | None,
    producer_of: Mapping[IntermediateDataSetID, JobVertex],
    decided: Mapping[JobVertexID, int],
    settings: AutoParallelismSettings,
) -> ParallelismDecision:
    forward = forward_input(vertex)
    if forward is not None:
        producer = producer_of[forward.source]
        return ParallelismDecision(decided[producer.id], f"as its forward input {producer.name!r}")
    upper = max(
        1,
        min(settings.max_parallelism, vertex.max_parallelism, settings.job_graph_max_parallelism),
    )
    lower = min(settings.min_parallelism, upper)
    if not settings.enabled:
        fallback = max(lower, min(settings.default_source_parallelism, upper))
        return ParallelismDecision(fallback, "automatic parallelism is off")
    if estimate is None:
        fallback = max(lower, min(settings.default_source_parallelism, upper))
        return ParallelismDecision(fallback, "input size unknown")
    wanted = math.ceil(estimate / settings.bytes_per_task) if estimate > 0 else 1
    parallelism = max(lower, min(wanted, upper))
    return ParallelismDecision(
        parallelism,
        f"{format_bytes(estimate)} input, {format_bytes(settings.bytes_per_task)} per subtask",
    )


@dataclass(frozen=True, slots=True)
class ParallelismPlan:
    """What the JobMaster decides when a job starts, and what it leaves for later."""

    graph: JobGraph  # the upfront decisions applied; late vertices still AUTO_PARALLELISM
    decisions: dict[JobVertexID, ParallelismDecision]  # the upfront ones
    # Late vertex -> the most subtasks it may get: the sub-partitions its producers write.
    late_bounds: dict[JobVertexID, int]
    # Late vertex -> the bytes of its own source files (0: none, or unknown).
    own_bytes: dict[JobVertexID, int]

    @property
    def layout(self) -> str:
        """The fingerprint of the upfront decisions and the late bounds (see :func:`layout_of`)."""
        return layout_of(self.graph, self.late_bounds)

    def pending_text(self, vertex_id: JobVertexID) -> str:
        """What the status views show for a late vertex before it is decided."""
        bound = self.late_bounds[vertex_id]
        return f"auto: decided when its inputs have finished (at most {bound})"


def plan_parallelism(
    graph: JobGraph,
    source_sizes: Mapping[JobVertexID, int | None],
    settings: AutoParallelismSettings,
) -> ParallelismPlan:
    """Decide the sources now and leave every other open vertex for :func:`decide_from_written`
    (see the module docstring). Raises what :func:`decide_parallelism` raises."""
    decided, decisions = decide_parallelism(graph, source_sizes, settings)
    pipelined = any(
        ds.result_type is ResultPartitionType.PIPELINED for v in graph.vertices for ds in v.produced
    )
    if not decisions or not settings.enabled or pipelined:
        return ParallelismPlan(decided, decisions, {}, {})
    producer_of = {ds.id: v for v in graph.vertices for ds in v.produced}
    late: dict[JobVertexID, int] = {}
    for vertex in graph.topological_order():
        if not vertex.is_auto or not vertex.inputs:
            continue
        forward = forward_input(vertex)
        if forward is not None:
            if producer_of[forward.source].id in late:
                late[vertex.id] = decisions[vertex.id].parallelism  # decided with its producer
        elif all(e.pattern is DistributionPattern.ALL_TO_ALL for e in vertex.inputs):
            late[vertex.id] = decisions[vertex.id].parallelism
    vertices = [
        dataclasses.replace(v, parallelism=decisions[v.id].parallelism)
        if v.is_auto and v.id not in late
        else v
        for v in graph.vertices
    ]
    own = {vid: source_sizes.get(vid) or 0 for vid in late}
    upfront = {vid: d for vid, d in decisions.items() if vid not in late}
    return ParallelismPlan(dataclasses.replace(graph, vertices=vertices), upfront, late, own)


def forward_input(vertex: JobVertex) -> JobEdge | None:
    """The input through which ``vertex`` is forward-fed (it then shares its producer's
    number), if any."""
    for edge in vertex.inputs:
        if edge.pattern is DistributionPattern.POINTWISE and edge.partitioner == "forward":
            return edge
    return None


def decide_from_written(
    vertex: JobVertex, written: int, bound: int, settings: AutoParallelismSettings
) -> ParallelismDecision:
    """The parallelism of a late vertex whose producers wrote ``written`` bytes for it (its
    own source files included), at most ``bound``: the sub-partitions they split it into."""
    upper = max(
        1,
        min(
            settings.max_parallelism,
            vertex.max_parallelism,
            settings.job_graph_max_parallelism,
            bound,
        ),
    )
    lower = min(settings.min_parallelism, upper)
    wanted = math.ceil(written / settings.bytes_per_task) if written > 0 else 1
    parallelism = max(lower, min(wanted, upper))
    reason = (
        f"{format_bytes(written)} written by its inputs, "
        f"{format_bytes(settings.bytes_per_task)} per subtask"
    )
    if wanted > parallelism and parallelism == bound:
        reason += f", at most the {bound} sub-partitions its inputs were split into"
    return ParallelismDecision(parallelism, reason)


def layout_of(graph: JobGraph, late_bounds: Mapping[JobVertexID, int] | None = None) -> str:
    """A short fingerprint of every vertex's parallelism: equal for two JobMasters of a job
    exactly when their subtasks (and the splits their results are written in) match."""
    digest = hashlib.sha256()
    bounds = late_bounds or {}
    for vertex in sorted(graph.vertices, key=lambda v: v.id):
        if vertex.id in bounds:
            digest.update(f"{vertex.id}=auto<={bounds[vertex.id]};".encode())
        else:
            digest.update(f"{vertex.id}={vertex.parallelism};".encode())
    return digest.hexdigest()[:16]


def format_bytes(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
