"""The pipeline code runs as its own user on a playbook host, and can read none of the secrets.

A job whose code tries to read the task executor's secret key, its ZooKeeper digest, the
configuration and the configuration directory, once in the pipeline worker itself (a
transform) and once in Spark's Python workers (a UDF), must finish with every attempt refused
(PermissionError) and reported in its output rows, with exactly the rows it was given. On the
task-executor hosts every Spark JVM, Python worker and pipeline worker runs as
sparkmill-pipeline, the socket to it is the service user's alone, and the job master removed
the job's intermediate results that the workers wrote.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from typing import Any

import pytest

import sparkmill as sm
from sparkmill.common.v1 import common_pb2
from tests.testbed.bed import TestBed
from tests.testbed.cluster import cluster_client, status_name, wait_job

pytestmark = pytest.mark.timeout(3000)

ROWS = 300
PIPELINE_USER = "sparkmill-pipeline"  # the play's defaults
EXCHANGE_GROUP = "sparkmill-exchange"
SERVICE_USER = "sparkmill"
WORKER_UNIT = "sparkmill-pipeline-worker@1.service"
SOCKET = "/run/sparkmill-pipeline-worker/1.sock"
WORKER_PROCESS = re.compile(r"sparkmill pipeline-worker|taskexecutor\.pipeline\b")
# Spark's JVM (SparkSubmit) and its Python workers; ZooKeeper's JVM runs on some hosts too.
SPARK_PROCESS = re.compile(r"org\.apache\.spark|pyspark|python_daemon")
MAX_EXPOSURE = 2.0  # systemd-analyze security's "OK"
# What the pipeline code tries to read ({host}: the host it runs on; a trailing / lists).
SECRETS = (
    "/etc/sparkmill/keys/private/task-executor-{host}.key_secret",
    "/etc/sparkmill/keys/private/server.key_secret",
    "/etc/sparkmill/keys/private/zookeeper-task-executor.digest",
    "/etc/sparkmill/sparkmill.yaml",
    "/etc/sparkmill/",
)


def _probe_here() -> str:
    """Who this process is and what it met reading each of SECRETS, as one line."""
    import grp
    import os
    import pwd
    import socket

    host = socket.gethostname()
    groups = sorted({grp.getgrgid(g).gr_name for g in (os.getegid(), *os.getgroups())})
    found = [f"user={pwd.getpwuid(os.geteuid()).pw_name}", f"groups={','.join(groups)}"]
    for secret in SECRETS:
        path = secret.format(host=host)
        try:
            if path.endswith("/"):
                outcome = f"listed {len(os.listdir(path))} entries"
            else:
                with open(path, "rb") as file:
                    outcome = f"read {len(file.read())} bytes"
        except OSError as exc:
            outcome = type(exc).__name__
        found.append(f"{path}={outcome}")
    return ";".join(found)


def _probe_in_the_worker(df: Any) -> Any:
    """Runs in the pipeline worker process (the Spark driver's Python)."""
    from pyspark.sql import functions as F

    return df.withColumn("worker", F.lit(_probe_here()))


def _probe_in_python_workers(df: Any) -> Any:
    """A UDF: runs in Spark's Python workers, once per row."""
    from pyspark.sql import functions as F

    probe = F.udf(lambda _: _probe_here(), "string")
    return df.withColumn("python_worker", probe(df.id))


def _expected(host: str) -> str:
    """The only answer a probe may give on ``host``: the pipeline user, the exchange group, and
    every read refused."""
    refused = [f"{secret.format(host=host)}=PermissionError" for secret in SECRETS]
    return ";".join([f"user={PIPELINE_USER}", f"groups={EXCHANGE_GROUP}", *refused])


def _processes(bed: TestBed, host: str) -> list[tuple[str, str]]:
    """(user, whole command line) of every process of ``host`` (-ww: ps cuts lines at 80
    characters when its output is not a terminal)."""
    out = bed.ssh(host, "ps -ww -eo user:32=,args=").stdout
    return [
        (parts[0], parts[1] if len(parts) > 1 else "")
        for parts in (line.strip().split(None, 1) for line in out.splitlines() if line.strip())
    ]


def test_pipeline_code_runs_as_its_own_user_and_reads_no_secret(
    bed_converging: TestBed,
) -> None:
    bed = bed_converging
    executors = bed.groups["task_executors"]
    for host in executors:
        # The secrets are there: a refusal means something, a missing file would not.
        paths = " ".join(shlex.quote(s.format(host=host)) for s in SECRETS if not s.endswith("/"))
        bed.ssh(host, f"for f in {paths}; do test -s $f || {{ echo missing $f; exit 1; }}; done")
        groups = bed.ssh(host, f"id -nG {PIPELINE_USER}").stdout.split()
        assert sorted(groups) == sorted({PIPELINE_USER, EXCHANGE_GROUP}), (host, groups)

    output = bed.shared / "work" / "pipeline-user" / f"out-{int(time.time() * 1000)}"
    pipeline = sm.Pipeline("pipeline-user", parallelism=3)
    (
        pipeline.range(ROWS)
        .transform(_probe_in_the_worker, name="probe-worker")
        .rebalance()  # an exchange: results the workers write and the job master removes
        .transform(_probe_in_python_workers, name="probe-python-workers")
        .write_json(str(output), mode="error")
    )
    with cluster_client(bed) as client:
        job_id = client.submit(pipeline.build_job_graph(), timeout=120)
        result = wait_job(client, job_id)
    assert result.status == common_pb2.FINISHED, status_name(result.status)

    rows = [
        json.loads(line)
        for part in sorted(output.glob("part-*.json"))
        for line in part.read_text().splitlines()
        if line.strip()
    ]
    assert sorted(row["id"] for row in rows) == list(range(ROWS))
    answers = {_expected(host) for host in executors}
    wrong = [row for row in rows if {row["worker"], row["python_worker"]} - answers]
    assert not wrong, f"{len(wrong)} rows read a secret or ran as another user: {wrong[:3]}"

    # The sink's files are the pipeline user's, in the exchange group, for nobody else.
    first = executors[0]
    owners = bed.ssh(first, f"stat -c '%U %G %a' {shlex.quote(str(output))}/part-*").stdout
    for line in owners.splitlines():
        user, group, mode = line.split()
        assert (user, group) == (PIPELINE_USER, EXCHANGE_GROUP) and int(mode, 8) & 0o007 == 0, line

    # The job master (the service user, maybe on another host) removed what the workers wrote.
    exchange = bed.shared / "exchange" / job_id
    bed.wait_until(f"{exchange} removed", lambda: not exchange.exists(), timeout=60)

    java_hosts = 0
    seen: dict[str, list[str]] = {}  # the pipeline user's processes, for a failure's message
    for host in executors:
        assert bed.ssh(host, f"systemctl is-active {WORKER_UNIT}", check=False).stdout.strip() == (
            "active"
        ), host
        shown = bed.ssh(host, f"systemctl show -p User -p Group {WORKER_UNIT}").stdout.split()
        assert shown == [f"User={PIPELINE_USER}", f"Group={EXCHANGE_GROUP}"], (host, shown)
        socket = bed.ssh(host, f"stat -c '%U %a %F' {SOCKET}").stdout.strip()
        assert socket == f"{SERVICE_USER} 600 socket", (host, socket)
        processes = _processes(bed, host)
        workers = [user for user, args in processes if WORKER_PROCESS.search(args)]
        assert workers and set(workers) == {PIPELINE_USER}, (host, workers)
        executor = [user for user, args in processes if "sparkmill task-executor" in args]
        assert executor and set(executor) == {SERVICE_USER}, (host, executor)
        spark = [(user, args[:120]) for user, args in processes if SPARK_PROCESS.search(args)]
        assert all(user == PIPELINE_USER for user, _ in spark), (host, spark)
        mine = [args for user, args in processes if user == PIPELINE_USER]
        java_hosts += any("org.apache.spark" in args for args in mine)
        seen[host] = [args[:300] for args in mine]
        security = bed.ssh(host, f"systemd-analyze security --no-pager {WORKER_UNIT}").stdout
        exposure = re.search(r"Overall exposure level for \S+: ([0-9.]+)", security)
        assert exposure and float(exposure.group(1)) <= MAX_EXPOSURE, security[-2000:]
    assert java_hosts >= 1, f"no Spark JVM on any task-executor host: {seen}"
