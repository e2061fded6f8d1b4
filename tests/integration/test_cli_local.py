"""The embedded mode and service start-up, as a user runs them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sparkmill.common.rpc.keys import rest_token_of

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_sparkmill_run_noop_example_end_to_end() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "sparkmill", "run", str(ROOT / "examples" / "noop_job.py")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "FINISHED" in run.stdout
    assert re.search(r"dashboard: http://127\.0\.0\.1:\d+/#/jobs/[0-9a-f]{32}", run.stderr)


FAILS_ONCE = """\
from sparkmill.testing import noop_pipeline

pipeline = noop_pipeline("fails-once", parallelism=1, vertices=1, fail_attempts=1)
"""


def test_sparkmill_run_takes_config_and_d_for_its_local_cluster(tmp_path: Path) -> None:
    # The job fails its first attempt: with the default restart strategy it would be restarted
    # and finish, so FAILED shows that the file's `restart-strategy.type: none` reached the
    # cluster; no dashboard line shows that `-D rest.enabled=false` did.
    pipeline = tmp_path / "fails_once.py"
    pipeline.write_text(FAILS_ONCE)
    config = tmp_path / "run.yaml"
    config.write_text("restart-strategy.type: none\n")
    command = [sys.executable, "-m", "sparkmill", "run", str(pipeline), "--json"]
    run = subprocess.run(
        [*command, "--config", str(config), "-D", "rest.enabled=false"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    outcome = json.loads(run.stdout)
    assert (outcome["status"], outcome["restarts"]) == ("FAILED", 0), run.stdout
    assert "dashboard:" not in run.stderr, run.stderr
    refused = subprocess.run(
        [*command, "-D", "dispatcher.rpc-address=tcp://127.0.0.1:6123"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "starting a local cluster" not in refused.stderr  # refused before anything started
    assert "dispatcher.rpc-address" in json.loads(refused.stdout)["error"]


def test_a_bad_configuration_key_stops_a_service_with_a_message(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("taskmanager.numberOfTaskSlot: 4\n")
    run = subprocess.run(
        [sys.executable, "-m", "sparkmill", "task-executor", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "taskmanager.numberOfTaskSlot" in run.stderr
    assert "taskmanager.numberOfTaskSlots" in run.stderr  # the suggestion


def test_local_cluster_up_and_down(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "sparkmill", "local-cluster"]
    up = subprocess.run(
        [*base, "up", "--dir", str(tmp_path), "--task-executors", "1", "--slots", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert (tmp_path / "cluster.yaml").exists()
        url = re.search(r"dashboard: +(http://127\.0\.0\.1:\d+)", up.stdout)
        assert url, up.stdout
        tokens = re.search(r"rest tokens: +(\S+)", up.stdout)
        assert tokens and Path(tokens.group(1)).stat().st_mode & 0o777 == 0o600, up.stdout
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(f"{url.group(1)}/v1/overview", timeout=10)
        token = rest_token_of(Path(tokens.group(1)), "viewer")
        overview = urllib.request.Request(
            f"{url.group(1)}/v1/overview", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(overview, timeout=10) as reply:
            assert json.load(reply)["taskmanagers"] == 1
        assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [
            "dispatcher-0.log",
            "job-master-0.log",
            "resource-manager-0.log",
            "task-executor-0.log",
        ]
    finally:
        down = subprocess.run(
            [*base, "down", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=60
        )
    assert down.returncode == 0, down.stderr
    assert not (tmp_path / "processes.json").exists()
