"""Monitoring end to end: a local cluster, a real Prometheus server with the shipped scrape
configuration and alert rules, a job, and every PromQL expression of the shipped Grafana dashboard.

The cluster's processes pick free metrics ports, so the test writes file_sd targets from the
cluster status (``sparkmill.prometheus_targets``) and points the shipped configuration at them
instead of its example static targets.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkmill.common.v1 import common_pb2
from sparkmill.local_cluster import free_port
from sparkmill.prometheus_targets import cluster_services, file_sd_groups, write_atomically
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import RunningCluster, _start, eventually

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "sparkmill-dashboard.json"
MONITORING_DOC = ROOT / "docs" / "monitoring.md"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
TASK_EXECUTORS, SLOTS = 2, 2
# Grafana's variables, as the test's Prometheus (1 s scrapes) needs them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "5m", "$__interval": "5s"}


class Prometheus:
    def __init__(self, directory: Path, targets_file: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_file = directory / "prometheus.log"
        config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
        config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
        config["rule_files"] = [str(PROMETHEUS_DIR / f) for f in config["rule_files"]]
        (job,) = config["scrape_configs"]
        job["static_configs"] = []  # the example hosts of a systemd cluster
        job["file_sd_configs"] = [{"files": [str(targets_file)], "refresh_interval": "1s"}]
        self.config_file = directory / "prometheus.yml"
        self.config_file.write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert PROMETHEUS is not None
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={self.config_file}",
                    f"--storage.tsdb.path={self.directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        eventually(self._ready, timeout=20, interval=0.1)

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{self.log_file.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=5) as reply:
            body = json.loads(reply.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, expr: str) -> float | None:
        """The single value of ``expr`` now, or None when it returns nothing."""
        result = self.query(expr)
        assert len(result) <= 1, (expr, result)
        return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """Overrides the conftest's fixture: 2 x 2 slots (the conftest prints its logs on failure)."""
    running = _start(
        tmp_path_factory.mktemp("monitored"), task_executors=TASK_EXECUTORS, slots=SLOTS
    )
    yield running
    running.close()


@pytest.fixture(scope="module")
def prometheus(
    shared_cluster: RunningCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    if PROMETHEUS is None:
        pytest.skip("the prometheus binary is not installed (scripts/bootstrap.sh installs it)")
    directory = tmp_path_factory.mktemp("prometheus")
    targets = directory / "targets.json"
    write_atomically(targets, file_sd_groups(cluster_services(shared_cluster.config_path)))
    server = Prometheus(directory, targets)
    server.start()
    try:
        yield server
    except BaseException:
        print(server.log_file.read_text()[-5000:])
        raise
    finally:
        server.stop()


def _metrics_urls(running: RunningCluster) -> dict[str, str]:
    return {
        f"{info.role} {info.id[:8]}": info.metrics_url
        for info in cluster_services(running.config_path)
    }


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(reply.read().decode())


def _cli_json(running: RunningCluster, *args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "sparkmill", "--config", str(running.config_path), *args, "--json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return json.loads(out.stdout)


def dashboard_variables() -> dict[str, str]:
    """Grafana's built-in variables plus the dashboard's own, each as "All" selects it."""
    dashboard = json.loads(DASHBOARD.read_text())
    values = dict(GRAFANA_VARIABLES)
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable["type"] != "query":
            continue
        # A multi-value variable's "All" must be a regex, or `=~"$var"` matches nothing.
        assert variable.get("includeAll") and variable.get("allValue") == ".*", variable["name"]
        values["${" + variable["name"] + "}"] = ".*"
        values["$" + variable["name"]] = ".*"
    # Longest first, so `$__rate_interval` is not cut by a shorter name.
    return dict(sorted(values.items(), key=lambda item: -len(item[0])))


def dashboard_variable_queries() -> list[tuple[str, str]]:
    """(variable, PromQL) whose series feed each query variable's drop-down."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable["type"] == "query":
            definition = variable["query"]["query"]
            match = re.fullmatch(r"label_values\((\w+), *(\w+)\)", definition)
            assert match, f"{variable['name']}: unexpected query {definition}"
            found.append((variable["name"], f"count by ({match[2]}) ({match[1]})"))
    return found


def dashboard_expressions() -> list[tuple[str, str]]:
    """(panel title, PromQL with Grafana's variables substituted) for every panel target."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = dashboard_variables()
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in variables.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, f"unknown variable in {panel['title']}: {expr}"
            found.append((panel["title"], expr))
    return found + [(f"variable {name}", query) for name, query in dashboard_variable_queries()]


def test_every_service_exposes_metrics_that_promtool_accepts(
    shared_cluster: RunningCluster,
) -> None:
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (scripts/bootstrap.sh installs prometheus)")
    urls = _metrics_urls(shared_cluster)
    assert len(urls) == 3 + TASK_EXECUTORS, urls
    documented = set(re.findall(r"^\| `(sparkmill_\w+)` \|", MONITORING_DOC.read_text(), re.M))
    exposed: set[str] = set()
    for name, url in urls.items():
        assert url.startswith("http://127.0.0.1:"), (name, url)
        text = _scrape(url)
        check = subprocess.run(
            [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
        )
        assert check.returncode == 0, f"{name}: {check.stdout}{check.stderr}"
        exposed |= set(re.findall(r"^# TYPE (sparkmill_\w+) ", text, re.MULTILINE))
    # Each metric family is documented; only HA-only, event-only or driver-only families
    # (resourcemanager.driver is none here) may be missing here.
    assert exposed <= documented, f"undocumented: {sorted(exposed - documented)}"
    assert documented - exposed <= {
        "sparkmill_zookeeper_connected",
        "sparkmill_zookeeper_connection_losses_total",
        "sparkmill_rpc_malformed_messages_total",
        "sparkmill_resource_manager_workers",
        "sparkmill_resource_manager_workers_started_total",
        "sparkmill_resource_manager_workers_failed_total",
        "sparkmill_resource_manager_workers_released_total",
        "sparkmill_resource_manager_workers_recovered_total",
        "sparkmill_resource_manager_worker_starts_paused",
    }, f"documented but not exposed: {sorted(documented - exposed)}"


def test_prometheus_sees_the_cluster_as_it_is_and_every_dashboard_query_has_data(
    shared_cluster: RunningCluster, prometheus: Prometheus
) -> None:
    p = prometheus
    services = 3 + TASK_EXECUTORS
    eventually(lambda: p.value('sum(up{job="sparkmill"})') == services, timeout=20)
    rules = [r for g in p.api("rules")["groups"] for r in g["rules"]]
    assert len(rules) >= 10 and all(r["health"] != "err" for r in rules), rules

    total = TASK_EXECUTORS * SLOTS
    assert eventually(lambda: p.value("sum(sparkmill_resource_manager_slots)") == total)
    assert p.value('sum(sparkmill_task_executor_slots{state="free"})') == total
    assert p.value("max(sparkmill_resource_manager_task_executors)") == TASK_EXECUTORS

    job_id = shared_cluster.client.submit(
        noop_pipeline("monitored", parallelism=total, sleep_s=7.0).build_job_graph()
    )
    # While the job runs, every slot is allocated and every task runs, in the metrics and in
    # `sparkmill cluster status` / `sparkmill jobs status` alike.
    running = f'sparkmill_job_tasks{{job_id="{job_id}", state="RUNNING"}}'
    eventually(lambda: p.value(running) == total, timeout=20)
    eventually(lambda: p.value('sum(sparkmill_task_executor_tasks{state="RUNNING"})') == total)

    # The resource manager and the task executors are scraped separately, so the resource
    # manager's sample may be one scrape older than the task executors' RUNNING tasks.
    def slot_gauges() -> dict[str, float | None]:
        return {
            state: p.value(f'sum(sparkmill_resource_manager_slots{{state="{state}"}})')
            for state in ("free", "allocated", "pending")
        }

    slots = {"free": 0, "allocated": total, "pending": 0}
    eventually(lambda: slot_gauges() == slots, timeout=15)
    eventually(lambda: p.value('sum(sparkmill_task_executor_slots{state="active"})') == total)
    status = _cli_json(shared_cluster, "cluster", "status")
    assert status["slots"] == {"total": total, **slots}
    assert status["pending_slot_requests"] == p.value(
        "sum(sparkmill_resource_manager_pending_slot_requests)"
    )
    assert len(status["task_executors"]) == p.value(
        "max(sparkmill_resource_manager_task_executors)"
    )
    metrics_urls = {s["metrics_url"] for s in status["services"]}
    up = {r["metric"]["instance"] for r in p.query('up{job="sparkmill"} == 1')}
    assert {urllib.parse.urlsplit(u).netloc for u in metrics_urls} == up
    details = _cli_json(shared_cluster, "jobs", "status", job_id)
    tasks = sum(v["tasks"].get("RUNNING", 0) for v in details["vertices"])
    assert tasks == p.value(running) == total
    assert details["restarts"] == p.value(f'sparkmill_job_restarts_total{{job_id="{job_id}"}}')
    assert p.value(f'sparkmill_job_status{{job_id="{job_id}", status="RUNNING"}}') == 1

    result = shared_cluster.client.wait(job_id, timeout=60)
    assert result.status == common_pb2.FINISHED
    finished = f'sum(sparkmill_task_attempts_finished_total{{job_id="{job_id}"}})'
    eventually(lambda: p.value(finished) == total, timeout=15)
    eventually(
        lambda: p.value(f'sparkmill_job_status{{job_id="{job_id}", status="FINISHED"}}') == 1
    )
    eventually(lambda: p.value('sum(sparkmill_resource_manager_slots{state="free"})') == total)
    assert p.value(f'sum(sparkmill_task_attempts_started_total{{job_id="{job_id}"}})') == total
    assert p.value(f'sum(sparkmill_task_attempts_failed_total{{job_id="{job_id}"}})') == 0
    details = _cli_json(shared_cluster, "jobs", "status", job_id)
    assert details["status"] == "FINISHED"
    assert sum(v["tasks"].get("FINISHED", 0) for v in details["vertices"]) == p.value(
        f'sparkmill_job_tasks{{job_id="{job_id}", state="FINISHED"}}'
    )
    eventually(
        lambda: p.value('sum(sparkmill_dispatcher_jobs_ended_total{status="FINISHED"})') == 1
    )
    assert p.value("sum(sparkmill_dispatcher_jobs_submitted_total)") == 1
    assert p.value("sum(sparkmill_resource_manager_slot_request_wait_seconds_count)") == total
    assert p.value("sum(sparkmill_job_scheduling_latency_seconds_count)") == total
    assert p.value("sum(sparkmill_job_deployment_latency_seconds_count)") == total

    # Every query of the dashboard returns data.
    deadline = time.monotonic() + 10
    empty = dashboard_expressions()
    while empty and time.monotonic() < deadline:
        empty = [(title, expr) for title, expr in empty if not p.query(expr)]
        if empty:
            time.sleep(0.5)
    assert not empty, "dashboard queries without data:\n" + "\n".join(
        f"  {title}: {expr}" for title, expr in empty
    )


def test_a_pyspark_pipeline_shows_up_in_the_metrics(
    shared_cluster: RunningCluster, prometheus: Prometheus
) -> None:
    # Runs after the test above (same cluster): the task executors start Spark on first use.
    import sparkmill as sm
    from sparkmill import functions as F

    pipeline = sm.Pipeline("monitored-pyspark", parallelism=2)
    (
        pipeline.range(1000)
        .with_column("k", F.col("id") % 7)
        .key_by("k")
        .agg(F.count("*").alias("n"))
        .collect(name="counts")
    )
    job_id = shared_cluster.client.submit(pipeline.build_job_graph())
    result = shared_cluster.client.wait(job_id, timeout=300)
    assert result.status == common_pb2.FINISHED, result.failure.message
    assert sorted(tuple(r) for r in pipeline.collected(result)["counts"]) == [
        (k, len(range(k, 1000, 7))) for k in range(7)
    ]
    p = prometheus
    out = f'sum(sparkmill_task_records_out_total{{job_id="{job_id}"}})'
    records_in = f'sum(sparkmill_task_records_in_total{{job_id="{job_id}"}})'
    # The source read 1000 rows; the aggregation wrote 7; every stage counted something.
    eventually(lambda: (p.value(records_in) or 0) >= 1000, timeout=20)
    assert (p.value(out) or 0) >= 7
    assert (p.value("sum(sparkmill_spark_session_up)") or 0) >= 1
    details = _cli_json(shared_cluster, "jobs", "status", job_id)
    assert details["status"] == "FINISHED"
