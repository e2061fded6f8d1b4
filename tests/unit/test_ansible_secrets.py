"""The playbook never prints a secret: every task that writes one hides it from logs and diffs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

ROLES = Path(__file__).resolve().parents[2] / "ansible" / "roles"
# What a task's arguments mention when it writes secret material to a file.
SECRET_MARKERS = ("/private/", "rest.tokens", "zookeeper.digest", "grafana.ini", "password")


def _tasks(document: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for task in document or []:
        if not isinstance(task, dict):
            continue
        found.append(task)
        for nested in ("block", "rescue", "always"):
            found.extend(_tasks(task.get(nested)))
    return found


def _writes_a_secret(task: dict[str, Any]) -> bool:
    for module in ("ansible.builtin.copy", "ansible.builtin.template", "copy", "template"):
        args = task.get(module)
        if isinstance(args, dict):
            text = json.dumps({k: args.get(k) for k in ("src", "dest", "content")})
            return any(marker in text for marker in SECRET_MARKERS)
    return False


def test_every_task_that_writes_a_secret_hides_it() -> None:
    checked = []
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            if _writes_a_secret(task):
                checked.append(task.get("name"))
                assert task.get("no_log") is True, f"{path.name}: {task.get('name')}: no_log"
                assert task.get("diff") is False, f"{path.name}: {task.get('name')}: diff"
    # The secret-writing tasks this test knows of must still be found (a rename would hide one).
    assert len(checked) >= 4, checked
