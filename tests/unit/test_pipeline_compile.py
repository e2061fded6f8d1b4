"""Compiling pipelines into job graphs: chaining, exchanges, parallelism, payloads, commit.

No Spark runs here: pipelines are only compiled, and the file-level helpers of the data plane
(share assignment, pointwise readers, the sink commit protocol, cleanup) are pure Python.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import sparkmill as sm
from sparkmill import functions as F
from sparkmill._compile import split_aggregates
from sparkmill.common.core.errors import CommitError, InvalidJobGraphError, PipelineError
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.exchange import layout
from sparkmill.common.exchange.pointwise import pointwise_readers
from sparkmill.common.jobgraph.codec import job_graph_from_proto, job_graph_to_proto
from sparkmill.common.jobgraph.model import DistributionPattern, JobGraph, JobVertex
from sparkmill.common.jobgraph.validation import validate_job_graph
from sparkmill.common.pipeline import plan as S
from sparkmill.services.taskexecutor.spark import errors, sinks, sources

A2A = DistributionPattern.ALL_TO_ALL
POINTWISE = DistributionPattern.POINTWISE

JOB = "0123456789abcdef0123456789abcdef"


def vertices(graph: JobGraph) -> dict[str, JobVertex]:
    return {v.name: v for v in graph.vertices}


def edges(graph: JobGraph) -> set[tuple[str, str, str, str]]:
    """(producer, consumer, partitioner, pattern) of every edge."""
    producer = {ds.id: v.name for v in graph.vertices for ds in v.produced}
    return {
        (producer[e.source], v.name, e.partitioner, e.pattern.name)
        for v in graph.vertices
        for e in v.inputs
    }


def chain(vertex: JobVertex) -> S.ChainSpec:
    spec = S.decode_spec(vertex.operator.payload)
    assert isinstance(spec, S.ChainSpec)
    return spec


def build(pipeline: sm.Pipeline) -> JobGraph:
    graph = pipeline.build_job_graph()
    validate_job_graph(graph, known_operator_kinds={"spark"})
    assert job_graph_from_proto(job_graph_to_proto(graph)).name == graph.name
    return graph


# -- chaining -------------------------------------------------------------------------------


def test_forward_operators_of_equal_parallelism_are_chained(tmp_path: Path) -> None:
    p = sm.Pipeline("chain", parallelism=3)
    (
        p.read_text(str(tmp_path / "*.txt"))
        .select(F.explode(F.split("value", " ")).alias("word"))
        .where(F.col("word") != "")
        .write_parquet(str(tmp_path / "out"))
    )
    graph = build(p)
    assert list(vertices(graph)) == ["read_text -> select -> where -> write_parquet", "commit"]
    spec = chain(graph.vertices[0])
    assert [n.label for n in spec.nodes] == ["read_text", "select", "where"]
    assert isinstance(spec.nodes[0].op, S.FileSource)
    assert spec.root == 2
    assert spec.outputs == (S.SinkOutput("parquet", str(tmp_path / "out"), "error", {}),)
    assert graph.vertices[0].parallelism == 3


def test_key_by_agg_splits_into_partial_and_final_across_a_hash_exchange() -> None:
    p = sm.Pipeline("wc", parallelism=4)
    counts = (
        p.range(100)
        .with_column("k", F.col("id") % 7)
        .key_by("k")
        .agg(F.count("*").alias("n"), F.sum("id").alias("total"))
    )
    counts.collect()
    graph = build(p)
    assert edges(graph) == {
        (
            "range -> with_column(k) -> partial agg",
            "agg -> collect(collect-1)",
            "hash",
            "ALL_TO_ALL",
        ),
        ("agg -> collect(collect-1)", "commit", "none", "ALL_TO_ALL"),
    }
    producer = chain(vertices(graph)["range -> with_column(k) -> partial agg"])
    (out,) = producer.outputs
    assert isinstance(out, S.ExchangeOutput)
    assert (out.partitioner, out.keys, out.consumer_parallelism) == ("hash", ("k",), 4)
    partial = producer.nodes[-1].op
    assert isinstance(partial, S.PartialAgg)
    final = chain(vertices(graph)["agg -> collect(collect-1)"]).nodes[-1].op
    assert final == S.FinalAgg(("k",), (("sum", "__sm_agg0", "n"), ("sum", "__sm_agg1", "total")))


def test_aggregates_that_cannot_be_split_are_exchanged_whole() -> None:
    p = sm.Pipeline("avg", parallelism=2)
    p.range(10).key_by("id").agg(F.avg("id").alias("mean")).collect()
    graph = build(p)
    assert ("range", "agg -> collect(collect-1)", "hash", "ALL_TO_ALL") in edges(graph)
    op = chain(vertices(graph)["agg -> collect(collect-1)"]).nodes[-1].op
    assert isinstance(op, S.Aggregate)

    q = sm.Pipeline("no-combine", parallelism=2)
    q.range(10).key_by("id").agg(F.count("*").alias("n"), combine=False).collect()
    assert "range" in vertices(build(q))


def test_split_aggregates_rules() -> None:
    assert split_aggregates((F.count("*").alias("n"),)) is not None
    assert split_aggregates((F.count("*"),)) is None  # no alias: the name is Spark's
    assert split_aggregates((F.avg("x").alias("a"),)) is None
    assert split_aggregates((F.countDistinct("x").alias("d"),)) is None
    assert split_aggregates(("count(*)",)) is None
    partials, merges = split_aggregates((F.max("x").alias("m"), F.min("y").alias("l")))  # type: ignore[misc]
    assert [F.describe(p) for p in partials] == [
        "max('x').alias('__sm_agg0')",
        "min('y').alias('__sm_agg1')",
    ]
    assert merges == (("max", "__sm_agg0", "m"), ("min", "__sm_agg1", "l"))


def test_a_data_set_read_twice_ends_its_chain_with_one_data_set_per_reader(
    tmp_path: Path,
) -> None:
    p = sm.Pipeline("fan-out", parallelism=2)
    base = p.range(10).select("id")
    base.where("id > 3").write_csv(str(tmp_path / "b"))
    base.select("id").write_parquet(str(tmp_path / "c"))
    graph = build(p)
    assert edges(graph) >= {
        ("range -> select", "where -> write_csv", "forward", "POINTWISE"),
        ("range -> select", "select -> write_parquet", "forward", "POINTWISE"),
    }
    assert len(vertices(graph)["range -> select"].produced) == 2


def test_a_sink_joins_the_vertex_of_a_data_set_other_operators_read_too(tmp_path: Path) -> None:
    # The sink is one more output of the vertex (written from its exchange output's files),
    # not a subtask that reads an exchange only to write it out again.
    p = sm.Pipeline("fan-out", parallelism=2)
    base = p.range(10).select("id")
    base.write_json(str(tmp_path / "a"))
    base.write_csv(str(tmp_path / "b"))
    base.where("id > 3").collect(name="big")
    graph = build(p)
    host = vertices(graph)["range -> select -> write_json -> write_csv"]
    assert edges(graph) >= {
        (
            "range -> select -> write_json -> write_csv",
            "where -> collect(big)",
            "forward",
            "POINTWISE",
        ),
        ("range -> select -> write_json -> write_csv", "commit", "none", "ALL_TO_ALL"),
    }
    assert len(host.produced) == 2  # the exchange for the where, one "done" for the commit
    outputs = chain(host).outputs
    assert [type(o).__name__ for o in outputs] == ["ExchangeOutput", "SinkOutput", "SinkOutput"]
    assert host.sink_paths == [str(tmp_path / "a"), str(tmp_path / "b")]
    commit = S.decode_spec(vertices(graph)["commit"].operator.payload)
    assert isinstance(commit, S.CommitSpec)
    assert {c.done_dataset_id for c in commit.sinks} == {host.produced[1].id}


# -- exchanges and parallelism --------------------------------------------------------------


def test_parallelism_changes_become_pointwise_edges() -> None:
    p = sm.Pipeline("rescale", parallelism=3)
    (
        p.range(30)
        .select("id")
        .set_parallelism(3)
        .transform(lambda df: df)
        .set_parallelism(7)
        .select("id")
        .set_parallelism(3)
        .collect()
    )
    graph = build(p)
    v = vertices(graph)
    assert [x.parallelism for x in graph.vertices] == [3, 7, 3, 1]
    assert edges(graph) >= {
        ("range -> select", "transform", "forward", "POINTWISE"),
        ("transform", "select -> collect(collect-1)", "forward", "POINTWISE"),
    }
    assert chain(v["range -> select"]).outputs[0].consumer_parallelism == 7  # type: ignore[union-attr]


def test_inherited_and_default_parallelism() -> None:
    p = sm.Pipeline("defaults", parallelism=5)
    src = p.range(10).set_parallelism(2)
    src.select("id").collect(name="inherits")  # forward: 2, chained
    src.rebalance().select("id").collect(name="rebalanced")  # default: 5
    graph = build(p)
    v = vertices(graph)
    assert v["range"].parallelism == 2
    assert v["select -> collect(inherits)"].parallelism == 2
    assert v["select -> collect(rebalanced)"].parallelism == 5
    assert ("range", "select -> collect(rebalanced)", "rebalance", "ALL_TO_ALL") in edges(graph)


def test_hash_join_exchanges_both_sides_on_the_keys() -> None:
    p = sm.Pipeline("join", parallelism=4)
    left = p.range(10).set_parallelism(2)
    right = p.from_rows([(1, "a")], "id BIGINT, name STRING").set_parallelism(1)
    left.join(right, on="id", how="left").collect()
    graph = build(p)
    assert edges(graph) >= {
        ("range", "join -> collect(collect-1)", "hash", "ALL_TO_ALL"),
        ("from_rows", "join -> collect(collect-1)", "hash", "ALL_TO_ALL"),
    }
    assert vertices(graph)["join -> collect(collect-1)"].parallelism == 4
    for name in ("range", "from_rows"):
        (out,) = chain(vertices(graph)[name]).outputs
        assert isinstance(out, S.ExchangeOutput) and out.keys == ("id",)


def test_a_late_join_declares_the_sides_whose_skewed_sub_partitions_may_be_split() -> None:
    def splittable(how: str, then: str = "", parallelism: int | None = None) -> list[int]:
        p = sm.Pipeline("join", parallelism=parallelism)
        left = p.range(10)
        right = p.from_rows([(1, "a")], "id BIGINT, name STRING")
        joined = left.join(right, on="id", how=how)
        if then == "select":
            joined = joined.select("id").where("id > 1")
        elif then == "transform":
            joined = joined.transform(lambda df: df.distinct())
        elif then == "agg":
            joined = joined.key_by("id").agg(F.count("*").alias("n"))
        joined.collect()
        graph = build(p)
        (vertex,) = (v for v in graph.vertices if v.name.startswith("join"))
        positions = [e.source for e in vertex.inputs]
        producers = {ds.id: v.name for v in graph.vertices for ds in v.produced}
        # Reported by side: 0 for the left input (range), 1 for the right (from_rows).
        return sorted(
            0 if producers[positions[i]] == "range" else 1 for i in vertex.skew_splittable_inputs
        )

    assert splittable("inner") == [0, 1]
    assert splittable("left_outer") == splittable("leftanti") == splittable("semi") == [0]
    assert splittable("RIGHT") == [1]
    assert splittable("full") == splittable("cross") == []
    assert splittable("inner", then="select") == [0, 1]
    assert splittable("inner", then="agg") == [0, 1]  # its partial half, then an exchange
    assert splittable("inner", then="transform") == []  # user code may need all rows of a key
    assert splittable("inner", parallelism=4) == []  # decided before it runs: never split
    graph = job_graph_from_proto(job_graph_to_proto(build_inner_join()))
    assert [v.skew_splittable_inputs for v in graph.vertices if v.name.startswith("join")] == [
        [0, 1]
    ]


def build_inner_join() -> JobGraph:
    p = sm.Pipeline("join")
    p.range(10).join(p.range(5), on="id").collect()
    return build(p)


def test_broadcast_join_chains_the_probe_side_and_broadcasts_the_small_side() -> None:
    p = sm.Pipeline("bjoin", parallelism=3)
    small = p.from_rows([(1, "a")], "id BIGINT, name STRING").set_parallelism(1)
    p.range(10).join(small.broadcast(), on="id").collect()
    graph = build(p)
    assert edges(graph) >= {
        ("from_rows", "range -> join -> collect(collect-1)", "broadcast", "ALL_TO_ALL")
    }
    spec = chain(vertices(graph)["range -> join -> collect(collect-1)"])
    assert [type(n.op).__name__ for n in spec.nodes] == ["RangeSource", "GateInput", "Join"]
    assert spec.nodes[2].inputs == (0, 1)
    with pytest.raises(PipelineError, match="broadcast join cannot be 'full'"):
        p.range(3).join(small.broadcast(), on="id", how="full")


def test_union_takes_the_largest_parallelism_and_chains_an_equal_input() -> None:
    p = sm.Pipeline("union", parallelism=2)
    a = p.range(5).set_parallelism(3)
    b = p.range(5, 10).set_parallelism(2)
    a.union(b).collect()
    graph = build(p)
    assert ("range", "range -> union -> collect(collect-1)", "forward", "POINTWISE") in edges(graph)
    assert vertices(graph)["range -> union -> collect(collect-1)"].parallelism == 3


def test_resources_and_slot_sharing_groups_break_chains() -> None:
    p = sm.Pipeline("resources", parallelism=2)
    p.range(5).select("id").set_resources(1.0, 512).where("id > 1").set_slot_sharing_group(
        "heavy"
    ).collect()
    graph = build(p)
    v = vertices(graph)
    assert v["select"].resource_profile == ResourceProfile(1.0, 512)
    assert v["where"].slot_sharing_group == "heavy"
    assert len(graph.vertices) == 5  # range | select | where | collect | commit


# -- sinks, commit vertex, errors -----------------------------------------------------------


def test_every_sink_and_collect_feeds_a_final_commit_vertex(tmp_path: Path) -> None:
    p = sm.Pipeline("sinks", parallelism=2)
    data = p.range(10)
    data.write_parquet(str(tmp_path / "p"), mode="overwrite").set_parallelism(3)
    data.where("id % 2 = 0").collect(limit=5)
    graph = build(p)
    commit = graph.vertices[-1]
    assert commit.name == "commit" and commit.parallelism == 1
    assert len(commit.inputs) == 2
    assert {e.pattern for e in commit.inputs} == {A2A}
    spec = S.decode_spec(commit.operator.payload)
    writer = next(v for v in graph.vertices[:-1] if v.sink_paths)
    done = writer.produced[-1].id  # the sink's vertex signals the commit on its last data set
    assert done in {e.source for e in commit.inputs}
    assert spec == S.CommitSpec(
        (S.SinkCommit(str(tmp_path / "p"), "parquet", "overwrite", 3, (), done),)
    )
    # Declared outside the opaque payloads, for the control plane's sink path checks.
    assert commit.sink_paths == [str(tmp_path / "p")]
    writers = [v for v in graph.vertices[:-1] if v.sink_paths]
    assert [v.sink_paths for v in writers] == [[str(tmp_path / "p")]]
    exchange = str(tmp_path / "p" / "exchange")  # the sink would overwrite it
    with pytest.raises(InvalidJobGraphError, match="holds the cluster's directory"):
        validate_job_graph(graph, known_operator_kinds={"spark"}, forbidden_sink_dirs=[exchange])


def test_pipeline_errors(tmp_path: Path) -> None:
    p = sm.Pipeline("nothing", parallelism=1)
    p.range(3).select("id")
    with pytest.raises(PipelineError, match="has no sink"):
        p.build_job_graph()

    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "part-0.parquet").write_text("x")
    q = sm.Pipeline("exists", parallelism=1)
    q.range(3).write_parquet(str(existing))
    with pytest.raises(PipelineError, match="already exists"):
        q.build_job_graph()

    with pytest.raises(PipelineError, match="cannot follow the sink"):
        q.range(1).write_json(str(tmp_path / "j")).select("id")
    with pytest.raises(PipelineError, match="keys must be column names"):
        q.range(1).key_by(F.col("id"))
    with pytest.raises(PipelineError, match="parallelism must be at least 1"):
        sm.Pipeline("bad", parallelism=0)
    with pytest.raises(AttributeError, match="did you mean count"):
        F.cuont("*")


def test_unpicklable_function_fails_at_build_time_naming_the_operator() -> None:
    lock = threading.Lock()
    p = sm.Pipeline("unpicklable", parallelism=1)
    p.range(3).transform(lambda df: df.hint(str(lock)), name="locked").collect()
    with pytest.raises(PipelineError, match="operator 'locked' cannot be shipped"):
        p.build_job_graph()


def test_local_pyspark_columns_are_refused_with_a_hint() -> None:
    column_type = type("Column", (), {"__module__": "pyspark.sql.classic.column"})
    p = sm.Pipeline("column", parallelism=1)
    p.range(3).where(column_type()).collect()
    with pytest.raises(PipelineError, match=r"'where'.*sparkmill import functions"):
        p.build_job_graph()


def test_vertex_names_are_unique_and_paths_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    p = sm.Pipeline("names", parallelism=1)
    p.range(1).collect(name="a")
    p.range(1).collect(name="b")
    p.read_json("in/*.json").write_json("out", mode="overwrite")
    graph = build(p)
    names = [v.name for v in graph.vertices]
    assert len(set(names)) == len(names)
    source = chain(vertices(graph)["read_json -> write_json"])
    assert source.nodes[0].op == S.FileSource("json", (str(tmp_path / "in/*.json"),), {}, None)


# -- recorded expressions ---------------------------------------------------------------------


def test_expressions_are_recorded_and_described() -> None:
    e = (F.col("a") + 1 > F.lit(2)) & ~F.col("b").isNull()
    assert (
        F.describe(e)
        == "col('a').__add__(1).__gt__(lit(2)).__and__(col('b').isNull().__invert__())"
    )
    w = F.Window.partitionBy("k").orderBy(F.desc("v"))
    assert F.describe(F.row_number().over(w)) == (
        "row_number().over(Window.partitionBy('k').orderBy(desc('v')))"
    )
    with pytest.raises(ValueError, match="no truth value"):
        bool(F.col("a") == 1)


# -- data-plane helpers -----------------------------------------------------------------------


def test_pointwise_readers_match_the_execution_graph_rule() -> None:
    # 3 -> 7: partitions are read by [0,1,2], [3,4], [5,6]
    assert [pointwise_readers(p, 3, 7) for p in range(3)] == [range(0, 3), range(3, 5), range(5, 7)]
    # 7 -> 3: consumers read partitions [0,1], [2,3], [4,5,6]
    assert [pointwise_readers(p, 7, 3).start for p in range(7)] == [0, 0, 1, 1, 2, 2, 2]


def test_file_shares_are_disjoint_complete_and_balanced() -> None:
    files = [sources.InputFile(f"f{i}", size) for i, size in enumerate([100, 1, 50, 50, 0, 0])]
    shares = sources.assign_files(files, 3)
    assert sorted(f for share in shares for f in share) == sorted(f.path for f in files)
    assert shares == [["f0"], ["f1", "f2", "f5"], ["f3", "f4"]]
    assert sources.assign_files(files[:1], 3) == [["f0"], [], []]


def test_sink_commit_protocol(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    job = "0123456789abcdef0123456789abcdef"
    sink = S.SinkOutput("csv", out, "overwrite")

    def attempt(subtask: int, attempt_id: str, content: str) -> Path:
        d = sinks.attempt_dir(out, job, subtask, attempt_id)
        d.mkdir(parents=True)
        (d / "part-0000-x.csv").write_text(content)
        (d / "_SUCCESS").write_text("")
        (d / ".part-0000-x.csv.crc").write_text("")
        return d

    # A previous run's output is replaced; a retried subtask replaces its first commit.
    Path(out).mkdir()
    (Path(out) / "old.csv").write_text("old")
    sinks.commit_task(sink, job, 0, attempt(0, "a1", "first"))
    sinks.commit_task(sink, job, 0, attempt(0, "a2", "second"))
    sinks.commit_task(sink, job, 1, attempt(1, "b1", "other"))
    attempt(1, "b2-failed", "partial")  # never committed
    commit = S.SinkCommit(out, "csv", "overwrite", 2)
    assert sinks.commit_job(commit, job) == 2
    assert sorted(p.name for p in Path(out).iterdir()) == [
        "_SUCCESS",
        "part-00000-000.csv",
        "part-00001-000.csv",
    ]
    assert (Path(out) / "part-00000-000.csv").read_text() == "second"
    # Idempotent: a retried job commit finds nothing left to do and keeps the output.
    assert sinks.commit_job(commit, job) == 0
    assert (Path(out) / "part-00001-000.csv").read_text() == "other"


def test_commit_job_refuses_missing_subtasks_and_existing_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    d = sinks.attempt_dir(str(out), JOB, 0, "a")
    d.mkdir(parents=True)
    (d / "part-1.json").write_text("{}")
    sinks.commit_task(S.SinkOutput("json", str(out), "error"), JOB, 0, d)
    with pytest.raises(CommitError, match=r"subtasks \[1\]"):
        sinks.commit_job(S.SinkCommit(str(out), "json", "error", 2), JOB)
    (out / "someone-elses.json").write_text("{}")
    with pytest.raises(CommitError, match="already has content"):
        sinks.commit_job(S.SinkCommit(str(out), "json", "error", 1), JOB)


def test_cleanup_removes_exchange_data_and_sink_temporaries(tmp_path: Path) -> None:
    exchange_dir = str(tmp_path / "exchange")
    out = str(tmp_path / "out")
    layout.register_sink(exchange_dir, JOB, out)
    partition = layout.partition_dir(exchange_dir, JOB, "ds", 0, "attempt")
    partition.mkdir(parents=True)
    sinks.attempt_dir(out, JOB, 0, "attempt").mkdir(parents=True)
    layout.cleanup_job(exchange_dir, JOB)
    assert not (tmp_path / "exchange" / JOB).exists()
    assert not (tmp_path / "out" / "_temporary").exists()
    layout.cleanup_job(exchange_dir, JOB)  # idempotent


def test_error_summaries_put_the_users_error_first() -> None:
    class PythonException(Exception):
        pass

    class Py4JJavaError(Exception):
        pass

    class AnalysisException(Exception):
        def getCondition(self) -> str:
            return "UNRESOLVED_COLUMN.WITH_SUGGESTION"

    worker = (
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "job.py", line 3, in check\n    raise ValueError("boom")\nValueError: boom\n'
    )
    summary = errors.summarize(PythonException(worker)).splitlines()
    assert summary[0] == "ValueError: boom"
    assert '  File "job.py", line 3, in check' in summary
    nested = (
        "An error occurred while calling o9.save.\n: org.apache.spark.SparkException: Job "
        "aborted.\n\tat org.apache.spark.Foo(Foo.scala:1)\nCaused by: org.apache.spark.api."
        f"python.PythonException: {worker}\n\tat org.apache.spark.Bar(Bar.scala:2)\n"
    )
    assert errors.summarize(Py4JJavaError(nested)).splitlines()[0] == "ValueError: boom"
    jvm = (
        "An error occurred while calling o1.save.\n: org.apache.spark.SparkException: "
        "[TASK_WRITE_FAILED] Task failed.\n\tat org.apache.spark.Foo(Foo.scala:1)\n"
    )
    assert errors.summarize(Py4JJavaError(jvm)) == (
        "org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed."
    )
    analysis = AnalysisException("[UNRESOLVED_COLUMN] `nope` cannot be resolved.;\n'Project")
    assert errors.summarize(analysis) == (
        "AnalysisException: [UNRESOLVED_COLUMN] `nope` cannot be resolved."
    )


def sink_attempt(out: str, attempt_id: str, content: str) -> Path:
    """What an attempt of subtask 0 of job J wrote to the sink ``out`` (one CSV file)."""
    d = sinks.attempt_dir(out, JOB, 0, attempt_id)
    d.mkdir(parents=True)
    (d / "part-0000.csv").write_text(content)
    return d


def test_a_late_older_attempt_never_replaces_a_newer_commit(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    sink = S.SinkOutput("csv", out, "overwrite")

    assert sinks.commit_task(sink, JOB, 0, sink_attempt(out, "new", "attempt 1"), attempt_number=1)
    # The restarted subtask's old attempt (a hung executor) finishes after the new one.
    stale = sink_attempt(out, "old", "attempt 0")
    assert not sinks.commit_task(sink, JOB, 0, stale, attempt_number=0)
    assert not stale.exists()
    assert sinks.commit_job(S.SinkCommit(out, "csv", "overwrite", 1), JOB) == 1
    assert (Path(out) / "part-00000-000.csv").read_text() == "attempt 1"


def test_an_attempt_committing_after_the_job_commit_claimed_its_subtask_changes_nothing(
    tmp_path: Path,
) -> None:
    """Speculative execution: the attempt that lost the race may still commit (its cancel
    came too late) while the job commit publishes the winner's output. Before the claim, its
    newer commit would have deleted the very directory the plan was moving files from."""
    out = str(tmp_path / "out")
    sink = S.SinkOutput("csv", out, "overwrite")
    commit = S.SinkCommit(out, "csv", "overwrite", 1)
    assert sinks.commit_task(sink, JOB, 0, sink_attempt(out, "winner", "attempt 0"))
    plan = sinks._plan(commit, JOB)  # the job commit has claimed and planned
    late = sink_attempt(out, "loser", "attempt 1")
    assert sinks.commit_task(sink, JOB, 0, late, attempt_number=1)  # it commits beside
    assert sinks.commit_job(commit, JOB) == len(plan) == 1
    published = sorted(p.name for p in Path(out).iterdir())
    assert published == ["_SUCCESS", "part-00000-000.csv"]
    assert (Path(out) / "part-00000-000.csv").read_text() == "attempt 0"
    # A retried job commit keeps what the first one published.
    assert sinks.commit_job(commit, JOB) == 0


def test_an_attempt_of_a_later_job_master_replaces_a_higher_numbered_commit(
    tmp_path: Path,
) -> None:
    # Attempt numbers start at 0 again under a JobMaster that took the job over.
    out = str(tmp_path / "out")
    sink = S.SinkOutput("csv", out, "overwrite")

    old_leader, new_leader = 1_000, 2_000
    assert sinks.commit_task(
        sink,
        JOB,
        0,
        sink_attempt(out, "a", "old #3"),
        attempt_number=3,
        job_master_epoch=old_leader,
    )
    assert sinks.commit_task(
        sink,
        JOB,
        0,
        sink_attempt(out, "b", "new #0"),
        attempt_number=0,
        job_master_epoch=new_leader,
    )
    late = sink_attempt(out, "c", "old #4")  # the deposed JobMaster's executor finishes late
    assert not sinks.commit_task(sink, JOB, 0, late, attempt_number=4, job_master_epoch=old_leader)
    assert sinks.commit_job(S.SinkCommit(out, "csv", "overwrite", 1), JOB) == 1
    assert (Path(out) / "part-00000-000.csv").read_text() == "new #0"


def test_the_newest_commit_wins_whatever_order_the_commits_land_in(tmp_path: Path) -> None:
    # A deposed JobMaster's executor (epoch 5) and its successor's (epoch 9) commit subtask 0;
    # no interleaving of the two can make the older one the subtask's output.
    for deposed_first in (True, False):
        out = str(tmp_path / f"out-{deposed_first}")
        sink = S.SinkOutput("csv", out, "overwrite")
        commits = [
            (sink_attempt(out, "old", "deposed #2"), 2, 5),
            (sink_attempt(out, "new", "successor #0"), 0, 9),
        ]
        if not deposed_first:
            commits.reverse()
        results = {
            number: sinks.commit_task(sink, JOB, 0, d, attempt_number=number, job_master_epoch=e)
            for d, number, e in commits
        }
        assert results == {0: True, 2: deposed_first}  # committed for now, or refused
        assert sinks.commit_job(S.SinkCommit(out, "csv", "overwrite", 1), JOB) == 1
        assert [p.name for p in Path(out).iterdir() if p.suffix == ".csv"] == ["part-00000-000.csv"]
        assert (Path(out) / "part-00000-000.csv").read_text() == "successor #0"


def test_concurrent_job_commits_carry_out_the_first_plan(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    sink = S.SinkOutput("csv", out, "overwrite")
    assert sinks.commit_task(sink, JOB, 0, sink_attempt(out, "a", "first"), job_master_epoch=1)
    commit = S.SinkCommit(out, "csv", "overwrite", 1)
    first = sinks._plan(commit, JOB)  # a deposed JobMaster's commit vertex planned ...
    d = sink_attempt(out, "b", "second")
    (d / "part-0001.csv").write_text("more")
    assert sinks.commit_task(sink, JOB, 0, d, job_master_epoch=2)
    # ... so its successor's carries out the same plan, never a second one beside it.
    assert sinks._plan(commit, JOB) == first
    assert not list(sinks.committed_root(out, JOB).parent.glob("*.tmp"))


def test_commit_job_fails_rather_than_publish_incomplete_output(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    d = sinks.attempt_dir(out, JOB, 0, "a")
    d.mkdir(parents=True)
    (d / "part-0000.csv").write_text("rows")
    sinks.commit_task(S.SinkOutput("csv", out, "overwrite"), JOB, 0, d)
    commit = S.SinkCommit(out, "csv", "overwrite", 1)
    plan = sinks._plan(commit, JOB)
    Path(plan[0][0]).unlink()  # e.g. replaced by a late commit between plan and move
    with pytest.raises(CommitError, match="vanished"):
        sinks.commit_job(commit, JOB)
    assert not (Path(out) / "_SUCCESS").exists()


def test_the_commit_task_refuses_a_sink_over_a_cluster_directory(tmp_path: Path) -> None:
    """A payload whose sink the graph did not declare is still checked where it runs."""
    from sparkmill.services.taskexecutor.context import TaskContext
    from sparkmill.services.taskexecutor.spark.runner import run_commit

    exchange = tmp_path / "exchange"
    (exchange / "keep").mkdir(parents=True)
    context = TaskContext(JOB, "j", "v", "commit", 0, 1, "a" * 32, 0, b"")
    context.exchange_dir, context.protected_dirs = str(exchange), (str(exchange),)
    for path in (str(tmp_path), str(exchange)):
        spec = S.CommitSpec((S.SinkCommit(path, "csv", "overwrite", 1),))
        with pytest.raises(CommitError, match="refusing to write this sink"):
            run_commit(spec, context)
    assert (exchange / "keep").is_dir()
