"""Checks a submitted job graph before the dispatcher accepts it.

Flink's job manager used to find out that a submitted graph was unusable only while building the
execution graph, one exception at a time. Here the dispatcher checks the whole graph up front
and reports *every* problem in one :class:`~sparkmill.common.core.errors.InvalidJobGraphError`, so
a user fixes them all in one go::

    job graph 'wordcount' is invalid: 2 problems
      - vertex 'count' (4f0c...) has parallelism 0; it must be at least 1
      - edge from data set 77e2... to vertex 'sink' (9a1b...) (input #0) reads an unknown data
        set: no vertex produces it

Every line names the offending vertex (name and id), edge (its position among the consuming
vertex's inputs and the data set it reads) or data set. All checks together are O(V + E).

The graph may come straight from :func:`sparkmill.common.jobgraph.codec.job_graph_from_proto`,
which keeps unspecified or unknown enum values and invalid resource profiles as markers for this
module to report; values that do not belong to their declared type are therefore expected here.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field

from sparkmill.common.core.errors import ConfigurationError, InvalidJobGraphError
from sparkmill.common.core.ids import is_valid_id, is_valid_name_id
from sparkmill.common.exchange.layout import sink_path_problem
from sparkmill.common.jobgraph.graphs import strongly_connected_components
from sparkmill.common.jobgraph.job_config import normalize_job_config
from sparkmill.common.jobgraph.model import (
    AUTO_PARALLELISM,
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    ResultPartitionType,
)

MAX_MAX_PARALLELISM = 32768
"""The largest allowed max parallelism (the number of key groups a state can be split into)."""

MAX_LISTED_PROBLEMS = 100
"""At most this many problems are spelled out in the error; the summary still counts them all."""

MAX_LISTED_CYCLE_VERTICES = 20
"""A cycle longer than this is shown by its first vertices only."""

# Names and strings are echoed in every listing, status and log line: a 9 MB job name made
# `jobs list` fail for everyone.
MAX_NAME_LENGTH = 1000
MAX_SHORT_STRING_LENGTH = 256  # operator kinds, partitioners, slot sharing groups, config keys
MAX_CONFIG_VALUE_LENGTH = 16 * 1024
MAX_PATH_LENGTH = 4096
MAX_SOURCE_PATHS = 1024
"""Most source paths one vertex may declare (each a path or a glob)."""
# Vertex and data set ids name directories of the exchange (see
# sparkmill.common.core.ids.is_valid_name_id).
_NAME_ID_FORMAT = "a safe name (letters, digits, '.', '_', '-'; at most 128 characters)"


@dataclass(frozen=True, slots=True)
class JobGraphLimits:
    """How large a job graph the cluster accepts (the ``jobmanager.job-graph.*`` options).

    Checked before anything else, so an oversized graph is refused in time proportional to its
    number of vertices and edges, before an execution graph (one object per subtask) is built.
    """

    max_vertices: int = 10_000
    max_parallelism: int = 100_000
    max_subtasks: int = 1_000_000
    max_edges: int = 100_000


def validate_job_graph(
    graph: JobGraph,
    *,
    known_operator_kinds: Collection[str],
    max_vertices: int | None = None,
    limits: JobGraphLimits | None = None,
    forbidden_sink_dirs: Collection[str] = (),
) -> None:
    """Raise :class:`InvalidJobGraphError` naming every problem of ``graph``; else return.

    ``known_operator_kinds`` are the operator kinds task executors can run; ``limits`` bound the
    size of a graph the cluster accepts (``max_vertices`` overrides its vertex limit); a sink
    path that is ``/`` or equals, contains or lies inside one of ``forbidden_sink_dirs`` (the
    exchange and HA storage directories) is refused.

    The error message's first line is ``job graph '<name>' is invalid: <N> problems``, followed
    by one line per problem (at most :data:`MAX_LISTED_PROBLEMS` of them).
    """
    limits = limits or JobGraphLimits()
    if max_vertices is not None:
        limits = JobGraphLimits(max_vertices, *_rest_of(limits))
    problems = _oversized(graph, limits)
    if not problems:  # only a graph within the limits is worth walking in full
        checker = _Checker(graph, known_operator_kinds, limits.max_vertices, forbidden_sink_dirs)
        problems = checker.run()
    if problems:
        name = graph.name if len(graph.name) <= MAX_NAME_LENGTH else f"{graph.name[:80]}..."
        raise InvalidJobGraphError(_format(name, problems))


def _rest_of(limits: JobGraphLimits) -> tuple[int, int, int]:
    return limits.max_parallelism, limits.max_subtasks, limits.max_edges


def _oversized(graph: JobGraph, limits: JobGraphLimits) -> list[str]:
    problems = []
    vertices = len(graph.vertices)
    if vertices > limits.max_vertices:
        problems.append(
            f"the job graph has {vertices} vertices, more than the maximum of "
            f"{limits.max_vertices} (jobmanager.job-graph.max-vertices)"
        )
    edges = sum(len(v.inputs) for v in graph.vertices)
    if edges > limits.max_edges:
        problems.append(
            f"the job graph has {edges} edges, more than the maximum of {limits.max_edges} "
            "(jobmanager.job-graph.max-edges)"
        )
    subtasks = 0
    for position, vertex in enumerate(graph.vertices):
        parallelism = vertex.parallelism if isinstance(vertex.parallelism, int) else 0
        subtasks += max(0, parallelism)
        if parallelism > limits.max_parallelism:
            problems.append(
                f"vertex {vertex.name[:80]!r} (position {position}) has parallelism "
                f"{parallelism}, more than the maximum of {limits.max_parallelism} "
                "(jobmanager.job-graph.max-parallelism)"
            )
            if len(problems) > MAX_LISTED_PROBLEMS:
                break
    if subtasks > limits.max_subtasks:
        problems.append(
            f"the job graph has {subtasks} subtasks in all, more than the maximum of "
            f"{limits.max_subtasks} (jobmanager.job-graph.max-subtasks)"
        )
    return problems


def _format(graph_name: str, problems: list[str]) -> str:
    count = len(problems)
    lines = [f"job graph {graph_name!r} is invalid: {count} problem{'s' if count != 1 else ''}"]
    lines.extend(f"  - {problem}" for problem in problems[:MAX_LISTED_PROBLEMS])
    if count > MAX_LISTED_PROBLEMS:
        lines.append(f"  ... and {count - MAX_LISTED_PROBLEMS} more")
    return "\n".join(lines)


def _is_instance(value: object, cls: type) -> bool:
    """``isinstance`` for values whose declared type the codec's markers may violate."""
    return isinstance(value, cls)


def _describe_enum_marker(value: object) -> str:
    return "unspecified" if value is None or value == 0 else f"unknown ({value!r})"


@dataclass(slots=True)
class _Checker:
    graph: JobGraph
    known_operator_kinds: Collection[str]
    max_vertices: int
    forbidden_sink_dirs: Collection[str] = ()
    problems: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # vertex position -> "vertex 'x' (id)"

    def run(self) -> list[str]:
        graph = self.graph
        self.labels = [self._label(position, v) for position, v in enumerate(graph.vertices)]
        self._check_job()
        producer_of = self._check_ids()
        known = ", ".join(repr(kind) for kind in sorted(self.known_operator_kinds))
        known = f"known kinds: {known}" if known else "no operator kinds are known"
        for position, vertex in enumerate(graph.vertices):
            self._check_vertex(position, vertex, known)
            for dataset in vertex.produced:
                self._check_dataset(position, vertex, dataset)
            for number, edge in enumerate(vertex.inputs):
                self._check_edge(position, vertex, number, edge, producer_of)
        self._check_cycles(producer_of)
        return self.problems

    @staticmethod
    def _label(position: int, vertex: JobVertex) -> str:
        name = repr(vertex.name[:80]) if vertex.name else "<unnamed>"
        vertex_id = vertex.id[:80] if vertex.id else f"no id, position {position}"
        return f"vertex {name} ({vertex_id})"

    def _check_job(self) -> None:
        graph = self.graph
        if not graph.job_id.strip():
            self.problems.append("the job id is missing")
        elif not is_valid_id(graph.job_id):
            # The job id names directories and znodes: anything but the id format (a path,
            # '..') could reach outside them.
            self.problems.append(f"the job id {graph.job_id[:80]!r} is not 32 lowercase hex digits")
        if not graph.name.strip():
            self.problems.append("the job name is missing")
        elif len(graph.name) > MAX_NAME_LENGTH:
            self.problems.append(
                f"the job name has {len(graph.name)} characters, more than the maximum of "
                f"{MAX_NAME_LENGTH}"
            )
        if self._config_lengths_ok():  # else its error would echo the oversized entries
            try:
                # A bad job-level option would otherwise only surface when the JobMaster starts
                # the job, long after the user was told "submitted".
                normalize_job_config(graph.config)
            except ConfigurationError as exc:
                self.problems.append(f"the job configuration is invalid: {exc}")
        if not graph.vertices:
            self.problems.append("the job graph has no vertices")

    def _config_lengths_ok(self) -> bool:
        before = len(self.problems)
        for key, value in self.graph.config.items():
            if len(key) > MAX_SHORT_STRING_LENGTH:
                self.problems.append(
                    f"the job configuration key {key[:80]!r}... has {len(key)} characters, more "
                    f"than the maximum of {MAX_SHORT_STRING_LENGTH}"
                )
            elif len(value) > MAX_CONFIG_VALUE_LENGTH:
                self.problems.append(
                    f"the job configuration value of {key!r} has {len(value)} characters, more "
                    f"than the maximum of {MAX_CONFIG_VALUE_LENGTH}"
                )
        return len(self.problems) == before

    def _check_ids(self) -> dict[str, int]:
        """Report missing and duplicate vertex / data set ids; map data set id -> producer."""
        vertices_by_id: dict[str, list[int]] = {}
        producers_by_dataset: dict[str, list[int]] = {}
        for position, vertex in enumerate(self.graph.vertices):
            if not vertex.id:
                self.problems.append(f"{self.labels[position]} has no id")
            else:
                vertices_by_id.setdefault(vertex.id, []).append(position)
            for dataset in vertex.produced:
                if not dataset.id:
                    self.problems.append(f"{self.labels[position]} produces a data set with no id")
                else:
                    producers_by_dataset.setdefault(dataset.id, []).append(position)
        for vertex_id, positions in vertices_by_id.items():
            if len(positions) > 1:
                names = ", ".join(
                    repr(self.graph.vertices[p].name)
                    if self.graph.vertices[p].name
                    else f"<unnamed at position {p}>"
                    for p in positions
                )
                self.problems.append(
                    f"vertex id {vertex_id} is used by {len(positions)} vertices: {names}"
                )
        for dataset_id, positions in producers_by_dataset.items():
            if len(positions) > 1:
                producers = ", ".join(self.labels[p] for p in positions)
                self.problems.append(
                    f"data set id {dataset_id} is produced {len(positions)} times, by {producers}"
                )
        # With duplicates, edges are resolved against the first producer (already reported).
        return {dataset_id: positions[0] for dataset_id, positions in producers_by_dataset.items()}

    def _check_vertex(self, position: int, vertex: JobVertex, known_kinds: str) -> None:
        label = self.labels[position]
        problems = self.problems
        if not vertex.name.strip():
            problems.append(f"{label} has no name")
        elif len(vertex.name) > MAX_NAME_LENGTH:
            problems.append(
                f"{label} has a name of {len(vertex.name)} characters, more than the maximum "
                f"of {MAX_NAME_LENGTH}"
            )
        if vertex.id and not is_valid_name_id(vertex.id):
            problems.append(f"{label} has an id that is not {_NAME_ID_FORMAT}")
        for what, text in (
            ("operator kind", vertex.operator.kind),
            ("slot sharing group", vertex.slot_sharing_group),
        ):
            if len(text) > MAX_SHORT_STRING_LENGTH:
                problems.append(
                    f"{label} has a {what} of {len(text)} characters, more than the maximum "
                    f"of {MAX_SHORT_STRING_LENGTH}"
                )
        parallelism, max_parallelism = vertex.parallelism, vertex.max_parallelism
        if parallelism <= 0 and parallelism != AUTO_PARALLELISM:
            problems.append(
                f"{label} has parallelism {parallelism}; it must be at least 1 (or "
                f"{AUTO_PARALLELISM}: decided by the JobMaster)"
            )
        if not 0 < max_parallelism <= MAX_MAX_PARALLELISM:
            problems.append(
                f"{label} has max parallelism {max_parallelism}; it must be between 1 and "
                f"{MAX_MAX_PARALLELISM}"
            )
        elif parallelism > max_parallelism:
            problems.append(
                f"{label} has parallelism {parallelism}, above its max parallelism "
                f"{max_parallelism}"
            )
        kind = vertex.operator.kind
        if not kind:
            problems.append(f"{label} has no operator kind ({known_kinds})")
        elif kind not in self.known_operator_kinds:
            problems.append(f"{label} runs unknown operator kind {kind!r} ({known_kinds})")
        if len(vertex.source_paths) > MAX_SOURCE_PATHS:
            problems.append(
                f"{label} declares {len(vertex.source_paths)} source paths, more than the "
                f"maximum of {MAX_SOURCE_PATHS}"
            )
        for path in vertex.source_paths[:MAX_SOURCE_PATHS]:
            if not path or len(path) > MAX_PATH_LENGTH or "\x00" in path:
                problems.append(
                    f"{label} declares a source path that is empty, longer than "
                    f"{MAX_PATH_LENGTH} characters or holds a NUL character"
                )
                break
        splittable = vertex.skew_splittable_inputs
        if len(set(splittable)) != len(splittable) or any(
            not 0 <= i < len(vertex.inputs) or vertex.inputs[i].partitioner != "hash"
            for i in splittable
        ):
            problems.append(
                f"{label} declares skew-splittable inputs {splittable[:8]}: each must be the "
                f"position of one of its {len(vertex.inputs)} inputs, once, with a hash partitioner"
            )
        for path in vertex.sink_paths:
            problem = sink_path_problem(path[:MAX_PATH_LENGTH], self.forbidden_sink_dirs)
            if len(path) > MAX_PATH_LENGTH:
                problem = f"a sink path of {len(path)} characters is longer than {MAX_PATH_LENGTH}"
            if problem:
                problems.append(f"{label} writes a sink where it may not: {problem}")
        cpu, memory = vertex.resource_profile.cpu_cores, vertex.resource_profile.memory_mb
        if not (math.isfinite(cpu) and cpu >= 0 and memory >= 0):
            problems.append(
                f"{label} has an invalid resource profile (cpu={cpu:g}, memory={memory}MiB): "
                "cpu cores and memory must be finite and not negative"
            )

    def _check_dataset(
        self, position: int, vertex: JobVertex, dataset: IntermediateDataSet
    ) -> None:
        label = self.labels[position]
        if dataset.id and not is_valid_name_id(dataset.id):
            self.problems.append(
                f"data set {dataset.id[:80]!r} of {label} has an id that is not {_NAME_ID_FORMAT}"
            )
        if dataset.producer != vertex.id:
            self.problems.append(
                f"data set {dataset.id} is listed by {label} but names {dataset.producer!r} as "
                "its producer"
            )
        if not _is_instance(dataset.result_type, ResultPartitionType):
            self.problems.append(
                f"data set {dataset.id} of {label} has an "
                f"{_describe_enum_marker(dataset.result_type)} result partition type; it must "
                f"be one of {', '.join(member.name for member in ResultPartitionType)}"
            )

    def _check_edge(
        self,
        position: int,
        vertex: JobVertex,
        number: int,
        edge: JobEdge,
        producer_of: dict[str, int],
    ) -> None:
        problems = self.problems
        if not edge.source:
            label = f"input #{number} of {self.labels[position]}"
            problems.append(f"{label} names no data set to read")
        else:
            label = f"edge from data set {edge.source} to {self.labels[position]} (input #{number})"
            if edge.source not in producer_of:
                problems.append(f"{label} reads an unknown data set: no vertex produces it")
        if len(edge.partitioner) > MAX_SHORT_STRING_LENGTH:
            problems.append(
                f"{label} has a partitioner of {len(edge.partitioner)} characters, more than "
                f"the maximum of {MAX_SHORT_STRING_LENGTH}"
            )
        if edge.target != vertex.id:
            problems.append(
                f"{label} names {edge.target!r} as its target; an edge must be listed by the "
                "vertex it feeds"
            )
        if not _is_instance(edge.pattern, DistributionPattern):
            problems.append(
                f"{label} has an {_describe_enum_marker(edge.pattern)} distribution pattern; "
                f"it must be one of {', '.join(member.name for member in DistributionPattern)}"
            )

    def _check_cycles(self, producer_of: dict[str, int]) -> None:
        vertices = self.graph.vertices
        successors: list[list[int]] = [[] for _ in vertices]
        for consumer, vertex in enumerate(vertices):
            for edge in vertex.inputs:
                producer = producer_of.get(edge.source)
                if producer is not None:
                    successors[producer].append(consumer)
        cycles = []
        for component in strongly_connected_components(successors):
            if len(component) > 1 or component[0] in successors[component[0]]:
                cycles.append(component)
        cycles.sort(key=min)
        for component in cycles:
            self.problems.append(self._describe_cycle(component, successors))

    def _describe_cycle(self, component: list[int], successors: list[list[int]]) -> str:
        members = set(component)
        start = min(component)
        path, seen_at = [start], {start: 0}
        while True:  # every member has a successor inside the component, so this finds a loop
            step = next(s for s in successors[path[-1]] if s in members)
            if step in seen_at:
                cycle = [*path[seen_at[step] :], step]
                break
            seen_at[step] = len(path)
            path.append(step)
        shown = [self.labels[p] for p in cycle]
        if len(shown) > MAX_LISTED_CYCLE_VERTICES + 1:
            hidden = len(shown) - MAX_LISTED_CYCLE_VERTICES - 1
            shown = [*shown[:MAX_LISTED_CYCLE_VERTICES], f"... ({hidden} more)", shown[-1]]
        text = "the job graph has a cycle: " + " -> ".join(shown)
        if len(component) > len(cycle) - 1:
            text += (
                f" (part of a group of {len(component)} vertices that all reach each other: "
                + ", ".join(self.labels[p] for p in sorted(component)[:MAX_LISTED_CYCLE_VERTICES])
                + (", ..." if len(component) > MAX_LISTED_CYCLE_VERTICES else "")
                + ")"
            )
        return text
