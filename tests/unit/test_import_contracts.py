"""The layer contracts of ``scripts/check_imports.py`` hold, and the check can fail.

The check runs in ``scripts/test.sh`` before pytest; these tests make sure it is not a check
that passes whatever the tree says: each contract is broken in a scratch copy of the package
folders and the script must name the offending import. The last tests check that ``common``
and ``services`` refuse to load under their bare folder names.
"""

from __future__ import annotations

import os
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


def test_a_lower_common_layer_importing_a_higher_one_is_refused(scratch: Path) -> None:
    append(
        scratch / "common" / "config" / "configuration.py",
        "\nfrom sparkmill.common.jobgraph import model  # noqa\n",
    )
    result = run_check(scratch)
    assert result.returncode == 1
    assert "common/config/configuration.py:" in result.stdout
    assert (
        "sparkmill.common.config.configuration must not import sparkmill.common.jobgraph.model"
        " (common layer config -> jobgraph" in result.stdout
    )


def test_a_layer_import_hidden_inside_a_function_under_type_checking_is_refused(
    scratch: Path,
) -> None:
    append(
        scratch / "common" / "core" / "ids.py",
        "\n\ndef _late() -> None:\n"
        "    from typing import TYPE_CHECKING\n"
        "    if TYPE_CHECKING:\n"
        "        import sparkmill.common.ha.leader  # noqa\n",
    )
    result = run_check(scratch)
    assert result.returncode == 1
    assert "(common layer core -> ha" in result.stdout


def test_the_message_modules_of_v1_must_not_import_the_gateways(scratch: Path) -> None:
    append(
        scratch / "common" / "v1" / "jobs_pb2.py",
        "\nfrom sparkmill.common.v1 import gateways  # noqa\n",
    )
    result = run_check(scratch)
    assert result.returncode == 1
    assert "(common layer v1 -> v1.gateways" in result.stdout


def test_the_gateways_may_import_rpc_but_rpc_may_not_import_the_gateways(scratch: Path) -> None:
    append(
        scratch / "common" / "rpc" / "server.py",
        "\nfrom sparkmill.common.v1.gateways import DISPATCHERGATEWAY_METHODS  # noqa\n",
    )
    result = run_check(scratch)
    assert result.returncode == 1
    assert "(common layer rpc -> v1.gateways" in result.stdout
    assert result.stdout.count("common layer") == 1  # gateways -> rpc itself is fine


def test_a_common_module_outside_every_layer_is_reported(scratch: Path) -> None:
    (scratch / "common" / "helpers.py").write_text('"""Loose."""\n')
    result = run_check(scratch)
    assert result.returncode == 1
    assert "common/helpers.py: sparkmill.common.helpers is in no layer" in result.stdout


@pytest.mark.parametrize(
    ("statement", "name", "replacement"),
    [
        ("import common.core.ids", "common.core.ids", "sparkmill.common.core.ids"),
        ("import common", "common", "sparkmill.common"),
        ("from common.core import ids", "common.core", "sparkmill.common.core"),
        (
            "from services.dispatcher import dispatcher",
            "services.dispatcher",
            "sparkmill.services.dispatcher",
        ),
        ("import services as s", "services", "sparkmill.services"),
    ],
)
def test_a_bare_folder_name_import_anywhere_in_the_repository_is_refused(
    scratch: Path, statement: str, name: str, replacement: str
) -> None:
    (scratch / "benchmarks").mkdir()
    (scratch / "benchmarks" / "tool.py").write_text(
        f'"""A tool."""\n\n\ndef main() -> None:\n    {statement}  # noqa\n'
    )
    result = run_check(scratch)
    assert result.returncode == 1
    assert (
        f"benchmarks/tool.py:5: import of bare name {name!r}: import {replacement} instead"
        in result.stdout
    )


def test_relative_and_qualified_imports_of_the_same_names_are_fine(scratch: Path) -> None:
    (scratch / "benchmarks").mkdir()
    (scratch / "benchmarks" / "tool.py").write_text(
        '"""A tool."""\n\nfrom sparkmill import common, services  # noqa\n'
        "from sparkmill.common.core import ids  # noqa\n"
    )
    assert run_check(scratch).returncode == 0


BARE_IMPORT_PROBE = """
import sys
try:
    import {bare}
except ImportError as error:
    print("refused:", error)
else:
    print("loaded", {bare_root}.__name__)
import {qualified}
print("still importable:", {qualified}.__name__)
print("bare left in sys.modules:", [m for m in sys.modules if m.split('.')[0] == {root!r}])
"""


@pytest.mark.parametrize(
    ("bare", "qualified"),
    [
        ("common.core.ids", "sparkmill.common.core.ids"),
        ("services.entrypoint", "sparkmill.services.entrypoint"),
    ],
)
def test_the_folders_refuse_to_load_under_their_bare_names(bare: str, qualified: str) -> None:
    root = bare.split(".")[0]
    code = BARE_IMPORT_PROBE.format(bare=bare, bare_root=root, qualified=qualified, root=root)
    # The repository root first on sys.path, as with `python -c` or a script run from it.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"refused: the package '{root}'"), result.stdout
    assert f"import sparkmill.{root} instead" in lines[0]
    assert lines[1] == f"still importable: {qualified}"
    assert lines[2] == "bare left in sys.modules: []"
