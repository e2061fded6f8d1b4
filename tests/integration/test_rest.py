"""The REST API against a real local cluster: submit, list, details, exceptions, cancel, errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from sparkmill.common.rpc.keys import rest_token_of
from sparkmill.common.v1 import common_pb2
from sparkmill.local_cluster import LocalCluster
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import start_local_cluster
from tests.integration.rest_helpers import get, request, submit, use_token, wait_for_state

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = start_local_cluster(tmp_path_factory.mktemp("rest"), task_executors=2, slots=2)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def base(cluster: LocalCluster) -> str:
    url = cluster.rest_url()
    assert url.startswith("http://127.0.0.1:"), url  # loopback, as dispatcher.rpc-address
    use_token(rest_token_of(cluster.rest_tokens_file, "operator"))
    return url


def test_no_token_or_a_wrong_one_is_401_and_a_viewer_cannot_cancel(
    cluster: LocalCluster, base: str
) -> None:
    job_id = submit(base, noop_pipeline("rest-auth", parallelism=1, sleep_s=5.0))
    for token in ("", "not-a-token-of-this-cluster"):
        for method, path in (("GET", "/v1/jobs"), ("PATCH", f"/v1/jobs/{job_id}?mode=cancel")):
            reply = request(method, f"{base}{path}", token=token)
            assert reply.status == 401, (token, path, reply)
            assert reply.headers["www-authenticate"].startswith("Bearer")
            assert "token" in reply.json()["errors"][0]
    viewer = rest_token_of(cluster.rest_tokens_file, "viewer")
    assert get(f"{base}/v1/jobs/{job_id}", token=viewer).status == 200
    refused = request("PATCH", f"{base}/v1/jobs/{job_id}?mode=cancel", token=viewer)
    assert refused.status == 403 and "operator token" in refused.json()["errors"][0], refused
    # Nothing of that cancelled the job; the dashboard's own files need no token.
    assert wait_for_state(base, job_id, ("FINISHED",))["state"] == "FINISHED"
    assert get(f"{base}/app.js", token="").status == 200


def test_a_submitted_job_is_listed_detailed_and_planned(cluster: LocalCluster, base: str) -> None:
    job_id = submit(base, noop_pipeline("rest-ok", parallelism=2, vertices=2, sleep_s=0.2))
    job = wait_for_state(base, job_id, ("FINISHED", "FAILED", "CANCELED"))
    assert job["state"] == "FINISHED"
    assert [v["name"] for v in job["vertices"]] == ["noop-0", "noop-1"]
    assert all(v["tasks"]["FINISHED"] == 2 for v in job["vertices"])
    subtask = job["vertices"][0]["subtasks"][0]
    assert subtask["status"] == "FINISHED" and subtask["taskmanager-id"]
    assert 0 < subtask["start-time"] <= subtask["end-time"]
    job_master_pids = {p.pid for p in cluster.processes if p.role == "job-master"}
    assert job["job-master"]["pid"] in job_master_pids

    listed = get(f"{base}/v1/jobs").json()["jobs"]
    assert any(j["jid"] == job_id and j["state"] == "FINISHED" for j in listed)
    plan = get(f"{base}/v1/jobs/{job_id}/plan").json()["plan"]
    source, sink = plan["nodes"]
    assert sink["inputs"][0]["id"] == source["id"]
    assert sink["inputs"][0]["ship_strategy"] == "ALL_TO_ALL"
    result = get(f"{base}/v1/jobs/{job_id}/execution-result").json()
    assert result["job-execution-result"]["application-status"] == "FINISHED"
    overview = get(f"{base}/v1/overview").json()
    assert overview["taskmanagers"] == 2 and overview["slots-total"] == 4
    assert overview["jobs-finished"] >= 1
    taskmanagers = get(f"{base}/v1/taskmanagers").json()["taskmanagers"]
    assert sorted(tm["slotsNumber"] for tm in taskmanagers) == [2, 2]


def test_a_failed_jobs_exceptions(base: str) -> None:
    job_id = submit(
        base,
        noop_pipeline(
            "rest-fails", parallelism=1, fail_attempts=1, config={"restart-strategy.type": "none"}
        ),
    )
    assert wait_for_state(base, job_id, ("FINISHED", "FAILED"))["state"] == "FAILED"
    exceptions = get(f"{base}/v1/jobs/{job_id}/exceptions").json()
    assert exceptions["root-exception"]
    entries = exceptions["exceptionHistory"]["entries"]
    assert entries and entries[0]["vertexName"] == "noop-0" and entries[0]["taskManagerId"]


def test_cancel_with_patch(base: str) -> None:
    job_id = submit(base, noop_pipeline("rest-cancel", parallelism=1, sleep_s=60))
    wait_for_state(base, job_id, ("RUNNING",))
    reply = request("PATCH", f"{base}/v1/jobs/{job_id}?mode=cancel")
    assert reply.status == 202, reply
    assert wait_for_state(base, job_id, ("CANCELED", "FAILED", "FINISHED"))["state"] == "CANCELED"
    again = request("PATCH", f"{base}/v1/jobs/{job_id}")
    assert again.status == 409 and "nothing to cancel" in again.json()["errors"][0]


def test_bad_requests_get_4xx_with_a_json_error(base: str) -> None:
    protobuf = "application/x-protobuf"
    cases = [
        (get(f"{base}/v1/jobs/{'0' * 32}"), 404, "no job"),
        (get(f"{base}/v1/jobs/{'0' * 32}/exceptions"), 404, "no job"),
        (get(f"{base}/v1/nothing"), 404, "no API resource"),
        (request("DELETE", f"{base}/v1/jobs"), 405, "not allowed"),
        (request("PATCH", f"{base}/v1/jobs/x?mode=savepoint"), 400, "mode"),
        (request("POST", f"{base}/v1/jobs", b"x", "text/plain"), 415, "Content-Type"),
        (request("POST", f"{base}/v1/jobs", b"\xff\xff", protobuf), 400, "JobGraph"),
    ]
    invalid = common_pb2.JobGraph(job_id="c" * 32, name="bad")
    invalid.vertices.add(id="v", name="mystery", parallelism=1).operator.kind = "no-such-kind"
    cases.append(
        (
            request("POST", f"{base}/v1/jobs", invalid.SerializeToString(), protobuf),
            400,
            "no-such-kind",
        )
    )
    for reply, status, words in cases:
        assert reply.status == status, reply
        assert words in json.dumps(reply.json()["errors"]), reply


def test_malformed_http_is_refused_and_the_dispatcher_keeps_serving(base: str) -> None:
    parts = urlsplit(base)
    for raw in (b"HELLO\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"\x16\x03\x01\x02\x00\r\n\r\n"):
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
            sock.sendall(raw)
            reply = sock.recv(4096)
        assert reply.split(b" ", 2)[1] in (b"400", b"501", b"505"), reply
    assert get(f"{base}/v1/overview").status == 200
    page = get(f"{base}/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    assert get(f"{base}/../../etc/passwd").status == 404


def test_jobs_status_names_the_job_master_process(cluster: LocalCluster, base: str) -> None:
    job_id = submit(base, noop_pipeline("rest-status", parallelism=1, sleep_s=0.1))
    wait_for_state(base, job_id, ("FINISHED",))

    def cli(*args: str) -> str:
        command = [sys.executable, "-m", "sparkmill", "--config", str(cluster.config_path)]
        done = subprocess.run(
            [*command, *args], capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout

    shown = json.loads(cli("jobs", "status", job_id, "--json"))["job_master"]
    pids = {p.pid for p in cluster.processes if p.role == "job-master"}
    assert shown["pid"] in pids and shown["address"].startswith("tcp://")
    text = cli("jobs", "status", job_id)
    assert f"JobMaster: process {shown['id'][:8]} at {shown['address']}" in text
    assert f"(pid {shown['pid']})" in text
    assert base in cli("cluster", "status")
