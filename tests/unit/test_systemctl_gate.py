"""The forced command the Ansible role puts in front of the resource managers' SSH key on the
task-executor hosts: exactly the systemctl calls of the systemd worker driver pass, nothing
else runs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

import pytest

from sparkmill.services.resourcemanager.systemd_worker_driver import (
    LIST_COMMAND,
    start_command,
    stop_command,
)

GATE = (
    Path(__file__).resolve().parents[2] / "ansible/roles/sparkmill/files/sparkmill-systemctl-gate"
)
UNIT = "sparkmill-task-executor-elastic"
ONE = f"{UNIT}@{'a' * 32}.service"


def _gate() -> ModuleType:
    loader = SourceFileLoader("sparkmill_systemctl_gate", str(GATE))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_drivers_calls_pass_and_list_units_is_narrowed_to_the_template() -> None:
    gate = _gate()
    assert gate.allowed(UNIT, start_command(ONE)) == ["start", ONE]
    assert gate.allowed(UNIT, stop_command(ONE)) == ["stop", "--no-block", ONE]
    assert gate.allowed(UNIT, ["systemctl", "stop", ONE]) == ["stop", ONE]
    assert gate.allowed(UNIT, ["systemctl", "is-active", ONE]) == ["is-active", ONE]
    assert gate.allowed(UNIT, LIST_COMMAND) == [*LIST_COMMAND[1:], f"{UNIT}@*.service"]


@pytest.mark.parametrize(
    "command",
    [
        "",
        "id",
        "systemctl",
        f"systemctl restart {ONE}",
        f"systemctl start {ONE} sshd.service",
        "systemctl start sshd.service",
        f"systemctl start {UNIT}@x;id.service",
        f"systemctl start {UNIT}@../x.service",
        f"systemctl start other-{UNIT}@{'a' * 32}.service",
        f"systemctl start {UNIT}@{'a' * 65}.service",
        "systemctl list-units",
        "systemctl list-units --type=service --state=active --plain --no-legend --no-pager *",
        f"systemctl --no-block stop {ONE}",
        f"sh -c 'systemctl start {ONE}'",
    ],
)
def test_anything_else_is_refused_before_anything_runs(command: str) -> None:
    result = subprocess.run(
        [sys.executable, str(GATE), UNIT],
        env={**os.environ, "SSH_ORIGINAL_COMMAND": command},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 126, result
    assert "refused" in result.stderr


def test_the_gate_needs_a_valid_unit_name() -> None:
    for argv in ([], ["Bad;Unit"], [UNIT, "extra"]):
        result = subprocess.run(
            [sys.executable, str(GATE), *argv],
            env={**os.environ, "SSH_ORIGINAL_COMMAND": f"systemctl start {ONE}"},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 126
