"""Pipeline arguments end to end on a local cluster: given after ``--``, read by the pipeline's
argparse, stored with the job and shown by ``jobs status`` and the REST API; ``jobs wait
--json`` reports the job's own duration; the REST task executor list says how old the last
heartbeat is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.rpc.keys import rest_token_of
from tests.integration.conftest import RunningCluster, start_local_cluster
from tests.integration.rest_helpers import get

pytestmark = pytest.mark.integration

SPARKMILL = [sys.executable, "-m", "sparkmill"]

PIPELINE = """\
import argparse

from sparkmill.testing import noop_pipeline

parser = argparse.ArgumentParser()
parser.add_argument("--parallelism", type=int, default=1)
parser.add_argument("--label", default="")
args = parser.parse_args()
pipeline = noop_pipeline("args-job", parallelism=args.parallelism, vertices=2, sleep_s=0.5)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    running = RunningCluster(
        start_local_cluster(tmp_path_factory.mktemp("cli"), task_executors=1, slots=4)
    )
    yield running
    running.close()


def sparkmill(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkmill", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_arguments_are_part_of_the_job(cluster: RunningCluster, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(PIPELINE)
    env = {"SPARKMILL_CONFIG": str(cluster.config_path)}
    arguments = ["--parallelism", "3", "--label", "two words"]
    submitted = sparkmill("submit", str(tmp_path / "job.py"), "--json", "--", *arguments, env=env)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    outcome = json.loads(submitted.stdout)
    assert outcome["status"] == "FINISHED"
    assert outcome["pipeline_args"] == arguments
    assert {v["parallelism"] for v in outcome["vertices"]} == {3}
    job_id = outcome["job_id"]

    status = sparkmill("jobs", "status", job_id, "--json", env=env)
    assert json.loads(status.stdout)["pipeline_args"] == arguments
    text = sparkmill("jobs", "status", job_id, env=env)
    assert "arguments: --parallelism 3 --label 'two words'" in text.stdout

    # The job's duration (end - start), whenever one waits for it.
    details = cluster.client.status(job_id)
    time.sleep(1.5)
    waited = sparkmill("jobs", "wait", job_id, "--json", env=env)
    assert waited.returncode == 0, waited.stderr
    duration = json.loads(waited.stdout)["duration_s"]
    assert duration == pytest.approx(details.ended_at - details.submitted_at, abs=0.01)
    assert outcome["duration_s"] == pytest.approx(duration, abs=0.01)

    config = Configuration.load(cluster.config_path)
    token = rest_token_of(Path(config.get(opt.REST_AUTH_TOKEN_FILE)), "viewer")
    base = cluster.client.cluster_status().dispatcher.rest_url
    job = get(f"{base}/v1/jobs/{job_id}", token=token).json()
    assert job["pipeline-args"] == arguments
    managers = get(f"{base}/v1/taskmanagers", token=token).json()["taskmanagers"]
    ages = [m["timeSinceLastHeartbeat"] for m in managers]
    assert ages and all(0 <= age < 30_000 for age in ages), ages


def test_a_relative_pipeline_file_from_another_directory(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    (tmp_path / "job.py").write_text(PIPELINE)
    run = subprocess.run(
        [*SPARKMILL, "submit", "job.py", "--json", "--config", str(cluster.config_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["pipeline_args"] == []
