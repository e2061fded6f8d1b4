"""Validate before mutating, with real processes and CurveZMQ on: ids, names, sink paths and
job graphs are refused at the door with clear errors, a job the JobMaster refuses fails instead
of being retried forever, and the job list is paged."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sparkmill.common.core.errors import InvalidJobGraphError, RpcError
from sparkmill.common.core.ids import JobID
from sparkmill.common.v1 import common_pb2
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import ClusterFactory, RunningCluster, eventually


@pytest.fixture(scope="module")
def checked_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    from tests.integration.conftest import start_local_cluster

    running = RunningCluster(
        start_local_cluster(tmp_path_factory.mktemp("checked"), task_executors=1, slots=2)
    )
    yield running
    running.close()


def test_a_job_id_that_is_a_path_is_refused_at_submit(
    checked_cluster: RunningCluster, tmp_path: Path
) -> None:
    client = checked_cluster.client
    victim = tmp_path / "victim"
    victim.mkdir()
    graph = noop_pipeline("path-id", parallelism=1).build_job_graph()
    graph.job_id = JobID(str(victim))
    with pytest.raises(InvalidJobGraphError) as refused:
        client.submit(graph)
    assert f"the job id {str(victim)!r} is not 32 lowercase hex digits" in refused.value.message
    assert victim.is_dir()
    assert all(j.job_id != str(victim) for j in client.list_jobs())


def test_names_too_long_are_refused_and_the_job_list_keeps_working(
    checked_cluster: RunningCluster,
) -> None:
    client = checked_cluster.client
    graph = noop_pipeline("n" * (9 * 1024 * 1024), parallelism=1).build_job_graph()
    with pytest.raises(InvalidJobGraphError) as refused:
        client.submit(graph)
    assert "the job name has 9437184 characters, more than the maximum of 1000" in str(
        refused.value
    )
    assert len(refused.value.message) < 2000  # the name is not echoed back whole
    assert isinstance(client.list_jobs(), list)


@pytest.mark.parametrize("where", ["root", "exchange", "inside-exchange"])
def test_a_sink_on_root_or_the_exchange_directory_is_refused_at_submit(
    checked_cluster: RunningCluster, where: str
) -> None:
    client = checked_cluster.client
    config = yaml.safe_load(checked_cluster.config_path.read_text())
    exchange = Path(config["exchange.dir"])
    path = {"root": "/", "exchange": str(exchange), "inside-exchange": str(exchange / "out")}
    graph = noop_pipeline("bad-sink", parallelism=1).build_job_graph()
    graph.vertices[0].sink_paths = [path[where]]
    with pytest.raises(InvalidJobGraphError, match="writes a sink where it may not"):
        client.submit(graph)


def test_the_job_list_is_paged(checked_cluster: RunningCluster) -> None:
    client = checked_cluster.client
    submitted = [
        client.submit(noop_pipeline(f"paged-{i}", parallelism=1).build_job_graph())
        for i in range(3)
    ]
    pages, token = [], ""
    while True:
        page = client.list_jobs_page(token, page_size=2)
        pages.append([j.job_id for j in page.jobs])
        token = page.next_page_token
        if not token:
            break
    assert all(len(p) <= 2 for p in pages) and len(pages) >= 2
    listed = [job_id for page in pages for job_id in page]
    assert len(listed) == len(set(listed))
    assert [j for j in listed if j in submitted] == submitted  # in submission order
    assert [j.job_id for j in client.list_jobs()] == listed
    command = [sys.executable, "-m", "sparkmill", "--config", str(checked_cluster.config_path)]
    cli = subprocess.run(
        [*command, "jobs", "list", "--json"], capture_output=True, text=True, timeout=120
    )
    assert cli.returncode == 0, cli.stderr
    assert [j["job_id"] for j in json.loads(cli.stdout)] == listed
    for job_id in submitted:
        assert client.wait(job_id, timeout=60).status == common_pb2.FINISHED


def test_a_job_the_job_master_refuses_fails_with_its_message(
    cluster_factory: ClusterFactory,
) -> None:
    # Every process reads the limit at start; the dispatcher is then restarted without it, so
    # only the JobMaster's StartJob check can refuse the job.
    running = cluster_factory(
        task_executors=1, extra_config={"jobmanager.job-graph.max-subtasks": 1}
    )
    cluster, client = running.cluster, running.client
    config = yaml.safe_load(cluster.config_path.read_text())
    del config["jobmanager.job-graph.max-subtasks"]
    cluster.config_path.write_text(yaml.safe_dump(config, sort_keys=True))
    (dispatcher,) = cluster.find("dispatcher")
    cluster.kill(dispatcher, signal.SIGKILL)
    cluster.add_process("dispatcher")

    def registered() -> bool:
        try:
            return client.cluster_status(timeout=5).job_master_processes == 1
        except RpcError:  # the new dispatcher is not up yet
            return False

    eventually(registered, timeout=90)

    job_id = client.submit(noop_pipeline("refused", parallelism=3).build_job_graph())
    result = client.wait(job_id, timeout=60)
    assert result.status == common_pb2.FAILED
    assert "the JobMaster refused to start the job" in result.failure.message
    assert "jobmanager.job-graph.max-subtasks" in result.failure.message
    assert client.status(job_id).status == common_pb2.FAILED
