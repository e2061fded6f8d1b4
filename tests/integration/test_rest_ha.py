"""The REST API across a dispatcher failover (ZooKeeper HA): standbys redirect to the leader,
a client that keeps one standby's URL keeps getting answers after the leader dies, and the jobs
that ended under the old leader are still listed by the new one (the job history)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sparkmill.common.core.errors import SparkmillError
from sparkmill.common.rpc.keys import rest_token_of
from sparkmill.common.v1 import common_pb2
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import ClusterFactory, eventually
from tests.integration.rest_helpers import Reply, get, submit, use_token

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _eventually_get(url: str, timeout_s: float = 120) -> Reply:
    """GET (following redirects) until a 200; connection errors while a leader dies retry."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            reply = get(url, timeout=5)
            if reply.status == 200:
                return reply
            last = reply
        except OSError as exc:  # redirected to the dead leader, until the new one is known
            last = exc
        time.sleep(0.3)
    raise AssertionError(f"{url} gave no 200 within {timeout_s:g}s: {last!r}")


def test_standbys_redirect_and_the_api_survives_a_dispatcher_failover(
    cluster_factory: ClusterFactory,
) -> None:
    running = cluster_factory(task_executors=1, slots=2, ha=True, standbys=1)
    use_token(rest_token_of(running.cluster.rest_tokens_file, "operator"))
    view = running.client.cluster_status(timeout=30)
    leader = view.dispatcher
    standby = next(s for s in view.standbys if s.role == "dispatcher")
    assert leader.rest_url and standby.rest_url and leader.rest_url != standby.rest_url

    redirect = get(f"{standby.rest_url}/v1/jobs?x=1", follow=False)
    assert redirect.status == 307, redirect
    assert redirect.headers["location"] == f"{leader.rest_url}/v1/jobs?x=1"
    page = get(f"{standby.rest_url}/", follow=False)
    assert page.status == 307 and page.headers["location"] == f"{leader.rest_url}/"

    # Submitted through the standby: the POST follows the redirect with its body.
    pipeline = noop_pipeline("rest-ha", parallelism=2, vertices=2, sleep_s=1.0)
    job_id = submit(standby.rest_url, pipeline)

    popen = running.cluster._popen.get(leader.pid)
    os.kill(leader.pid, signal.SIGKILL)
    if popen is not None:
        popen.wait(timeout=30)

    deadline = time.monotonic() + 120
    while True:
        job = _eventually_get(f"{standby.rest_url}/v1/jobs/{job_id}").json()
        if job["state"] == "FINISHED" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert job["state"] == "FINISHED", job
    # The former standby now leads and answers itself.
    direct = get(f"{standby.rest_url}/v1/cluster", follow=False)
    assert direct.status == 200, direct
    dispatchers = [s for s in direct.json()["services"] if s["role"] == "dispatcher"]
    assert [d["rest-url"] for d in dispatchers if d["leader"]] == [standby.rest_url]


def test_an_ended_job_stays_in_the_history_after_a_dispatcher_failover(
    cluster_factory: ClusterFactory,
) -> None:
    # Flink's history server, kept by the dispatchers: the job ended under the first leader, and
    # the standby that takes over (same archive directory) lists it from the archive: client,
    # REST and CLI.
    running = cluster_factory(task_executors=1, slots=2, ha=True, standbys=1)
    use_token(rest_token_of(running.cluster.rest_tokens_file, "viewer"))
    view = running.client.cluster_status(timeout=30)
    leader = view.dispatcher
    standby = next(s for s in view.standbys if s.role == "dispatcher")
    graph = noop_pipeline("history-ha", parallelism=1, vertices=1).build_job_graph()
    job_id = running.client.submit(graph)
    assert running.client.wait(job_id, timeout=120).status == common_pb2.FINISHED
    archive = running.cluster.directory / "completed-jobs" / f"{job_id}.job"
    eventually(archive.exists, timeout=30)

    popen = running.cluster._popen.get(leader.pid)
    os.kill(leader.pid, signal.SIGKILL)
    if popen is not None:
        popen.wait(timeout=30)

    def new_leader_serves() -> bool:
        try:
            return running.client.cluster_status(timeout=10).dispatcher.pid == standby.pid
        except SparkmillError:  # no leader yet
            return False

    eventually(new_leader_serves, timeout=90, interval=1.0)
    listed = {j.job_id: j.status for j in running.client.list_jobs(timeout=30)}
    assert listed.get(job_id) == common_pb2.FINISHED, listed
    jobs = _eventually_get(f"{standby.rest_url}/v1/jobs").json()["jobs"]
    assert [(j["jid"], j["state"]) for j in jobs] == [(job_id, "FINISHED")], jobs
    plan = _eventually_get(f"{standby.rest_url}/v1/jobs/{job_id}/plan").json()
    assert plan, plan
    cli = subprocess.run(
        [sys.executable, "-m", "sparkmill", "jobs", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SPARKMILL_CONFIG": str(running.cluster.config_path)},
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert [(j["job_id"], j["status"]) for j in json.loads(cli.stdout)] == [(job_id, "FINISHED")]
