"""The four services run jobs end to end: real processes on loopback, real ZeroMQ and protobuf.

Issue 2's "done when": a large ALL_TO_ALL job, slot reuse, an impossible resource profile,
cancellation freeing every slot, a failing task's error in ``jobs status``, and the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from sparkmill.common.core.errors import InvalidJobGraphError
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.common.v1 import common_pb2
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import RunningCluster, eventually

pytestmark = pytest.mark.integration

FINISHED = common_pb2.EXECUTION_FINISHED
CANCELED = common_pb2.EXECUTION_CANCELED
RUNNING = common_pb2.EXECUTION_RUNNING
ROOT = Path(__file__).resolve().parents[2]


def tasks_in(details: object, state: int) -> int:
    return sum(v.tasks_by_state.get(state, 0) for v in details.vertices)  # type: ignore[attr-defined]


def submit_and_wait(cluster: RunningCluster, pipeline: object, timeout: float = 120.0):
    graph: JobGraph = pipeline.build_job_graph()  # type: ignore[attr-defined]
    job_id = cluster.client.submit(graph)
    return job_id, cluster.client.wait(job_id, timeout=timeout)


def test_200_subtask_all_to_all_job_finishes(shared_cluster: RunningCluster) -> None:
    job_id, result = submit_and_wait(
        shared_cluster, noop_pipeline("wide", parallelism=100, vertices=2, pattern="ALL_TO_ALL")
    )
    assert result.status == common_pb2.FINISHED, result.failure.message
    details = shared_cluster.client.status(job_id)
    assert [v.parallelism for v in details.vertices] == [100, 100]
    assert tasks_in(details, FINISHED) == 200
    # Every slot is handed back once the job is over (idle slots are freed by the job's end).
    status = eventually(
        lambda: (
            (s := shared_cluster.client.cluster_status()).resource_manager.slots_free == 12 and s
        )
    )
    assert status.resource_manager.slots_total == 12


def test_more_subtasks_than_slots_finish_by_reusing_slots(shared_cluster: RunningCluster) -> None:
    # 2 x 30 subtasks on 12 slots, pointwise 30 -> 30, each running a little while.
    _, result = submit_and_wait(
        shared_cluster,
        noop_pipeline("reuse", parallelism=30, vertices=2, pattern="POINTWISE", sleep_s=0.05),
    )
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert tasks_in(result.details, FINISHED) == 60


def test_impossible_resource_profile_fails_with_the_slot_request_error(
    shared_cluster: RunningCluster,
) -> None:
    pipeline = noop_pipeline(
        "too-big",
        parallelism=1,
        resource_profile=ResourceProfile(cpu_cores=64, memory_mb=1_000_000),
        config={"slot.request.timeout": "20 s", "restart-strategy.type": "fixed-delay"},
    )
    started = time.monotonic()
    _, result = submit_and_wait(shared_cluster, pipeline, timeout=60)
    assert result.status == common_pb2.FAILED
    message = result.failure.message
    # Fails fast (not after the 2 s request timeout) with what was asked and what exists.
    assert "can never be served" in message, message
    assert "cpu=64" in message and "3 task executors registered" in message, message
    assert time.monotonic() - started < 2.0
    # Nothing stays pending at the resource manager for the failed job.
    eventually(
        lambda: shared_cluster.client.cluster_status().resource_manager.pending_slot_requests == 0
    )


def test_cancel_cancels_every_task_and_frees_every_slot(shared_cluster: RunningCluster) -> None:
    client = shared_cluster.client
    job_id = client.submit(noop_pipeline("long", parallelism=6, sleep_s=120).build_job_graph())
    eventually(lambda: tasks_in(client.status(job_id), RUNNING) == 6, timeout=60)
    assert client.cluster_status().resource_manager.slots_allocated >= 6
    client.cancel(job_id)
    result = client.wait(job_id, timeout=60)
    assert result.status == common_pb2.CANCELED
    assert tasks_in(result.details, CANCELED) == 6
    eventually(lambda: client.cluster_status().resource_manager.slots_free == 12)


def test_failing_task_fails_the_job_with_its_error_in_jobs_status(
    shared_cluster: RunningCluster,
) -> None:
    job_id, result = submit_and_wait(
        shared_cluster,
        noop_pipeline(
            "flaky", parallelism=2, fail_attempts=1, config={"restart-strategy.type": "none"}
        ),
    )
    assert result.status == common_pb2.FAILED
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkmill",
            "--config",
            str(shared_cluster.config_path),
            "jobs",
            "status",
            job_id,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    status = json.loads(cli.stdout)
    assert status["status"] == "FAILED"
    assert "fails attempt 0 as configured" in status["failure"]
    assert status["exceptions"][0]["exception"] == "TestOperatorFailure"
    assert status["exceptions"][0]["task_executor"]


def test_invalid_job_graph_is_refused_with_a_clear_error(shared_cluster: RunningCluster) -> None:
    graph = noop_pipeline("bad", parallelism=2).build_job_graph()
    graph.vertices[0].parallelism = 0
    with pytest.raises(InvalidJobGraphError, match="parallelism"):
        shared_cluster.client.submit(graph)


def test_malformed_frames_do_not_hurt_a_service(shared_cluster: RunningCluster) -> None:
    import yaml

    config = yaml.safe_load(shared_cluster.config_path.read_text())
    context = zmq.Context()
    try:
        for key in ("dispatcher.rpc-address", "resourcemanager.rpc-address"):
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(config[key])
            sock.send_multipart([os.urandom(64)])
            sock.send_multipart([b"SM1", os.urandom(40), os.urandom(10)])
            sock.send_multipart([b"GET / HTTP/1.1\r\n\r\n"])
            sock.close()
    finally:
        context.term()
    # Both services still answer.
    assert shared_cluster.client.cluster_status().resource_manager.slots_total == 12
    assert isinstance(shared_cluster.client.list_jobs(), list)


def test_cli_submit_and_cluster_status(shared_cluster: RunningCluster, tmp_path: Path) -> None:
    pipeline_file = tmp_path / "job.py"
    pipeline_file.write_text(
        "from sparkmill.testing import noop_pipeline\n"
        "pipeline = noop_pipeline('cli-job', parallelism=3, vertices=2)\n"
    )
    base = [sys.executable, "-m", "sparkmill", "--config", str(shared_cluster.config_path)]
    submitted = subprocess.run(
        [*base, "submit", str(pipeline_file), "--json"], capture_output=True, text=True, timeout=120
    )
    assert submitted.returncode == 0, submitted.stderr
    outcome = json.loads(submitted.stdout)
    assert outcome["status"] == "FINISHED"
    listed = subprocess.run(
        [*base, "jobs", "list", "--json"], capture_output=True, text=True, timeout=60, check=True
    )
    assert outcome["job_id"] in {j["job_id"] for j in json.loads(listed.stdout)}
    status = subprocess.run(
        [*base, "cluster", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    view = json.loads(status.stdout)
    roles = sorted(s["role"] for s in view["services"])
    assert roles == ["dispatcher", "job-master", "resource-manager"] + ["task-executor"] * 3
    assert view["slots"]["total"] == 3 * 4
    assert all(s["pid"] > 0 and s["address"].startswith("tcp://") for s in view["services"])


def test_missing_pipeline_attribute_is_a_clear_error(
    shared_cluster: RunningCluster, tmp_path: Path
) -> None:
    bad = tmp_path / "nothing.py"
    bad.write_text("x = 1\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkmill",
            "--config",
            str(shared_cluster.config_path),
            "submit",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "defines no module attribute 'pipeline'" in run.stderr


def test_the_result_is_long_polled_and_arrives_when_the_job_ends(
    shared_cluster: RunningCluster,
) -> None:
    client = shared_cluster.client
    job_id = client.submit(
        noop_pipeline("long-poll", parallelism=2, vertices=2, sleep_s=1.0).build_job_graph()
    )
    assert client.result_within(job_id, 0.05) is None  # still running: answered after the wait
    began = time.monotonic()
    result = client.result_within(job_id, 50.0)
    waited = time.monotonic() - began
    assert result is not None and result.status == common_pb2.FINISHED, result
    # Woken by the job's end (~2 s of work), not by the end of the 50 s wait.
    assert waited < 30.0, waited
