"""The layer contracts of ``scripts/check_imports.py`` hold, and the check can fail.

The check runs in ``scripts/test.sh`` before pytest; these tests make sure it is not a check
that passes whatever the tree says: each contract is broken in a scratch copy of the package
folders and the script must name the offending import.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_imports.py"


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """The three package folders, copied without the symlinks that join them in a checkout."""
    for folder in ("common", "services"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copytree(
        ROOT / "sparkmill",
        tmp_path / "sparkmill",
        symlinks=True,
        ignore=shutil.ignore_patterns("*.pyc", "__pycache__"),
    )
    return tmp_path


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_the_committed_tree_keeps_every_contract() -> None:
    result = run_check(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "import contracts hold" in result.stdout


def test_the_scratch_copy_keeps_every_contract(scratch: Path) -> None:
    assert run_check(scratch).returncode == 0


def test_common_importing_a_service_is_refused(scratch: Path) -> None:
    append(
        scratch / "common" / "core" / "ids.py",
        "\nfrom sparkmill.services.dispatcher import dispatcher\n",
    )
    result = run_check(scratch)
    assert result.returncode == 1
    assert (
        "sparkmill.common.core.ids must not import sparkmill.services.dispatcher" in result.stdout
    )


def test_one_service_importing_another_is_refused_even_inside_a_function(scratch: Path) -> None:
    append(
        scratch / "services" / "dispatcher" / "job_placement.py",
        "\n\ndef _late() -> None:\n"
        "    from sparkmill.services.jobmaster.scheduler import default_scheduler\n",
    )
    result = run_check(scratch)
    assert result.returncode == 1
    assert "service:dispatcher -> service:jobmaster" in result.stdout


def test_the_public_api_reaching_into_a_service_is_refused(scratch: Path) -> None:
    append(scratch / "sparkmill" / "client.py", "\nimport sparkmill.services.taskexecutor.task\n")
    result = run_check(scratch)
    assert result.returncode == 1
    assert "api -> service:taskexecutor" in result.stdout


def test_a_cycle_hidden_behind_type_checking_is_found(scratch: Path) -> None:
    append(
        scratch / "common" / "core" / "ids.py",
        "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from sparkmill.common.config import configuration  # noqa\n",
    )
    append(
        scratch / "common" / "config" / "configuration.py",
        "\nfrom sparkmill.common.core import ids  # noqa\n",
    )
    result = run_check(scratch)
    assert result.returncode == 1
    assert "import cycle:" in result.stdout
    assert "sparkmill.common.core.ids" in result.stdout
