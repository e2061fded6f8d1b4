"""The shipped Prometheus configuration, alert rules and Grafana dashboard, checked statically
(``promtool check`` / ``promtool test rules``; every metric they use is documented)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkmill.common.v1 import common_pb2
from sparkmill.prometheus_targets import file_sd_groups

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (scripts/bootstrap.sh installs it)"
)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=60
    )


def documented_metrics() -> set[str]:
    text = (ROOT / "docs" / "monitoring.md").read_text()
    return set(re.findall(r"^\| `(sparkmill_\w+)` \|", text, re.MULTILINE))


def used_metrics(expr: str) -> set[str]:
    names = set(re.findall(r"\bsparkmill_\w+", expr))
    return {re.sub(r"_(bucket|count|sum)$", "", n) for n in names}


@needs_promtool
def test_alert_rules_pass_promtool_check_rules() -> None:
    result = promtool("check", "rules", "sparkmill-alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_alert_rules_pass_their_promtool_unit_tests() -> None:
    result = promtool("test", "rules", "tests/sparkmill-alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_scrape_configuration_passes_promtool_check_config() -> None:
    result = promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_unit_tested_and_uses_documented_metrics() -> None:
    rules = yaml.safe_load((PROMETHEUS_DIR / "sparkmill-alerts.yml").read_text())
    tests = (PROMETHEUS_DIR / "tests" / "sparkmill-alerts_test.yml").read_text()
    documented = documented_metrics()
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert f"alertname: {rule['alert']}\n" in tests, f"{rule['alert']} has no test"
            assert used_metrics(rule["expr"]) <= documented, rule["alert"]
            assert f"`{rule['alert']}`" in (ROOT / "docs" / "monitoring.md").read_text()


def test_dashboard_is_importable_and_uses_documented_metrics() -> None:
    dashboard = json.loads((GRAFANA_DIR / "sparkmill-dashboard.json").read_text())
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    rows = {p["title"] for p in dashboard["panels"] if p["type"] == "row"}
    assert rows == {"Cluster", "Jobs", "Tasks", "Control plane health"}
    documented = documented_metrics()
    exprs = 0
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            exprs += 1
            used = used_metrics(target["expr"])
            assert used or "up{" in target["expr"], panel["title"]
            assert used <= documented, (panel["title"], used - documented)
    assert exprs >= 30


def test_grafana_provisioning_files_are_valid_yaml() -> None:
    for path in (GRAFANA_DIR / "provisioning").rglob("*.yml"):
        assert yaml.safe_load(path.read_text())["apiVersion"] == 1


def test_file_sd_groups_come_from_service_infos() -> None:
    infos = [
        common_pb2.ServiceInfo(role="dispatcher", metrics_url="http://h1:9251/metrics"),
        common_pb2.ServiceInfo(role="task-executor", metrics_url="http://h2:9254/metrics"),
        common_pb2.ServiceInfo(role="task-executor", metrics_url="http://h3:9254/metrics"),
        common_pb2.ServiceInfo(role="job-master", metrics_url=""),  # metrics disabled
    ]
    assert file_sd_groups(infos) == [
        {"targets": ["h1:9251"], "labels": {"sparkmill_service": "dispatcher"}},
        {"targets": ["h2:9254", "h3:9254"], "labels": {"sparkmill_service": "task-executor"}},
    ]
