"""The staleness guard of the generated protobuf code (``scripts/gen_protos.py --check``).

The committed tree must be up to date; and the guard must actually catch every way generated code
goes stale, which is tried on a throw-away copy of the script, the protos and the generated files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = Path("common/v1")
PING_RPC = '  rpc Ping(GetServiceInfoRequest) returns (ServiceInfo) { option (callers) = "*"; }\n'


def gen_protos(
    root: Path, *args: str, pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``root/scripts/gen_protos.py`` with this interpreter (the venv's python)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "gen_protos.py"), *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the generator reads and writes, up to date like the committed tree."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "gen_protos.py", tmp_path / "scripts")
    shutil.copytree(ROOT / "protos", tmp_path / "protos")
    (tmp_path / GENERATED).mkdir(parents=True)
    for path in (ROOT / GENERATED).iterdir():
        if path.suffix in (".py", ".pyi"):
            shutil.copy2(path, tmp_path / GENERATED)
    # A stale ``sparkmill`` package of the copy's own, on PYTHONPATH in one test.
    (tmp_path / "sparkmill").mkdir()
    (tmp_path / "sparkmill" / "__init__.py").write_text("")
    return tmp_path


def add_ping_rpc(root: Path, rpc: str = PING_RPC) -> None:
    proto = root / "protos" / "sparkmill" / "v1" / "dispatcher.proto"
    text = proto.read_text()
    anchor = "  rpc GetServiceInfo(GetServiceInfoRequest) returns (ServiceInfo) {"
    anchor += ' option (callers) = "*"; }\n'
    assert anchor in text
    proto.write_text(text.replace(anchor, anchor + rpc))


def stale_files(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "generated code is stale" in result.stdout
    return result.stdout


def test_committed_generated_code_is_up_to_date() -> None:
    # Exactly as the test suite runs: the repository root on PYTHONPATH.
    result = gen_protos(ROOT, "--check", pythonpath=ROOT)
    assert result.returncode == 0, (
        f"common/v1 is stale, run scripts/gen_protos.py\n{result.stdout}{result.stderr}"
    )
    assert "generated code is up to date" in result.stdout


def test_check_passes_on_a_faithful_copy(tree: Path) -> None:
    result = gen_protos(tree, "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_catches_a_hand_edited_generated_file(tree: Path) -> None:
    gateways = tree / GENERATED / "gateways.py"
    gateways.write_text(gateways.read_text() + "# edited by hand\n")
    out = stale_files(gen_protos(tree, "--check"))
    assert "'gateways.py'" in out
    assert "_pb2" not in out


def test_check_catches_a_proto_change_without_regeneration(tree: Path) -> None:
    add_ping_rpc(tree)
    out = stale_files(gen_protos(tree, "--check"))
    for name in ("dispatcher_pb2.py", "gateways.py"):
        assert f"'{name}'" in out
    assert "jobs_pb2" not in out


def test_check_catches_missing_and_stray_generated_files(tree: Path) -> None:
    (tree / GENERATED / "jobs_pb2.pyi").unlink()
    (tree / GENERATED / "retired_pb2.py").write_text("# from a proto that no longer exists\n")
    out = stale_files(gen_protos(tree, "--check"))
    assert "'jobs_pb2.pyi'" in out
    assert "'retired_pb2.py'" in out


def test_regeneration_makes_the_check_pass_and_exposes_the_new_rpc(tree: Path) -> None:
    add_ping_rpc(tree)
    result = gen_protos(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    gateways = (tree / GENERATED / "gateways.py").read_text()
    assert '"Ping": MethodSpec("Ping", "ping",' in gateways
    assert "    async def ping(" in gateways
    assert gen_protos(tree, "--check").returncode == 0
    # Unrelated generated files are byte-identical to the committed ones.
    for name in ("jobs_pb2.py", "envelope_pb2.py", "task_executor_pb2.pyi"):
        assert (tree / GENERATED / name).read_bytes() == (ROOT / GENERATED / name).read_bytes()


def test_regeneration_with_the_repo_on_pythonpath_uses_the_fresh_descriptors(tree: Path) -> None:
    add_ping_rpc(tree)
    result = gen_protos(tree, pythonpath=tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"Ping": MethodSpec(' in (tree / GENERATED / "gateways.py").read_text()


def test_a_method_without_callers_is_refused(tree: Path) -> None:
    # Authorization is declared per method in the protos; forgetting it must not mean "open".
    add_ping_rpc(tree, "  rpc Ping(GetServiceInfoRequest) returns (ServiceInfo);\n")
    result = gen_protos(tree)
    assert result.returncode != 0
    assert "DispatcherGateway.Ping declares no (callers) option" in result.stdout + result.stderr


def test_callers_are_generated_into_the_method_specs(tree: Path) -> None:
    add_ping_rpc(
        tree,
        "  rpc Ping(GetServiceInfoRequest) returns (ServiceInfo) {\n"
        '    option (callers) = "task-executor, client";\n  }\n',
    )
    assert gen_protos(tree).returncode == 0
    gateways = (tree / GENERATED / "gateways.py").read_text()
    assert "callers=('client', 'task-executor'), large_request=False" in gateways
