"""A task executor process on its own: what it does when no resource manager answers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sparkmill.local_cluster import LOCAL_DEFAULTS, LocalCluster, free_port

pytestmark = pytest.mark.integration


def test_an_unregistered_task_executor_exits_naming_the_resource_manager(tmp_path: Path) -> None:
    # Nothing listens there: every registration attempt times out.
    rm_address = f"tcp://127.0.0.1:{free_port()}"
    config = tmp_path / "cluster.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                **LOCAL_DEFAULTS,
                "resourcemanager.rpc-address": rm_address,
                "taskmanager.rpc-address": "tcp://127.0.0.1:0",
                "taskmanager.registration.timeout": "3 s",
                "exchange.dir": str(tmp_path / "exchange"),
                "metrics.enabled": False,
                **LocalCluster(tmp_path).security_config(),
            }
        )
    )
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "sparkmill", "task-executor", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=90,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stdout[-4000:]
    assert "taskmanager.registration.timeout (3 s)" in result.stdout
    assert rm_address in result.stdout
    assert 3 <= elapsed < 60, elapsed
