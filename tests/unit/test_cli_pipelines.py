"""The CLI without a cluster, run as a user runs it (subprocesses): pipeline arguments,
``explain``, build-time schema and column checks, the shared options, JSON errors, early
refusals and failing fast when no cluster answers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkmill.cli.jobs import job_duration
from sparkmill.cli.output import details_json
from sparkmill.cli.pipeline_loading import PipelineLoadError, load_pipeline
from sparkmill.common.v1 import jobs_pb2

ROOT = Path(__file__).resolve().parents[2]

PARAMETERIZED = """\
import argparse
import sys

import sparkmill as sm

parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=10)
parser.add_argument("--out", default="out")
args = parser.parse_args()
SEEN_ARGV = list(sys.argv)
pipeline = sm.Pipeline("params", parallelism=3)
pipeline.range(args.n).key_by("id").count().write_parquet(args.out)
"""


def sparkmill(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkmill", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def test_pipeline_arguments_reach_argparse_and_sys_argv_is_restored(tmp_path: Path) -> None:
    file = tmp_path / "params.py"
    file.write_text(PARAMETERIZED.replace("SEEN_ARGV", "__builtins__['seen']"))
    before = list(sys.argv)
    load_pipeline(file, ["--n", "5", "--out", "x"])
    assert sys.argv == before
    with pytest.raises(PipelineLoadError, match=r"refused its arguments \['--bogus'\]"):
        load_pipeline(file, ["--bogus"])
    assert sys.argv == before


def test_explain_json_shows_vertices_exchanges_sinks_and_arguments(tmp_path: Path) -> None:
    (tmp_path / "params.py").write_text(PARAMETERIZED)
    run = sparkmill(
        "explain", "params.py", "--json", "--", "--n", "7", "--out", "rel/out", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert plan["arguments"] == ["--n", "7", "--out", "rel/out"]
    assert json.loads(plan["config"]["pipeline.args"]) == plan["arguments"]
    names = [v["name"] for v in plan["vertices"]]
    assert names[0] == "range -> partial agg" and names[-1] == "commit"
    assert {"partitioner": "hash", "pattern": "ALL_TO_ALL"}.items() <= plan["exchanges"][0].items()
    # A relative path in the pipeline is relative to the directory the command ran in.
    assert plan["sinks"][0]["path"] == str(tmp_path / "rel" / "out")
    assert plan["sinks"][0]["format"] == "parquet"
    text = sparkmill("explain", "params.py", "--", "--n", "7", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "with arguments: --n 7" in text.stdout and "hash" in text.stdout


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('p.read_csv("x.csv", schema="id BIGIN, name STRING").collect()', "unknown type 'BIGIN'"),
        (
            'p.read_csv("x.csv", schema="id BIGINT, name STRING").key_by("nmae").count().collect()',
            "'nmae' is not a column of its input (known columns: id, name)",
        ),
        (
            'p.range(3).join(p.from_rows([(1,)], schema="k INT"), on="id").collect()',
            "the join key 'id' is not a column of its input (known columns: k)",
        ),
        ('p.range(3).select("idd").collect()', "'idd' is not a column of its input"),
        ("p.range(3\n", "bad.py:5: syntax error"),
    ],
)
def test_explain_refuses_a_bad_pipeline_with_exit_2(
    tmp_path: Path, body: str, expected: str
) -> None:
    (tmp_path / "bad.py").write_text(
        f"import sparkmill as sm\n\np = sm.Pipeline('bad')\npipeline = p\n{body}\n"
    )
    run = sparkmill("explain", "bad.py", cwd=tmp_path)
    assert run.returncode == 2
    assert expected in run.stderr, run.stderr
    # The line that wrote the mistake, also when the check runs at build time.
    assert "bad.py:5: " in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_a_build_time_error_from_python_names_the_line_that_created_the_operator() -> None:
    import sparkmill as sm
    from sparkmill.common.core.errors import PipelineError

    pipeline = sm.Pipeline("origin")
    pipeline.range(3).select("idd").collect()
    line = sys._getframe().f_lineno - 1
    with pytest.raises(PipelineError) as raised:
        pipeline.build_job_graph()
    assert raised.value.origin == f"{__file__}:{line}"
    assert f"created at {__file__}:{line}" in "".join(raised.value.__notes__)


def test_known_columns_pass_through_select_with_column_and_agg(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text(
        "import sparkmill as sm\nfrom sparkmill import functions as F\n"
        "pipeline = sm.Pipeline('ok')\n"
        "d = pipeline.read_json('x.json', schema='id BIGINT, tags ARRAY<STRING>, "
        "m MAP<STRING, DECIMAL(10,2)>, s STRUCT<a: INT, b: STRING> NOT NULL')\n"
        "d = d.select('ID', F.col('tags'), F.col('m').alias('mm')).with_column('x', F.lit(1))\n"
        "d.key_by('x').agg(F.count('*').alias('n')).select('x', 'n').collect()\n"
    )
    run = sparkmill("explain", "ok.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr


def test_arguments_without_dashes_are_refused_with_a_hint(tmp_path: Path) -> None:
    run = sparkmill("submit", "p.py", "--input", "x", cwd=tmp_path)
    assert run.returncode == 2
    assert "go after `--`" in run.stderr


def test_errors_are_json_with_json(tmp_path: Path) -> None:
    run = sparkmill("jobs", "list", "--json", cwd=tmp_path, env={"SPARKMILL_CONFIG": ""})
    assert run.returncode == 2
    error = json.loads(run.stdout)
    assert error["exit_code"] == 2 and "SPARKMILL_CONFIG" in error["error"]


def test_job_duration_is_end_minus_start_not_the_wait() -> None:
    result = jobs_pb2.JobResult()
    result.details.submitted_at, result.details.ended_at = 100.0, 112.5
    assert job_duration(result, waited=0.2) == 12.5
    assert job_duration(jobs_pb2.JobResult(), waited=0.2) == 0.2


def test_exceptions_name_subtasks_like_the_failure_messages() -> None:
    details = jobs_pb2.JobDetails()
    details.vertices.add(name="agg", parallelism=4)
    details.exceptions.add(vertex_name="agg", subtask_index=1, attempt_number=2)
    assert details_json(details)["exceptions"][0]["task"] == "agg (2/4)"


def test_help_shows_defaults_exit_codes_and_version() -> None:
    run = sparkmill("run", "--help")
    assert "(default: 4)" in run.stdout and "exit codes:" in run.stdout
    assert "3  the cluster could not be reached" in run.stdout
    assert sparkmill("--version").stdout.startswith("sparkmill ")


def test_early_refusals_before_anything_starts(tmp_path: Path) -> None:
    up = sparkmill("local-cluster", "up", "--dir", str(tmp_path / "c"), "--slots", "0")
    assert up.returncode == 2 and "must be at least 1" in up.stderr
    assert not (tmp_path / "c").exists()
    run = sparkmill("run", str(ROOT / "examples" / "noop_job.py"), "--task-executors", "0")
    assert run.returncode == 2 and "must be at least 1" in run.stderr
    down = sparkmill("local-cluster", "down", "--dir", str(tmp_path / "missing"))
    assert down.returncode == 2, down.stderr
    assert "no local cluster in" in down.stderr and "Traceback" not in down.stderr


def _no_cluster_config(tmp_path: Path) -> Path:
    config = tmp_path / "cluster.yaml"
    config.write_text(
        "dispatcher.rpc-address: 127.0.0.1:1\nresourcemanager.rpc-address: 127.0.0.1:2\n"
        "security.curve.enabled: false\n"
    )
    return config


@pytest.mark.parametrize("command", [["jobs", "list"], ["cluster", "status"], ["submit", "p.py"]])
def test_no_cluster_fails_fast_naming_the_addresses(tmp_path: Path, command: list[str]) -> None:
    config = _no_cluster_config(tmp_path)
    (tmp_path / "p.py").write_text(
        "import sparkmill as sm\npipeline = sm.Pipeline('p')\npipeline.range(3).collect()\n"
    )
    # --config after the subcommand here; SPARKMILL_CONFIG in the next test.
    run = sparkmill(*command, "--config", str(config), cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    assert "127.0.0.1:1" in run.stderr and "local-cluster up" in run.stderr
    # Both ports refuse connections: the client says so after 1 s instead of waiting out its
    # 3 s contact timeout ("nothing answered within 3s"). Its message is the evidence, not the
    # process's wall time: that is mostly the interpreter and the imports, 2 s on a quiet
    # machine and 6 s on a busy one.
    assert "(connection refused for 1s)" in run.stderr, run.stderr
    assert "nothing answered within" not in run.stderr, run.stderr


def test_a_port_that_listens_but_never_answers_waits_out_the_contact_timeout() -> None:
    """A listener that accepts and stays silent is no refusal: the RPC attempt decides."""
    from sparkmill.client import ClusterClient
    from sparkmill.common.config.configuration import Configuration
    from sparkmill.common.core.errors import UnavailableError
    from sparkmill.common.runtime.settings import settings_from_config

    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        config = Configuration.from_mapping(
            {
                "dispatcher.rpc-address": f"tcp://127.0.0.1:{port}",
                "resourcemanager.rpc-address": "tcp://127.0.0.1:1",
                "security.curve.enabled": "false",
            }
        )
        started = time.monotonic()
        with (
            ClusterClient(settings_from_config(config), config, contact_timeout=1.5) as client,
            pytest.raises(UnavailableError, match=r"nothing answered within 1\.5s"),
        ):
            client.list_jobs()
        assert time.monotonic() - started >= 1.4


def test_sparkmill_config_and_d_overrides_are_validated(tmp_path: Path) -> None:
    config = _no_cluster_config(tmp_path)
    env = {"SPARKMILL_CONFIG": str(config)}
    bad = sparkmill("-D", "rpc.ask-timeout=soon", "jobs", "list", env=env)
    assert bad.returncode == 2 and "'rpc.ask-timeout'" in bad.stderr and "(-D)" in bad.stderr
    unknown = sparkmill("jobs", "list", "-D", "dispatcher.rpc-adress=x", env=env)
    assert unknown.returncode == 2 and "did you mean" in unknown.stderr
    moved = sparkmill("jobs", "list", "-D", "dispatcher.rpc-address=127.0.0.1:3", env=env)
    assert moved.returncode == 3 and "127.0.0.1:3" in moved.stderr
