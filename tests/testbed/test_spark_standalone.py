"""HA across hosts, scenario 5: task executors on a Spark standalone cluster of the test bed.

A Spark master on h1 and workers on h1 and h2, started with pyspark's own ``spark-class
org.apache.spark.deploy.master.Master`` / ``...deploy.worker.Worker`` (the pyspark of the hosts'
sparkmill virtualenv) as the sparkmill user; the task executors (h3-h5) get ``spark.master:
spark://h1:7077`` and are restarted. The HA pipeline must give its exact output, also when the
worker host h2 is powered off in the middle. Everything is put back at the end: the task
executors' original configuration, no Spark master or worker left running.
"""

from __future__ import annotations

import json
import shlex
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sparkmill.client import ClusterClient
from sparkmill.common.v1 import common_pb2
from tests.testbed import bed as bed_state
from tests.testbed import ha_data
from tests.testbed.bed import TestBed
from tests.testbed.cluster import (
    HaJob,
    amend_config,
    answer,
    cluster_client,
    restore_config,
    skip_when_scenarios_off,
    status_name,
    submit_ha,
    wait_cluster,
    wait_job,
)
from tests.testbed.faults import Faults

pytestmark = [pytest.mark.timeout(900), skip_when_scenarios_off]

MASTER_HOST, WORKER_HOSTS = "h1", ("h1", "h2")
SPARK_CLASS = "/opt/sparkmill/venv/lib/python3.11/site-packages/pyspark/bin/spark-class"
TE_CONFIG = "/etc/sparkmill/task-executor-1.yaml"
TE_UNIT = "sparkmill-task-executor@1.service"
MASTER_UI_PORT = 8090


def _spark_unit(bed: TestBed, host: str, unit: str, args: str, env: dict[str, str]) -> None:
    setenv = " ".join(f"--setenv={k}={shlex.quote(v)}" for k, v in env.items())
    bed.ssh(
        host,
        f"systemctl reset-failed {unit} 2>/dev/null; systemd-run --unit={unit} --uid=sparkmill"
        f" --gid=sparkmill --property=Restart=no {setenv} {SPARK_CLASS} {args}",
    )


def _on_each(hosts: list[str], action: Callable[[str], object]) -> None:
    """``action(host)`` for every host at once; the first failure is raised after all ended."""
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        for future in [pool.submit(action, host) for host in hosts]:
            future.result()


@pytest.fixture(scope="module")
def standalone(bed: TestBed) -> Iterator[str]:
    master_ip = bed.addresses[MASTER_HOST]
    url = f"spark://{master_ip}:7077"
    executors = bed.groups["task_executors"]
    try:
        _spark_unit(
            bed,
            MASTER_HOST,
            "spark-master",
            f"org.apache.spark.deploy.master.Master --host {master_ip} --port 7077"
            f" --webui-port {MASTER_UI_PORT}",
            # A powered-off worker is declared dead after 10 s (default 60 s).
            {"SPARK_LOCAL_IP": master_ip, "SPARK_MASTER_OPTS": "-Dspark.worker.timeout=10"},
        )
        for host in WORKER_HOSTS:
            ip = bed.addresses[host]
            _spark_unit(
                bed,
                host,
                "spark-worker",
                f"org.apache.spark.deploy.worker.Worker --host {ip} --webui-port 8091"
                f" --cores 4 --memory 1536m --work-dir /tmp/spark-worker {url}",
                # A worker heartbeats every quarter of *its own* spark.worker.timeout: with the
                # default 60 s it would miss the master's 10 s and be dropped every half minute.
                {"SPARK_LOCAL_IP": ip, "SPARK_WORKER_OPTS": "-Dspark.worker.timeout=10"},
            )
        bed.wait_until(
            "both Spark workers registered at the master",
            lambda: _master_state(bed).get("aliveworkers") == len(WORKER_HOSTS),
            timeout=120,
        )

        def use_the_master(host: str) -> None:
            # One core per task executor's application (three of them share the workers' cores),
            # and a lost executor is noticed in seconds.
            amend_config(
                bed,
                host,
                TE_CONFIG,
                {
                    "spark.master": url,
                    "spark.conf.spark.cores.max": "1",
                    "spark.conf.spark.executor.cores": "1",
                    "spark.conf.spark.executor.memory": "512m",
                    "spark.conf.spark.network.timeout": "20s",
                    # Spark 4 refuses a timeout below the check interval (60 s by default).
                    "spark.conf.spark.network.timeoutInterval": "10s",
                    "spark.conf.spark.executor.heartbeatInterval": "2s",
                },
            )
            bed.ssh(host, f"systemctl restart {TE_UNIT}")

        # The hosts one per thread: each restart waits for its old task executor to stop.
        _on_each(executors, use_the_master)
        wait_cluster(bed)
        yield url
    finally:
        # The last module of the suite: the bed's removal follows, nothing to restore for
        # (about 30 s of restarting task executors).
        if bed_state.bed_used_next:
            _on_each(executors, lambda host: restore_config(bed, host, TE_CONFIG, TE_UNIT))
            for host in {MASTER_HOST, *WORKER_HOSTS}:
                bed.ssh(host, "systemctl stop spark-worker spark-master", check=False)
            wait_cluster(bed)


def _master_state(bed: TestBed) -> dict[str, Any]:
    """The Spark master's own view (its web UI's JSON): alive workers, running applications.

    Asked of the master rather than counted in its journal, which keeps earlier runs' lines.
    """
    url = f"http://{bed.addresses[MASTER_HOST]}:{MASTER_UI_PORT}/json/"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            state: dict[str, Any] = json.load(response)
            return state
    except OSError:
        return {}  # not up yet


def _applications(bed: TestBed) -> int:
    return len(_master_state(bed).get("activeapps", []))


def _finish_exact(bed: TestBed, client: ClusterClient, job: HaJob) -> None:
    result = wait_job(client, job.job_id, timeout=600)
    assert result.status == common_pb2.FINISHED, (status_name(result.status), result.failure)
    check = ha_data.check(job.output, answer(bed))
    assert check.exact, check


def test_spark_standalone_workers_on_the_bed_exact_output_also_after_a_worker_power_off(
    bed: TestBed, standalone: str
) -> None:
    faults = Faults(bed)
    with cluster_client(bed) as client:
        bed.wait_until(
            "every task executor's Spark application at the master",
            lambda: _applications(bed) >= len(bed.groups["task_executors"]),
            timeout=180,
        )
        job = submit_ha(client, bed, "s5-standalone")
        _finish_exact(bed, client, job)

        held = submit_ha(client, bed, "s5-standalone-worker-off", hold=True)
        bed.wait_until("job held", held.held, timeout=300, interval=1.0)
        with faults.power_off(WORKER_HOSTS[-1]):
            time.sleep(1)
            held.release()
            _finish_exact(bed, client, held)
