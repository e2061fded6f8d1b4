"""Database sources and sinks without a database: the API's checks, what the job graph holds
(never a credential), stride predicates, staging names and the credentials file."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

import sparkmill as sm
from sparkmill._compile import COMMIT_VERTEX_NAME, compile_pipeline
from sparkmill.common.core.errors import DatabaseAccessError, PipelineError
from sparkmill.common.exchange import layout
from sparkmill.common.pipeline import plan as S
from sparkmill.services.taskexecutor.spark import jdbc, jdbc_access
from sparkmill.services.taskexecutor.spark.session import jdbc_driver_conf

URL = "jdbc:postgresql://db.example:5432/shop"


def _payloads(pipeline: sm.Pipeline) -> dict[str, bytes]:
    graph = compile_pipeline(pipeline).graph
    return {v.name: v.operator.payload for v in graph.vertices}


def test_a_jdbc_pipeline_compiles_into_sources_sinks_and_a_database_commit(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "db.credentials"
    secret.write_text("user=shop\npassword=hunter2-very-secret\n")
    pipeline = sm.Pipeline("db", parallelism=3)
    orders = pipeline.read_jdbc(
        URL,
        table="orders",
        credentials_file=str(secret),
        partition_column="id",
        lower_bound=0,
        upper_bound=1000,
    )
    customers = pipeline.read_jdbc(
        URL, query="SELECT * FROM customers", credentials_file=str(secret)
    )
    orders.join(customers, on="customer").write_jdbc(
        URL, "public.summary", mode="overwrite", credentials_file=str(secret)
    )
    assert orders.node.parallelism is None  # the pipeline's default: 3 strides
    assert customers.node.parallelism == 1  # nothing to split by
    payloads = _payloads(pipeline)
    for payload in payloads.values():
        assert b"hunter2" not in payload  # only the file's path travels
    commit = S.decode_spec(payloads[COMMIT_VERTEX_NAME])
    assert isinstance(commit, S.CommitSpec)
    assert commit.sinks == ()
    (table,) = commit.jdbc
    assert (table.output.table, table.output.mode, table.parallelism) == (
        "public.summary",
        "overwrite",
        3,
    )
    assert table.output.credentials_file == str(secret)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p: p.read_jdbc(URL), "exactly one of table= or query="),
        (lambda p: p.read_jdbc(URL, table="t", query="q"), "exactly one of"),
        (lambda p: p.read_jdbc("postgresql://x/y", table="t"), "starts with 'jdbc:'"),
        (lambda p: p.read_jdbc(URL + "?password=pw", table="t"), "credentials_file"),
        (lambda p: p.read_jdbc(URL, table="t", password="pw"), "credentials_file"),
        (lambda p: p.read_jdbc(URL, table="t", partition_column="id"), "lower_bound"),
        (lambda p: p.read_jdbc(URL, table="t", lower_bound=1), "partition_column"),
        (
            lambda p: p.read_jdbc(
                URL, table="t", partition_column="id", lower_bound=5, upper_bound=5
            ),
            "must be above",
        ),
        (lambda p: p.range(3).write_jdbc(URL, "t", mode="error"), "append, overwrite"),
        (lambda p: p.range(3).write_jdbc(URL, " "), "needs a table name"),
        (lambda p: p.range(3).write_jdbc(URL, "t", user="me"), "credentials_file"),
        (lambda p: p.range(3).write_parquet("/tmp/x", mode="merge"), "error, overwrite, append"),
        (lambda p: p.range(3).write_parquet("/tmp/x", partition_by=["a", "a"]), "twice"),
        (lambda p: p.range(3).write_csv("/tmp/x", partitionBy="a"), "partition_by=[...]"),
    ],
)
def test_bad_arguments_fail_when_the_pipeline_is_built(call: object, message: str) -> None:
    pipeline = sm.Pipeline("bad")
    with pytest.raises(PipelineError, match=re.escape(message)):
        call(pipeline)  # type: ignore[operator]


def test_two_sinks_of_one_table_are_refused() -> None:
    pipeline = sm.Pipeline("twice")
    data = pipeline.range(3)
    data.write_jdbc(URL, "t")
    data.write_jdbc(URL, "T")
    with pytest.raises(PipelineError, match="two sinks write to table"):
        compile_pipeline(pipeline)


def test_partition_by_reaches_the_sink_and_the_commit(tmp_path: Path) -> None:
    pipeline = sm.Pipeline("days", parallelism=2)
    pipeline.range(10).write_parquet(str(tmp_path / "t"), mode="append", partition_by="day")
    payloads = _payloads(pipeline)
    commit = S.decode_spec(payloads[COMMIT_VERTEX_NAME])
    assert isinstance(commit, S.CommitSpec)
    assert [(s.mode, s.partition_by) for s in commit.sinks] == [("append", ("day",))]


@pytest.mark.parametrize("parallelism", [1, 2, 3, 7])
def test_stride_predicates_give_every_row_to_exactly_one_subtask(parallelism: int) -> None:
    predicates = jdbc.stride_predicates("id", 0, 100, parallelism)
    assert len(predicates) == parallelism
    for value in [None, -50, 0, 1, 13, 49, 50, 99, 100, 1000]:
        matching = [p for p in predicates if _matches(p, value)]
        assert len(matching) == 1, (value, matching)


def _matches(predicate: str, value: int | None) -> bool:
    """Evaluate a stride predicate for one value of its column (SQL's NULL logic)."""
    if predicate == "1=1":
        return True
    if value is None:
        return "IS NULL" in predicate
    terms = predicate.replace(" OR id IS NULL", "").split(" AND ")
    for term in terms:
        _, op, bound = term.split()
        if (op == "<" and not value < int(bound)) or (op == ">=" and not value >= int(bound)):
            return False
    return True


def test_staging_tables_are_named_per_job_subtask_and_attempt_within_63_characters() -> None:
    job = "0123456789abcdef" * 2
    name = jdbc.staging_table("analytics.a_really_long_summary_table_name_indeed", job, 511, 12, 3)
    schema, _, table = name.partition(".")
    assert schema == "analytics"
    assert table.startswith(jdbc.staging_prefix("a_really_long_summary_table_name_indeed", job))
    assert table.endswith("_511_12_3")
    assert len(table) <= 63
    assert jdbc.staging_table("t", job, 0, 0, 0) != jdbc.staging_table("t", job, 0, 0, 1)
    assert (
        jdbc.bookkeeping_table("analytics.t", jdbc.COMMITS_TABLE) == "analytics.sparkmill_commits"
    )


def test_credentials_come_from_a_private_file(tmp_path: Path) -> None:
    secret = tmp_path / "db.credentials"
    secret.write_text("# the reporting user\nuser = report\npassword=s3cr=t\n")
    secret.chmod(0o600)
    credentials = jdbc_access.load_credentials(str(secret), "reading table t")
    assert (credentials.user, credentials.password) == ("report", "s3cr=t")
    assert "s3cr" not in repr(credentials)
    props = jdbc_access.properties(URL, credentials, {"fetchsize": "100"})
    assert props == {
        "fetchsize": "100",
        "driver": "org.postgresql.Driver",
        "user": "report",
        "password": "s3cr=t",
        "options": jdbc_access.SERVER_KEEPALIVES,
    }
    assert jdbc_access.scrub("login with s3cr=t failed", credentials) == "login with *** failed"
    assert jdbc_access.load_credentials("", "x") == jdbc_access.Credentials()


def test_postgresql_sessions_ask_the_server_to_probe_for_dead_clients() -> None:
    # A writer whose host powered off leaves an open transaction holding its staging table:
    # the server must find that session dead in about a minute, not the kernel's two hours.
    none = jdbc_access.Credentials()
    assert "tcp_keepalives_idle=30" in jdbc_access.properties(URL, none)["options"]
    # The user's own session options stay, the probes join them; their own probes win.
    own = jdbc_access.properties(URL, none, {"options": "-c search_path=reports"})
    assert own["options"] == f"-c search_path=reports {jdbc_access.SERVER_KEEPALIVES}"
    tuned = {"options": "-c tcp_keepalives_idle=5"}
    assert jdbc_access.properties(URL, none, tuned)["options"] == "-c tcp_keepalives_idle=5"
    # Other databases are left to their drivers.
    assert "options" not in jdbc_access.properties("jdbc:h2:mem:x", none)


def test_a_readable_or_malformed_credentials_file_is_refused_without_echoing_it(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "db.credentials"
    secret.write_text("user=report\npassword=topsecret\n")
    secret.chmod(0o644)
    with pytest.raises(DatabaseAccessError, match=r"reading table t: .*chmod 600") as refused:
        jdbc_access.load_credentials(str(secret), "reading table t")
    assert "topsecret" not in str(refused.value)
    secret.write_text("topsecret\n")
    secret.chmod(0o600)
    with pytest.raises(DatabaseAccessError, match="line 1 of the credentials file") as bad:
        jdbc_access.load_credentials(str(secret), "reading table t")
    assert "topsecret" not in str(bad.value)
    with pytest.raises(DatabaseAccessError, match="cannot read"):
        jdbc_access.load_credentials(str(tmp_path / "missing"), "reading table t")


class _JavaSQLException:
    """Stands in for a py4j handle of a ``java.sql.SQLException``."""

    def __init__(self, state: str, cause: object = None) -> None:
        self.state, self.cause = state, cause

    def getSQLState(self) -> str:
        return self.state

    def getMessage(self) -> str:
        return f"the server says {self.state} to pw-123456"

    def getCause(self) -> object:
        return self.cause


class _Py4JJavaError(Exception):
    def __init__(self, message: str, java_exception: object) -> None:
        super().__init__(message)
        self.java_exception = java_exception


@pytest.mark.parametrize(
    ("state", "permanent"),
    [("28P01", True), ("42P01", True), ("3D000", True), ("08001", False), ("40001", False)],
)
def test_failures_name_the_table_and_say_whether_a_restart_can_help(
    state: str, permanent: bool
) -> None:
    credentials = jdbc_access.Credentials("u", "pw-123456")
    exc = _Py4JJavaError("boom pw-123456", _JavaSQLException("", _JavaSQLException(state)))
    error = jdbc_access.failure("reading table public.orders from " + URL, exc, credentials)
    assert isinstance(error, DatabaseAccessError) is permanent
    assert "public.orders" in str(error)
    assert f"SQLSTATE {state}" in str(error)
    assert f"the server says {state} to ***" in str(error)
    assert "pw-123456" not in str(error)
    pickle.dumps(error)  # it crosses to the JobMaster as a failure


def test_no_driver_for_the_url_is_permanent() -> None:
    error = jdbc_access.failure(
        "reading table t",
        RuntimeError("java.sql.SQLException: No suitable driver"),
        jdbc_access.Credentials(),
    )
    assert isinstance(error, DatabaseAccessError)


def test_installed_driver_jars_join_the_configured_ones(tmp_path: Path) -> None:
    jar = tmp_path / "postgresql.jar"
    jar.write_bytes(b"")
    conf = jdbc_driver_conf({"spark.jars": "/opt/other.jar"}, (str(jar), "/nonexistent.jar"))
    assert conf["spark.jars"] == f"/opt/other.jar,{jar}"
    assert conf["spark.driver.extraClassPath"] == str(jar)
    assert jdbc_driver_conf({}, ("/nonexistent.jar",)) == {}


def test_an_ended_jobs_table_records_move_to_the_ended_tables_once(tmp_path: Path) -> None:
    job = "0123456789abcdef0123456789abcdef"
    exchange_dir = str(tmp_path / "exchange")
    assert layout.ended_table_sinks(exchange_dir) == []
    for _ in range(2):  # every attempt registers; one record per table
        layout.register_table_sink(exchange_dir, job, "jdbc:postgresql://db/x t", '{"t": 1}')
    layout.register_table_sink(exchange_dir, job, "jdbc:postgresql://db/x u", '{"u": 1}')
    assert layout.ended_table_sinks(exchange_dir) == []  # still running: nothing to drop
    layout.cleanup_job(exchange_dir, job)
    ended = layout.ended_table_sinks(exchange_dir)
    assert sorted(text for _, text in ended) == ['{"t": 1}', '{"u": 1}']
    assert all(path.name.startswith(f"{job}.") for path, _ in ended)
    assert not (tmp_path / "exchange" / job).exists()
    layout.cleanup_job(exchange_dir, job)  # idempotent: nothing more to hand over
    assert len(layout.ended_table_sinks(exchange_dir)) == 2
