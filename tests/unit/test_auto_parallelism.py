"""Automatic parallelism: sizing the sources, deciding the open vertices, and what the data
plane and a JobMaster taking over do with the decisions."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

import sparkmill as sm
from sparkmill._compile import compile_pipeline, describe_graph
from sparkmill.cli.explain import plan_document, plan_text
from sparkmill.cli.output import parallelism_text
from sparkmill.common.core.errors import CommitError
from sparkmill.common.core.ids import IntermediateDataSetID, JobID, JobVertexID
from sparkmill.common.core.partitions import InputGateInfo
from sparkmill.common.ha.progress_log import (
    ADOPTED,
    FINISHED,
    LEADER,
    FinishedAttempt,
    LogId,
    ProgressEvent,
    SessionLog,
    replay,
)
from sparkmill.common.jobgraph.auto_parallelism import (
    decide_parallelism,
    layout_of,
    size_sources,
)
from sparkmill.common.jobgraph.model import (
    AUTO_PARALLELISM,
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
)
from sparkmill.common.pipeline import plan as S
from sparkmill.common.v1 import jobs_pb2
from sparkmill.services.dispatcher.rest_json import vertex_json
from sparkmill.services.taskexecutor.context import TaskContext
from sparkmill.services.taskexecutor.spark.runner import with_decided_splits, with_decided_writers

MIB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """The auto-parallelism keys, as a test sets them (the cluster's defaults otherwise)."""

    enabled: bool = True
    min_parallelism: int = 1
    max_parallelism: int = 128
    bytes_per_task: int = 256 * MIB
    default_source_parallelism: int = 2
    job_graph_max_parallelism: int = 100_000
    job_graph_max_subtasks: int = 1_000_000
    skewed_join_strategy: str = "auto"
    skewed_join_factor: float = 4.0
    skewed_join_threshold: int = 256 * MIB


def vertex(name: str, parallelism: int = AUTO_PARALLELISM, **fields: object) -> JobVertex:
    return JobVertex(JobVertexID(f"id-{name}"), name, parallelism, OperatorSpec("spark"), **fields)  # type: ignore[arg-type]


def connect(producer: JobVertex, consumer: JobVertex, partitioner: str) -> None:
    dataset = IntermediateDataSet(
        IntermediateDataSetID(f"ds-{producer.name}-{consumer.name}"), producer.id
    )
    producer.produced.append(dataset)
    pattern = (
        DistributionPattern.POINTWISE
        if partitioner == "forward"
        else DistributionPattern.ALL_TO_ALL
    )
    consumer.inputs.append(JobEdge(dataset.id, consumer.id, pattern, partitioner))


def source_graph(*paths: str) -> tuple[JobGraph, JobVertex, JobVertex]:
    """read -> (hash) aggregate: two open vertices."""
    read = vertex("read", source_paths=list(paths))
    agg = vertex("agg")
    connect(read, agg, "hash")
    return JobGraph(JobID("job"), "j", [read, agg]), read, agg


def sized(path: Path, size: int) -> str:
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: no disk is used
    return str(path)


def decided(graph: JobGraph, limits: Limits = Limits()) -> dict[str, int]:
    result, _ = decide_parallelism(graph, size_sources(graph), limits)
    return {v.name: v.parallelism for v in result.vertices}


# -- sizing ---------------------------------------------------------------------------------


def test_sources_are_sized_like_a_source_reads_them(tmp_path: Path) -> None:
    data = tmp_path / "in"
    (data / "part=1").mkdir(parents=True)
    (data / "_temporary").mkdir()
    sized(data / "a.csv", 1000)
    sized(data / "part=1" / "b.csv", 500)
    sized(data / "_SUCCESS", 7)  # hidden, as Spark's markers are
    sized(data / "_temporary" / "c.csv", 9999)
    sized(data / ".a.csv.crc", 12)
    graph, read, _ = source_graph(str(data), "file://" + sized(tmp_path / "x.csv", 20))
    assert size_sources(graph) == {read.id: 1520}
    graph, read, _ = source_graph(str(data / "*.csv"), str(data / "a.csv"))  # counted once
    assert size_sources(graph) == {read.id: 1000}


@pytest.mark.parametrize(
    "path", ["hdfs://namenode/data", "s3a://bucket/key", "/nowhere/at/all", "/nowhere/*.csv"]
)
def test_a_source_that_cannot_be_listed_here_has_no_size(path: str) -> None:
    graph, read, _ = source_graph(path)
    assert size_sources(graph) == {read.id: None}
    assert decided(graph) == {"read": 2, "agg": 2}  # default-source-parallelism, both


def test_a_tree_too_large_to_list_has_no_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkmill.common.jobgraph import auto_parallelism

    data = tmp_path / "tree"
    for d in range(4):
        (data / f"d{d}").mkdir(parents=True)
        for f in range(5):
            sized(data / f"d{d}" / f"{f}.csv", 10)
    graph, read, _ = source_graph(str(data))
    assert size_sources(graph) == {read.id: 200}
    # A graph naming "/" must not walk the whole file system in the JobMaster: past the cap,
    # the walk stops and the source gets the default parallelism.
    monkeypatch.setattr(auto_parallelism, "MAX_LISTED_ENTRIES", 12)
    assert size_sources(graph) == {read.id: None}
    graph, read, _ = source_graph(str(data / "*" / "*.csv"))  # 20 matches of a glob
    assert size_sources(graph) == {read.id: None}
    assert decided(graph) == {"read": 2, "agg": 2}


def test_decisions_never_exceed_the_subtasks_a_job_graph_may_have(tmp_path: Path) -> None:
    big = sized(tmp_path / "big.bin", 3 * 1024 * MIB)
    graph, _, _ = source_graph(big)
    assert decided(graph, Limits(job_graph_max_subtasks=24)) == {"read": 12, "agg": 12}
    with pytest.raises(ValueError, match=r"add up to 24 subtasks.*max-subtasks"):
        decided(graph, Limits(job_graph_max_subtasks=23))


# -- deciding -------------------------------------------------------------------------------


def test_the_input_size_decides_within_the_bounds(tmp_path: Path) -> None:
    big = sized(tmp_path / "big.bin", 3 * 1024 * MIB)  # one huge file
    graph, _, _ = source_graph(big)
    assert decided(graph) == {"read": 12, "agg": 12}
    assert decided(graph, Limits(max_parallelism=5)) == {"read": 5, "agg": 5}
    graph.vertices[0].max_parallelism = 3  # the vertex's own bound
    assert decided(graph) == {"read": 3, "agg": 12}
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    for i in range(300):  # many tiny files
        sized(tiny / f"{i}.json", 1024)
    graph, _, _ = source_graph(str(tiny))
    assert decided(graph) == {"read": 1, "agg": 1}
    assert decided(graph, Limits(min_parallelism=4)) == {"read": 4, "agg": 4}
    assert decided(graph, Limits(bytes_per_task=100 * 1024)) == {"read": 3, "agg": 3}


def test_an_empty_input_gets_the_minimum(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    graph, _, _ = source_graph(str(empty))
    assert decided(graph) == {"read": 1, "agg": 1}
    assert decided(graph, Limits(min_parallelism=3)) == {"read": 3, "agg": 3}


def test_explicit_parallelism_stays_and_off_means_the_default(tmp_path: Path) -> None:
    graph, read, _ = source_graph(sized(tmp_path / "f", 10))
    read.parallelism = 7
    assert decided(graph) == {"read": 7, "agg": 1}
    assert decided(graph, Limits(enabled=False, default_source_parallelism=3)) == {
        "read": 7,
        "agg": 3,
    }


def test_forward_consumers_follow_and_broadcast_inputs_do_not_count(tmp_path: Path) -> None:
    big = vertex("big", source_paths=[sized(tmp_path / "big", 1024 * MIB)])
    small = vertex("small", source_paths=[sized(tmp_path / "small", 600 * MIB)])
    join = vertex("join")
    connect(big, join, "forward")
    connect(small, join, "broadcast")
    sink = vertex("sink")
    connect(join, sink, "rebalance")
    graph = JobGraph(JobID("job"), "j", [big, small, join, sink])
    result, decisions = decide_parallelism(graph, size_sources(graph), Limits())
    assert {v.name: v.parallelism for v in result.vertices} == {
        "big": 4,
        "small": 3,
        "join": 4,  # as its forward input, whatever its size
        "sink": 4,  # 1 GiB: the broadcast side is read whole by every subtask, not split
    }
    assert decisions[join.id].text == "auto: as its forward input 'big'"
    assert decisions[big.id].text == "auto: 1.0 GiB input, 256.0 MiB per subtask"
    assert graph.vertices[0].parallelism == AUTO_PARALLELISM  # the submitted graph is kept


def test_a_range_source_has_no_size_and_a_graph_without_open_vertices_is_left_alone() -> None:
    source = vertex("range")
    graph = JobGraph(JobID("job"), "j", [source])
    assert decided(graph) == {"range": 2}
    fixed = JobGraph(JobID("job"), "j", [vertex("range", 3)])
    assert decide_parallelism(fixed, {}, Limits()) == (fixed, {})


def test_an_input_of_unknown_size_counts_only_when_nothing_else_is_known(tmp_path: Path) -> None:
    files = vertex("files", source_paths=[sized(tmp_path / "f", 700 * MIB)])
    rows = vertex("rows", 1)  # in-memory rows, a range, a table: no size
    join = vertex("join")
    connect(files, join, "hash")
    connect(rows, join, "hash")
    after_rows = vertex("after rows")
    connect(rows, after_rows, "rebalance")
    graph = JobGraph(JobID("job"), "j", [files, rows, join, after_rows])
    assert decided(graph) == {"files": 3, "rows": 1, "join": 3, "after rows": 2}


def test_the_layout_changes_exactly_when_a_parallelism_does(tmp_path: Path) -> None:
    graph, _, _ = source_graph(sized(tmp_path / "f", 10))
    one, _ = decide_parallelism(graph, size_sources(graph), Limits())
    again, _ = decide_parallelism(graph, size_sources(graph), Limits())
    other, _ = decide_parallelism(graph, size_sources(graph), Limits(min_parallelism=2))
    assert layout_of(one) == layout_of(again) != layout_of(other)


# -- a JobMaster taking over ----------------------------------------------------------------


def _log(epoch: int, layout: str) -> SessionLog:
    session = f"s{epoch}"
    attempt = FinishedAttempt("id-read", 0, f"a{epoch}", 0, "te-1")
    events = [
        ProgressEvent(LEADER, session, seq=1, layout=layout),
        ProgressEvent(ADOPTED, session, seq=2),
        ProgressEvent(FINISHED, session, attempt, seq=3),
    ]
    return SessionLog(LogId(epoch, session), events)


def test_a_successor_keeps_finished_attempts_only_under_the_same_layout() -> None:
    logs = [_log(1, "aaaa")]
    assert list(replay(logs, LogId(2, "s2"), "aaaa").finished) == [("id-read", 0)]
    assert replay(logs, LogId(2, "s2"), "bbbb").finished == {}
    assert list(replay([_log(1, "")], LogId(2, "s2"), "bbbb").finished) == [("id-read", 0)]
    line = ProgressEvent(LEADER, "s1", seq=1, layout="aaaa").to_record()
    assert ProgressEvent.from_record(line.rstrip(b"\n")).layout == "aaaa"


# -- the data plane -------------------------------------------------------------------------


def _context(**fields: object) -> TaskContext:
    return TaskContext("job", "j", "v", "v", 0, 1, "att", 0, b"", **fields)  # type: ignore[arg-type]


def test_exchanges_are_split_for_the_decided_consumers() -> None:
    spec = S.ChainSpec(
        "v",
        (),
        0,
        (
            S.ExchangeOutput("d1", S.HASH, ("k",), AUTO_PARALLELISM),
            S.ExchangeOutput("d2", S.FORWARD, (), 3),
            S.CollectOutput("rows", 10),
        ),
    )
    outputs = with_decided_splits(spec, {"d1": 5}).outputs
    assert [getattr(o, "consumer_parallelism", None) for o in outputs] == [5, 3, None]
    assert with_decided_splits(spec, {}) is spec


def test_the_commit_counts_the_writers_the_job_master_decided() -> None:
    sink = S.SinkCommit("/out", "parquet", "overwrite", AUTO_PARALLELISM, (), "done-1")
    gate = InputGateInfo("done-1", "ALL_TO_ALL", "none", 6, ())
    spec = with_decided_writers(S.CommitSpec((sink,)), _context(inputs=[gate]))
    assert spec.sinks[0].parallelism == 6
    fixed = replace(sink, parallelism=2, done_dataset_id="")
    assert with_decided_writers(S.CommitSpec((fixed,)), _context()).sinks[0].parallelism == 2
    with pytest.raises(CommitError, match="cannot tell how many subtasks"):
        with_decided_writers(S.CommitSpec((sink,)), _context())


# -- the pipeline ---------------------------------------------------------------------------


def test_a_pipeline_without_a_default_leaves_parallelism_open(tmp_path: Path) -> None:
    data = tmp_path / "words.txt"
    data.write_text("a b\n")
    p = sm.Pipeline("wordcount")
    counts = p.read_text(str(data)).key_by("value").count()
    counts.write_parquet(str(tmp_path / "out"))
    graph = compile_pipeline(p).graph
    read, agg, commit = graph.vertices
    assert read.is_auto and agg.is_auto and commit.parallelism == 1
    assert read.source_paths == [str(data)] and agg.source_paths == []
    assert describe_graph(graph).startswith("[auto] ")
    explicit = sm.Pipeline("wordcount", parallelism=3)
    explicit.read_text(str(data)).write_parquet(str(tmp_path / "o2"))
    assert [v.parallelism for v in compile_pipeline(explicit).graph.vertices] == [3, 1]
    assert os.path.exists(data)


# -- the status views -----------------------------------------------------------------------


def test_status_views_say_auto_before_the_decision_and_why_after() -> None:
    before = jobs_pb2.VertexDetails(name="read", parallelism=0, parallelism_decision="auto")
    after = jobs_pb2.VertexDetails(
        name="read",
        parallelism=4,
        parallelism_decision="auto: 1.0 GiB input, 256.0 MiB per subtask",
    )
    fixed = jobs_pb2.VertexDetails(name="commit", parallelism=1)
    assert parallelism_text(before) == "parallelism auto"
    assert parallelism_text(after) == "parallelism 4, auto: 1.0 GiB input, 256.0 MiB per subtask"
    assert parallelism_text(fixed) == "parallelism 1"
    assert vertex_json(after, now=0.0)["parallelism-decision"].startswith("auto: 1.0 GiB")
    assert vertex_json(before, now=0.0)["tasks"]["CREATED"] == 0
    # A vertex the JobMaster decides once its inputs have finished says so meanwhile.
    waiting = jobs_pb2.VertexDetails(
        name="agg",
        parallelism=0,
        parallelism_decision="auto: decided when its inputs have finished (at most 8)",
    )
    assert parallelism_text(waiting) == (
        "parallelism auto: decided when its inputs have finished (at most 8)"
    )
    assert vertex_json(waiting, now=0.0)["status"] == "CREATED"


def test_explain_shows_auto_and_what_the_default_keys_would_decide(tmp_path: Path) -> None:
    big = sized(tmp_path / "big.txt", 600 * MIB)
    p = sm.Pipeline("count")
    p.read_text(big).key_by("value").count().write_parquet(str(tmp_path / "out"))
    document = plan_document(p, tmp_path / "count.py", [])
    read, agg, commit = document["vertices"]
    assert (read["parallelism"], read["expected_parallelism"]) == ("auto", 3)
    assert read["expected_because"] == "600.0 MiB input, 256.0 MiB per subtask"
    assert (agg["parallelism"], agg["expected_parallelism"]) == ("auto", 3)
    assert agg["decided_late"] and not read["decided_late"]
    assert agg["expected_because"].startswith("decided once its inputs have finished")
    assert (commit["parallelism"], commit["expected_parallelism"]) == (1, None)
    assert document["subtasks"] == 7 and document["auto_vertices"] == 2
    assert "  auto (3)  read_text -> partial agg" in plan_text(document)
    assert "auto (<=3)  agg -> write_parquet" in plan_text(document)
