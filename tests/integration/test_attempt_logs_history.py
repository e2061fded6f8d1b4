"""Attempt logs and the job history as a data engineer uses them (real processes, real Spark).

A pipeline whose ``transform`` logs, prints and then fails: ``sparkmill jobs logs`` shows its
lines and lifecycle (and, for the one that works, what its UDF printed and logged in Spark's
Python workers), ``jobs status`` shows its last lines under the root cause, the REST API
serves the attempt's log with the viewer token, and links the task executor's Spark UI
(``spark.ui.enabled``); the FAIR pools' allocation file is not left behind. Then the whole
cluster stops and starts again in the same directory: the ended jobs are still listed, with
status, plan and exceptions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sparkmill as sm
from sparkmill.client import ClusterClient
from sparkmill.common.rpc.keys import rest_token_of
from sparkmill.common.v1 import common_pb2, jobs_pb2
from tests.integration.conftest import SPARK_SESSIONS, eventually, start_local_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _noisy(fail: bool) -> Callable[[Any], Any]:
    def noisy(df: Any) -> Any:
        import logging

        logging.getLogger("my_pipeline").warning("checking %d columns", len(df.columns))
        print("transform says hello")
        if fail:
            raise ValueError("the input has no 'word' column")
        from pyspark.sql import functions as F

        def shout(value: int) -> int:  # runs in Spark's Python worker processes
            print(f"udf says hello to {value}")
            logging.getLogger("my_udf").warning("udf warns about %d", value)
            return value

        return df.withColumn("id", F.udf(shout, "long")(F.col("id")))

    return noisy


def pipeline(name: str, out: Path, fail: bool) -> sm.Pipeline:
    p = sm.Pipeline(name, parallelism=1, config={"restart-strategy.type": "none"})
    p.range(10).transform(_noisy(fail), name="noisy").write_parquet(str(out))
    return p


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkmill", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def rest(cluster: Any, client: ClusterClient, path: str) -> tuple[int, bytes]:
    url = client.cluster_status().dispatcher.rest_url
    token = rest_token_of(cluster.rest_tokens_file, "viewer")
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return reply.status, reply.read()


def test_logs_of_a_failed_attempt_and_history_after_a_cluster_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "cluster"
    # The services' own temporary directory, to see what they leave behind there.
    service_tmp = tmp_path / "tmp"
    service_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(service_tmp))
    cluster = start_local_cluster(
        directory,
        task_executors=1,
        slots=2,
        extra_config={**SPARK_SESSIONS, "spark.ui.enabled": True},
        wait_timeout_s=180,
    )
    try:
        with ClusterClient.from_config_file(cluster.config_path) as client:
            failed = client.submit(
                pipeline("noisy-fails", tmp_path / "a", fail=True).build_job_graph()
            )
            result = client.wait(failed, timeout=300)
            assert result.status == common_pb2.FAILED
            ok = client.submit(
                pipeline("noisy-works", tmp_path / "b", fail=False).build_job_graph()
            )
            assert client.wait(ok, timeout=300).status == common_pb2.FINISHED

            # What the UDF printed and logged in Spark's Python workers is in its attempt's log
            # (the rows are split among the workers: each line once, none of the failed job).
            [works] = [r for r in client.attempt_logs(ok).logs if "noisy" in r.vertex_name]
            udf_log = client.attempt_log(
                jobs_pb2.GetAttemptLogRequest(
                    job_id=ok, vertex=works.vertex_name, attempt_number=-1
                )
            ).text
            for value in range(10):
                assert udf_log.count(f"stdout (python worker): udf says hello to {value}\n") == 1
                assert udf_log.count(f"stderr (python worker): udf warns about {value}\n") == 1
            shown = cli(cluster.config_path, "jobs", "logs", ok)  # as a user reads them
            assert "stdout (python worker): udf says hello to 7" in shown.stdout, shown.stderr

            index = client.attempt_logs(failed)
            noisy = [r for r in index.logs if "noisy" in r.vertex_name]
            assert noisy, index
            chunk = client.attempt_log(
                jobs_pb2.GetAttemptLogRequest(
                    job_id=failed, vertex=noisy[0].vertex_name, attempt_number=-1
                )
            )
            assert "WARNING my_pipeline: checking 1 columns" in chunk.text
            assert "stdout: transform says hello" in chunk.text
            assert "running" in chunk.text and "failed: ValueError" in chunk.text
            assert chunk.ended

            logs = cli(cluster.config_path, "jobs", "logs", failed)
            assert logs.returncode == 0, logs.stderr
            assert "==> " in logs.stdout and "transform says hello" in logs.stdout
            one = cli(cluster.config_path, "jobs", "logs", failed, "--vertex", noisy[0].vertex_id)
            assert "checking 1 columns" in one.stdout, one.stderr
            status = cli(cluster.config_path, "jobs", "status", failed)
            assert "last lines of the attempt's log" in status.stdout, status.stdout
            assert "transform says hello" in status.stdout

            code, body = rest(
                cluster,
                client,
                f"/v1/jobs/{failed}/vertices/{noisy[0].vertex_id}/subtasks/0/attempts/latest/log",
            )
            assert code == 200 and "transform says hello" in json.loads(body)["text"]

            # spark.ui.enabled: the task executor's Spark UI is linked from its REST entry.
            def spark_ui() -> str:
                managers = json.loads(rest(cluster, client, "/v1/taskmanagers")[1])
                return str(managers["taskmanagers"][0]["spark-ui-url"])

            ui = eventually(spark_ui, timeout=30)
            assert ui.startswith("http://"), ui
            with urllib.request.urlopen(ui, timeout=30) as page:
                assert page.status == 200 and b"Spark" in page.read()
            status_json = cli(cluster.config_path, "cluster", "status", "--json")
            [te] = json.loads(status_json.stdout)["task_executors"]
            assert te["spark_ui_url"] == ui, status_json.stdout
        te_log = Path(cluster.log_dir, "task-executor-0.log").read_text()
        # Spark: "A job was submitted with scheduler pool slot-0, which has not been configured."
        assert "has not been configured" not in te_log, "the FAIR pools are not declared"
        assert "failed: ValueError" in te_log  # the failed attempt is in the executor's log too
        # The pools' allocation file is read once, when the session starts: none is left.
        assert not list(service_tmp.glob("sparkmill-fairscheduler-*")), list(service_tmp.iterdir())
    finally:
        cluster.stop()
    archived = sorted(p.name for p in (directory / "completed-jobs").iterdir())
    assert archived == sorted([f"{failed}.job", f"{ok}.job"])

    # The whole cluster again, in the same directory: the ended jobs are still there.
    cluster = start_local_cluster(
        directory, task_executors=1, slots=2, extra_config=SPARK_SESSIONS, wait_timeout_s=180
    )
    try:
        with ClusterClient.from_config_file(cluster.config_path) as client:
            listed = {j.job_id: j.status for j in client.list_jobs()}
            assert listed == {failed: common_pb2.FAILED, ok: common_pb2.FINISHED}
            details = client.status(failed)
            assert details.exceptions and "no 'word' column" in details.exceptions[-1].error.message
            code, body = rest(cluster, client, f"/v1/jobs/{ok}/plan")
            assert code == 200 and "noisy" in body.decode()
            listing = cli(cluster.config_path, "jobs", "list")
            assert failed in listing.stdout and ok in listing.stdout
    finally:
        cluster.stop()
