"""Unit tests of common/jobgraph/validation.py: one test per check, and all problems at once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sparkmill.common.core.errors import InvalidArgumentError, InvalidJobGraphError
from sparkmill.common.core.ids import IntermediateDataSetID, JobID, JobVertexID
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.jobgraph.model import (
    AUTO_PARALLELISM,
    KNOWN_OPERATOR_KINDS,
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
    ResultPartitionType,
)
from sparkmill.common.jobgraph.validation import (
    MAX_LISTED_CYCLE_VERTICES,
    MAX_LISTED_PROBLEMS,
    JobGraphLimits,
    validate_job_graph,
)


def vid(name: str) -> JobVertexID:
    return JobVertexID(f"id-{name}")


def dsid(name: str) -> IntermediateDataSetID:
    return IntermediateDataSetID(f"ds-{name}")


def vertex(
    name: str,
    *,
    reads: tuple[str, ...] = (),
    produces: bool = True,
    parallelism: int = 2,
    kind: str = "noop",
    pattern: DistributionPattern = DistributionPattern.ALL_TO_ALL,
) -> JobVertex:
    """Vertex ``name`` with id ``id-<name>``, producing ``ds-<name>`` and reading ``ds-<r>``."""
    return JobVertex(
        id=vid(name),
        name=name,
        parallelism=parallelism,
        operator=OperatorSpec(kind),
        produced=[IntermediateDataSet(dsid(name), vid(name))] if produces else [],
        inputs=[JobEdge(dsid(r), vid(name), pattern) for r in reads],
    )


def graph_of(*vertices: JobVertex, name: str = "job") -> JobGraph:
    return JobGraph(
        job_id=JobID("0123456789abcdef0123456789abcdef"), name=name, vertices=[*vertices]
    )


def diamond() -> JobGraph:
    """source -> (left, right) -> join -> sink, with mixed patterns and parallelisms."""
    return graph_of(
        vertex("source", parallelism=4),
        vertex("left", reads=("source",), pattern=DistributionPattern.POINTWISE, parallelism=2),
        vertex("right", reads=("source",), parallelism=8, kind="spark"),
        vertex("join", reads=("left", "right"), parallelism=3),
        vertex("sink", reads=("join",), produces=False, parallelism=1),
        name="diamond",
    )


def validate(graph: JobGraph, **kwargs: Any) -> None:
    validate_job_graph(graph, known_operator_kinds=KNOWN_OPERATOR_KINDS, **kwargs)


def problems_of(graph: JobGraph, **kwargs: Any) -> list[str]:
    """The problem lines of the error (asserting the summary line counts them)."""
    with pytest.raises(InvalidJobGraphError) as info:
        validate(graph, **kwargs)
    summary, *lines = str(info.value).split("\n")
    count = len(lines)
    assert summary == f"job graph {graph.name!r} is invalid: {count} problem" + (
        "s" if count != 1 else ""
    )
    assert all(line.startswith("  - ") for line in lines)
    return [line[4:] for line in lines]


def single_problem(graph: JobGraph) -> str:
    problems = problems_of(graph)
    assert len(problems) == 1, problems
    return problems[0]


# -- valid graphs ---------------------------------------------------------------------------------


def test_valid_multi_vertex_graph_passes() -> None:
    validate(diamond())


def test_pointwise_edges_accept_any_parallelisms() -> None:
    graph = graph_of(
        vertex("a", parallelism=3),
        vertex("b", reads=("a",), parallelism=7, pattern=DistributionPattern.POINTWISE),
        vertex("c", reads=("b",), parallelism=2, pattern=DistributionPattern.POINTWISE),
    )
    validate(graph)


def test_unconsumed_data_set_and_edge_free_vertices_are_fine() -> None:
    graph = graph_of(vertex("lonely"), vertex("other", produces=False))
    validate(graph)


def test_parallelism_equal_to_max_parallelism_and_the_largest_max_parallelism_are_fine() -> None:
    graph = graph_of(vertex("a", parallelism=32768))
    graph.vertices[0].max_parallelism = 32768
    validate(graph)


def test_ten_thousand_vertex_chain_validates() -> None:
    vertices = [vertex("v0")]
    vertices += [vertex(f"v{i}", reads=(f"v{i - 1}",)) for i in range(1, 10_000)]
    validate(graph_of(*vertices))


def test_the_error_is_an_invalid_argument_with_the_invalid_job_graph_code() -> None:
    graph = diamond()
    graph.vertices[1].parallelism = 0
    with pytest.raises(InvalidArgumentError) as info:
        validate(graph)
    assert isinstance(info.value, InvalidJobGraphError)
    assert info.value.code.name == "INVALID_JOB_GRAPH"


# -- one test per check ---------------------------------------------------------------------------


def test_missing_job_id() -> None:
    graph = diamond()
    graph.job_id = JobID("")
    assert single_problem(graph) == "the job id is missing"


@pytest.mark.parametrize("job_id", ["/", "/tmp/victim", "../x", "job-1", "F" * 32])
def test_job_id_that_is_not_an_id_is_refused(job_id: str) -> None:
    graph = diamond()
    graph.job_id = JobID(job_id)
    assert "is not 32 lowercase hex digits" in single_problem(graph)


def test_bogus_job_config_value_is_refused_naming_the_key() -> None:
    graph = diamond()
    graph.config = {"restart-strategy.type": "bogus"}
    problem = single_problem(graph)
    assert "the job configuration is invalid" in problem
    assert "restart-strategy.type" in problem


def test_missing_job_name() -> None:
    graph = diamond()
    graph.name = "  "
    assert single_problem(graph) == "the job name is missing"


def test_empty_graph() -> None:
    assert single_problem(graph_of()) == "the job graph has no vertices"


def test_too_many_vertices() -> None:
    problems = problems_of(diamond(), max_vertices=4)
    assert problems == [
        "the job graph has 5 vertices, more than the maximum of 4 "
        "(jobmanager.job-graph.max-vertices)"
    ]


def test_duplicate_vertex_ids() -> None:
    graph = diamond()
    graph.vertices[2].id = vid("left")
    graph.vertices[2].produced[0].producer = vid("left")
    graph.vertices[2].inputs[0].target = vid("left")
    assert single_problem(graph) == "vertex id id-left is used by 2 vertices: 'left', 'right'"


def test_vertex_without_id() -> None:
    graph = diamond()
    graph.vertices[1].id = JobVertexID("")
    graph.vertices[1].produced[0].producer = JobVertexID("")
    graph.vertices[1].inputs[0].target = JobVertexID("")
    assert single_problem(graph) == "vertex 'left' (no id, position 1) has no id"


def test_duplicate_data_set_ids_across_vertices() -> None:
    graph = diamond()
    graph.vertices[2].produced[0].id = dsid("left")
    graph.vertices[3].inputs[1].source = dsid("left")  # join read ds-right; now ds-left twice
    assert single_problem(graph) == (
        "data set id ds-left is produced 2 times, by vertex 'left' (id-left), "
        "vertex 'right' (id-right)"
    )


def test_data_set_without_id() -> None:
    graph = diamond()
    graph.vertices[4].produced.append(IntermediateDataSet(IntermediateDataSetID(""), vid("sink")))
    assert single_problem(graph) == "vertex 'sink' (id-sink) produces a data set with no id"


def test_vertex_without_name() -> None:
    graph = diamond()
    graph.vertices[3].name = ""
    assert single_problem(graph) == "vertex <unnamed> (id-join) has no name"


@pytest.mark.parametrize("parallelism", [0, -3])
def test_non_positive_parallelism(parallelism: int) -> None:
    graph = diamond()
    graph.vertices[3].parallelism = parallelism
    assert single_problem(graph) == (
        f"vertex 'join' (id-join) has parallelism {parallelism}; it must be at least 1 "
        "(or -1: decided by the JobMaster)"
    )


def test_automatic_parallelism_is_valid_and_declared_source_paths_are_checked() -> None:
    graph = diamond()
    graph.vertices[3].parallelism = AUTO_PARALLELISM
    graph.vertices[0].source_paths = ["/data/in/*.csv"]
    validate(graph)  # nothing to report
    graph.vertices[0].source_paths = ["/data/\x00"]
    assert "declares a source path that is empty" in single_problem(graph)


def test_parallelism_above_max_parallelism() -> None:
    graph = diamond()
    graph.vertices[2].max_parallelism = 4
    assert single_problem(graph) == (
        "vertex 'right' (id-right) has parallelism 8, above its max parallelism 4"
    )


@pytest.mark.parametrize("max_parallelism", [0, -1, 32769])
def test_max_parallelism_out_of_range(max_parallelism: int) -> None:
    graph = diamond()
    graph.vertices[0].max_parallelism = max_parallelism
    assert single_problem(graph) == (
        f"vertex 'source' (id-source) has max parallelism {max_parallelism}; it must be "
        "between 1 and 32768"
    )


def test_unknown_operator_kind_lists_the_known_ones() -> None:
    graph = diamond()
    graph.vertices[1].operator.kind = "flatmap"
    assert single_problem(graph) == (
        "vertex 'left' (id-left) runs unknown operator kind 'flatmap' "
        "(known kinds: 'noop', 'spark')"
    )


def test_missing_operator_kind() -> None:
    graph = diamond()
    graph.vertices[1].operator.kind = ""
    assert single_problem(graph) == (
        "vertex 'left' (id-left) has no operator kind (known kinds: 'noop', 'spark')"
    )


def test_known_operator_kinds_is_a_parameter() -> None:
    graph = graph_of(vertex("a", kind="custom"))
    validate_job_graph(graph, known_operator_kinds=["custom"])
    with pytest.raises(InvalidJobGraphError, match="no operator kinds are known"):
        validate_job_graph(graph, known_operator_kinds=())


def test_dangling_edge() -> None:
    graph = diamond()
    graph.vertices[3].inputs[1].source = dsid("nowhere")
    problems = problems_of(graph)
    assert problems == [
        "edge from data set ds-nowhere to vertex 'join' (id-join) (input #1) reads an unknown "
        "data set: no vertex produces it"
    ]


def test_edge_without_source() -> None:
    graph = diamond()
    graph.vertices[4].inputs[0].source = IntermediateDataSetID("")
    assert single_problem(graph) == "input #0 of vertex 'sink' (id-sink) names no data set to read"


def test_edge_whose_target_is_not_its_holder() -> None:
    graph = diamond()
    graph.vertices[4].inputs[0].target = vid("join")
    assert single_problem(graph) == (
        "edge from data set ds-join to vertex 'sink' (id-sink) (input #0) names 'id-join' as "
        "its target; an edge must be listed by the vertex it feeds"
    )


def test_data_set_whose_producer_is_not_its_holder() -> None:
    graph = diamond()
    graph.vertices[0].produced[0].producer = vid("sink")
    assert single_problem(graph) == (
        "data set ds-source is listed by vertex 'source' (id-source) but names 'id-sink' as its "
        "producer"
    )


def test_cycle_names_the_vertices_on_it_and_not_those_downstream() -> None:
    graph = graph_of(
        vertex("src"),
        vertex("a", reads=("src", "c")),
        vertex("b", reads=("a",)),
        vertex("c", reads=("b",)),
        vertex("downstream", reads=("c",)),
    )
    assert single_problem(graph) == (
        "the job graph has a cycle: vertex 'a' (id-a) -> vertex 'b' (id-b) -> vertex 'c' (id-c) "
        "-> vertex 'a' (id-a)"
    )


def test_self_loop_is_a_cycle() -> None:
    graph = diamond()
    graph.vertices[3].inputs.append(
        JobEdge(dsid("join"), vid("join"), DistributionPattern.POINTWISE)
    )
    assert single_problem(graph) == (
        "the job graph has a cycle: vertex 'join' (id-join) -> vertex 'join' (id-join)"
    )


def test_separate_cycles_are_reported_separately() -> None:
    graph = graph_of(
        vertex("a", reads=("b",)),
        vertex("b", reads=("a",)),
        vertex("c", reads=("d",)),
        vertex("d", reads=("c",)),
    )
    assert problems_of(graph) == [
        "the job graph has a cycle: vertex 'a' (id-a) -> vertex 'b' (id-b) -> vertex 'a' (id-a)",
        "the job graph has a cycle: vertex 'c' (id-c) -> vertex 'd' (id-d) -> vertex 'c' (id-c)",
    ]


def test_intertwined_cycles_name_the_whole_group() -> None:
    # a -> b -> a and b -> c -> b: one group of three vertices.
    graph = graph_of(
        vertex("a", reads=("b",)),
        vertex("b", reads=("a", "c")),
        vertex("c", reads=("b",)),
    )
    (problem,) = problems_of(graph)
    assert problem.startswith("the job graph has a cycle: vertex 'a' (id-a) -> vertex 'b' (id-b)")
    assert problem.endswith(
        "(part of a group of 3 vertices that all reach each other: vertex 'a' (id-a), "
        "vertex 'b' (id-b), vertex 'c' (id-c))"
    )


def test_long_cycle_is_shortened_in_the_message() -> None:
    n = 10_000
    vertices = [vertex("v0", reads=(f"v{n - 1}",))]
    vertices += [vertex(f"v{i}", reads=(f"v{i - 1}",)) for i in range(1, n)]
    (problem,) = problems_of(graph_of(*vertices))
    assert problem.startswith("the job graph has a cycle: vertex 'v0' (id-v0) -> vertex 'v1'")
    assert f"... ({n - MAX_LISTED_CYCLE_VERTICES} more) -> vertex 'v0' (id-v0)" in problem
    assert "part of a group" not in problem


@pytest.mark.parametrize("pattern", [None, 0, 9])
def test_unspecified_or_unknown_distribution_pattern(pattern: object) -> None:
    graph = diamond()
    graph.vertices[1].inputs[0].pattern = pattern  # type: ignore[assignment]
    shown = "unspecified" if not pattern else f"unknown ({pattern!r})"
    assert single_problem(graph) == (
        f"edge from data set ds-source to vertex 'left' (id-left) (input #0) has an {shown} "
        "distribution pattern; it must be one of POINTWISE, ALL_TO_ALL"
    )


def test_unspecified_result_partition_type() -> None:
    graph = diamond()
    graph.vertices[2].produced[0].result_type = None  # type: ignore[assignment]
    assert single_problem(graph) == (
        "data set ds-right of vertex 'right' (id-right) has an unspecified result partition "
        "type; it must be one of BLOCKING, PIPELINED"
    )


def test_valid_result_partition_types() -> None:
    graph = diamond()
    graph.vertices[0].produced[0].result_type = ResultPartitionType.PIPELINED
    validate(graph)


def _unchecked_profile(cpu: float, memory: int) -> ResourceProfile:
    """A profile ResourceProfile's constructor would refuse (as the wire decoder can produce)."""
    profile = ResourceProfile()
    object.__setattr__(profile, "cpu_cores", cpu)
    object.__setattr__(profile, "memory_mb", memory)
    return profile


@pytest.mark.parametrize(
    ("cpu", "memory", "shown"),
    [(-1.0, 512, "cpu=-1, memory=512MiB"), (2.0, -64, "cpu=2, memory=-64MiB")],
)
def test_negative_resource_profile(cpu: float, memory: int, shown: str) -> None:
    graph = diamond()
    graph.vertices[2].resource_profile = _unchecked_profile(cpu, memory)
    assert single_problem(graph) == (
        f"vertex 'right' (id-right) has an invalid resource profile ({shown}): cpu cores and "
        "memory must be finite and not negative"
    )


def test_non_finite_cpu_in_resource_profile() -> None:
    graph = diamond()
    graph.vertices[2].resource_profile = ResourceProfile(float("inf"), 10)
    assert "vertex 'right' (id-right) has an invalid resource profile (cpu=inf" in (
        single_problem(graph)
    )


# -- everything at once ---------------------------------------------------------------------------


def test_all_problems_are_reported_together() -> None:
    graph = diamond()
    graph.name = ""
    graph.vertices[0].parallelism = 0
    graph.vertices[1].operator.kind = "bogus"
    graph.vertices[2].inputs[0].pattern = None  # type: ignore[assignment]
    graph.vertices[3].inputs[1].source = dsid("missing")
    graph.vertices[4].resource_profile = _unchecked_profile(-1.0, 0)
    graph.vertices[4].inputs.append(JobEdge(dsid("sink-loop"), vid("sink")))
    graph.vertices[4].produced.append(IntermediateDataSet(dsid("sink-loop"), vid("sink")))
    problems = problems_of(graph)
    assert len(problems) == 7, problems
    assert problems[0] == "the job name is missing"
    expected_fragments = [
        "vertex 'source' (id-source) has parallelism 0",
        "vertex 'left' (id-left) runs unknown operator kind 'bogus'",
        "edge from data set ds-source to vertex 'right' (id-right) (input #0) has an "
        "unspecified distribution pattern",
        "edge from data set ds-missing to vertex 'join' (id-join) (input #1) reads an unknown",
        "vertex 'sink' (id-sink) has an invalid resource profile",
        "the job graph has a cycle: vertex 'sink' (id-sink) -> vertex 'sink' (id-sink)",
    ]
    for fragment in expected_fragments:
        assert any(fragment in p for p in problems), (fragment, problems)


def test_the_listing_is_capped_but_the_count_is_not() -> None:
    vertices = [vertex(f"v{i}", parallelism=0) for i in range(MAX_LISTED_PROBLEMS + 5)]
    graph = graph_of(*vertices, name="big")
    with pytest.raises(InvalidJobGraphError) as info:
        validate(graph)
    lines = str(info.value).split("\n")
    assert lines[0] == f"job graph 'big' is invalid: {MAX_LISTED_PROBLEMS + 5} problems"
    assert len(lines) == 1 + MAX_LISTED_PROBLEMS + 1
    assert lines[-1] == "  ... and 5 more"


# -- limits, lengths and sink paths ------------------------------------------------------------


def test_a_graph_over_the_limits_is_refused_before_the_full_walk() -> None:
    huge = graph_of(vertex("a", parallelism=1_000_000), vertex("b", reads=("a",), parallelism=3))
    started = time.monotonic()
    problems = problems_of(huge, limits=JobGraphLimits(max_parallelism=100_000))
    assert time.monotonic() - started < 0.5
    assert problems == [
        "vertex 'a' (position 0) has parallelism 1000000, more than the maximum of 100000 "
        "(jobmanager.job-graph.max-parallelism)",
        "the job graph has 1000003 subtasks in all, more than the maximum of 1000000 "
        "(jobmanager.job-graph.max-subtasks)",
    ]
    # Only the limits are reported: parallelism above max parallelism is not walked to.
    edges = problems_of(diamond(), limits=JobGraphLimits(max_edges=3))
    assert edges == [
        "the job graph has 5 edges, more than the maximum of 3 (jobmanager.job-graph.max-edges)"
    ]


def test_a_ten_thousand_by_ten_thousand_all_to_all_graph_is_within_the_default_limits() -> None:
    graph = graph_of(
        vertex("left", parallelism=10_000), vertex("right", reads=("left",), parallelism=10_000)
    )
    for v in graph.vertices:
        v.max_parallelism = 10_000
    validate(graph, limits=JobGraphLimits())


def test_long_names_and_config_entries_are_refused_with_their_length() -> None:
    graph = graph_of(vertex("source"), name="n" * 9_000_000)
    graph.vertices[0].name = "v" * 2000
    graph.config["k" * 300] = "1"
    graph.config["restart-strategy.type"] = "x" * 20_000
    with pytest.raises(InvalidJobGraphError) as info:
        validate(graph)
    summary, *problems = str(info.value).split("\n")
    assert summary == f"job graph '{'n' * 80}...' is invalid: 4 problems"
    problems = [p.removeprefix("  - ") for p in problems]
    assert "the job name has 9000000 characters, more than the maximum of 1000" in problems
    assert any("has a name of 2000 characters" in p for p in problems)
    assert any("has 300 characters, more than the maximum of 256" in p for p in problems)
    assert any("'restart-strategy.type' has 20000 characters" in p for p in problems)
    assert all(len(p) < 400 for p in problems)  # nothing huge is echoed back


def test_vertex_and_data_set_ids_that_are_paths_are_refused() -> None:
    graph = graph_of(vertex("source"))
    graph.vertices[0].id = JobVertexID("../../etc")
    graph.vertices[0].produced[0] = IntermediateDataSet(
        IntermediateDataSetID("/tmp/x"), graph.vertices[0].id
    )
    problems = problems_of(graph)
    assert any("(../../etc) has an id that is not a safe name" in p for p in problems)
    assert any("data set '/tmp/x'" in p and "not a safe name" in p for p in problems)


@pytest.mark.parametrize("mode_dir", ["exchange", "ha"])
def test_sink_paths_on_root_or_the_cluster_directories_are_refused(
    tmp_path: Path, mode_dir: str
) -> None:
    exchange, ha = tmp_path / "exchange", tmp_path / "ha"
    protected = (str(exchange), str(ha))
    chosen = exchange if mode_dir == "exchange" else ha
    bad = ["/", "file:///", str(chosen), str(chosen / "inside"), str(tmp_path), f"{chosen}/../"]
    for path in bad:
        graph = graph_of(vertex("sink"))
        graph.vertices[0].sink_paths = [path]
        (problem,) = problems_of(graph, forbidden_sink_dirs=protected)
        assert "writes a sink where it may not" in problem, path
    fine = graph_of(vertex("sink"))
    fine.vertices[0].sink_paths = [str(tmp_path / "out"), str(tmp_path / "exchange-results")]
    validate(fine, forbidden_sink_dirs=protected)
