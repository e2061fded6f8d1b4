"""Pipeline code runs in a worker process of its own user, away from the cluster's secrets.

A local cluster started as root (what ``sparkmill local-cluster up`` does as root) runs each task
executor's pipeline code - the operators' functions, the Spark session, Spark's Python workers -
as ``sparkmill-pipeline``: a transform that tries to read the task executor's key, the server
key, the ZooKeeper digests, the REST tokens or the task executor's environment is refused, and
the job's output is exact. Pipeline code that kills its own worker costs an attempt, never the
task executor: the attempt runs again on a new worker and the job finishes.

These need root, and a Python installation other users can run (a virtualenv under the root's
home directory is not): the test bed's hosts check the playbook's socket-activated worker.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sparkmill as sm
from sparkmill import functions as F
from sparkmill.client import ClusterClient
from sparkmill.common.v1 import common_pb2
from sparkmill.local_cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PIPELINE_USER = "sparkmill-pipeline"
JOB_TIMEOUT_S = 240.0


def _why_not_runnable() -> str:
    if os.geteuid() != 0:
        return "starting the pipeline worker as another user needs root"
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import sparkmill, pyspark"],
            user=65534,  # nobody: can another user run this Python and import sparkmill?
            group=65534,
            extra_groups=[],
            cwd="/",
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except OSError as exc:  # the interpreter itself is out of reach (a root-only directory)
        return f"other users cannot run {sys.executable}: {exc}"
    if probe.returncode != 0:
        return (
            f"other users cannot run {sys.executable} with sparkmill "
            f"({probe.stderr.strip()[-300:]})"
        )
    return ""


class Cluster:
    def __init__(self, local: LocalCluster, base: Path) -> None:
        self.local = local
        self.base = base
        self.client = ClusterClient.from_config_file(local.config_path)

    def run(self, pipeline: sm.Pipeline) -> Any:
        job_id = self.client.submit(pipeline.build_job_graph())
        result = self.client.wait(job_id, timeout=JOB_TIMEOUT_S)
        assert result.status == common_pb2.FINISHED, (
            f"job ended {common_pb2.JobStatus.Name(result.status)}: {result.failure.message}\n"
            + self.local.logs()
        )
        return result


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    reason = _why_not_runnable()
    if reason:
        pytest.skip(reason)
    # Not pytest's private temporary directories: the pipeline user must reach the exchange
    # directory and the data; the keys stay in their own 0700 directory all the same.
    base = Path(tempfile.mkdtemp(prefix="sparkmill-pipeline-user-"))
    base.chmod(0o755)
    local = LocalCluster(
        base / "cluster",
        task_executors=1,
        slots=2,
        extra_config={"spark.session.start": "eager", "spark.master": "local[1]"},
    )
    try:
        local.start(wait_timeout_s=120)
    except Exception:
        print(local.logs())
        local.stop()
        shutil.rmtree(base, ignore_errors=True)
        raise
    running = Cluster(local, base)
    yield running
    running.client.close()
    local.stop()
    shutil.rmtree(base, ignore_errors=True)


def _secrets(local: LocalCluster) -> list[tuple[str, str]]:
    private = local.keys_dir / "private"
    found = sorted(private.iterdir())
    assert any(p.name.startswith("task-executor") for p in found), found
    assert any("digest" in p.name for p in found) and local.rest_tokens_file in found, found
    return [(p.name, str(p)) for p in found]


def test_pipeline_code_runs_as_its_own_user_and_reads_no_secret(cluster: Cluster) -> None:
    secrets = _secrets(cluster.local)

    def probe(df: Any) -> Any:
        # Runs in the pipeline worker, on the attempt's thread, with a real DataFrame.
        import os as _os

        seen = []
        for name, path in [*secrets, ("task executor's environment", "/proc/PPID/environ")]:
            path = path.replace("PPID", str(_os.getppid()))
            try:
                with open(path, "rb") as handle:
                    handle.read(1)
                seen.append((name, "read"))
            except PermissionError:
                seen.append((name, "denied"))
            except OSError as exc:
                seen.append((name, type(exc).__name__))
        seen.append(("worker uid", str(_os.geteuid())))
        # And in Spark's Python workers (a UDF's process).
        python_worker = df.rdd.map(lambda _: _os.geteuid()).collect()
        seen.append(("python worker uid", str(sorted(set(python_worker)))))
        return df.sparkSession.createDataFrame(seen, "what STRING, outcome STRING")

    pipeline = sm.Pipeline("secrets probe", parallelism=1)
    pipeline.range(3).transform(probe, name="probe").collect(name="probe")
    outcome = dict(pipeline.collected(cluster.run(pipeline))["probe"])
    uid = pwd.getpwnam(PIPELINE_USER).pw_uid
    assert outcome.pop("worker uid") == str(uid)
    assert outcome.pop("python worker uid") == str([uid])
    assert outcome == {name: "denied" for name in outcome}, outcome
    assert len(outcome) == len(secrets) + 1


def test_exchange_and_output_written_as_the_pipeline_user_are_exact(cluster: Cluster) -> None:
    data = cluster.base / "data"
    data.mkdir(mode=0o755)
    (data / "a.txt").write_text("b a\nc a b\n" * 500, encoding="utf-8")
    out = cluster.base / "out"
    out.mkdir()
    uid = pwd.getpwnam(PIPELINE_USER).pw_uid
    os.chown(out, uid, -1)  # the operator gives the pipeline user where to write
    pipeline = sm.Pipeline("as the pipeline user", parallelism=2)
    words = pipeline.read_text(str(data / "*.txt")).select(
        F.explode(F.split("value", " ")).alias("word")
    )
    counts = words.key_by("word").agg(F.count("*").alias("n"))
    counts.write_parquet(str(out / "counts"), mode="overwrite")
    counts.collect(name="counts")
    result = cluster.run(pipeline)
    assert sorted(tuple(r) for r in pipeline.collected(result)["counts"]) == [
        ("a", 1000),
        ("b", 1000),
        ("c", 500),
    ]
    written = [p for p in (out / "counts").iterdir() if p.suffix == ".parquet"]
    assert written and all(p.stat().st_uid == uid for p in written)
    # The exchange files were the pipeline user's, and the JobMaster removed the job's all the
    # same once it ended.
    exchange = cluster.local.directory / "exchange"
    assert exchange.stat().st_uid == uid
    deadline = time.monotonic() + 30
    while any(exchange.glob(f"*{result.job_id}*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(exchange.glob(f"*{result.job_id}*")), sorted(exchange.iterdir())


def test_pipeline_code_that_kills_its_worker_costs_an_attempt(cluster: Cluster) -> None:
    scratch = cluster.base / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)

    def kill_the_worker_once(df: Any) -> Any:
        import os as _os
        import signal as _signal

        flag = scratch / "killed-once"
        if not flag.exists():
            flag.write_text("x")
            _os.kill(_os.getpid(), _signal.SIGKILL)  # the pipeline worker itself
        return df

    pipeline = sm.Pipeline("kills its worker", parallelism=1)
    pipeline.range(10).transform(kill_the_worker_once, name="kill").collect(name="rows")
    result = cluster.run(pipeline)
    assert sorted(r[0] for r in pipeline.collected(result)["rows"]) == list(range(10))
    assert (scratch / "killed-once").exists()
    log = (cluster.local.log_dir / "task-executor-0.log").read_text(errors="replace")
    assert "the pipeline worker was killed by signal 9" in log


def test_an_output_the_pipeline_user_may_not_write_fails_naming_that_user(
    cluster: Cluster,
) -> None:
    closed = cluster.base / "root-only"
    closed.mkdir(mode=0o755)  # root's: the pipeline user may read, not write
    pipeline = sm.Pipeline("writes where it may not", parallelism=1)
    pipeline.range(5).write_parquet(str(closed / "out"), mode="overwrite")
    job_id = cluster.client.submit(pipeline.build_job_graph())
    result = cluster.client.wait(job_id, timeout=JOB_TIMEOUT_S)
    assert result.status == common_pb2.FAILED
    assert f"pipeline code runs as user {PIPELINE_USER!r}" in result.failure.message, (
        result.failure.message
    )
