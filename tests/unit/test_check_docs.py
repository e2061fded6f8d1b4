"""``scripts/check_docs.py`` holds for the committed docs and fails on a broken reference.

Each test writes a small project (or copies the real one) into a scratch folder, breaks or
keeps a reference in its Markdown, and runs the script on it as ``scripts/test.sh`` does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_docs.py"

CODE = '''"""A module."""

import enum


class Store:
    limit = 3

    def __init__(self) -> None:
        self.entries: list[str] = []

    def put(self, key: str) -> None:
        self._remember(key)

    def _remember(self, key: str) -> None:
        self.entries.append(key)


class Color(enum.Enum):
    RED = 1


def open_store(path: str) -> Store:
    return Store()


GAUGE = "store_entries"
'''

PROTO = """syntax = "proto3";
package sparkmill.v1;

message PutRequest { string key = 1; }
message GetRequest {
  // A comment { with braces }.
  string key = 1;
  oneof target { string path = 2; int32 slot = 3; }
}
service StoreGateway {
  rpc Put(PutRequest) returns (PutRequest) {
    option deprecated = true;
  }
  rpc Get(GetRequest) returns (GetRequest);
}
"""


def run_check(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small checkout: one common module, one proto, a README and one doc."""
    (tmp_path / "common" / "store").mkdir(parents=True)
    (tmp_path / "common" / "__init__.py").write_text("")
    (tmp_path / "common" / "store" / "__init__.py").write_text("")
    (tmp_path / "common" / "store" / "store.py").write_text(CODE)
    (tmp_path / "protos").mkdir()
    (tmp_path / "protos" / "store.proto").write_text(PROTO)
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("See [the docs](docs/store.md).\n")
    write_doc(tmp_path, "")
    return tmp_path


def write_doc(root: Path, text: str) -> Path:
    doc = root / "docs" / "store.md"
    doc.write_text(
        "# Store\n\n"
        "`Store` (`common/store/store.py`, `sparkmill.common.store.store`) keeps `entries`;\n"
        "`Store.put` calls `_remember(key)`, `open_store(path)` builds one, `Store.limit`,\n"
        "`Color.RED`, `GAUGE`, `sparkmill_store_entries`, `store.py`, `protos/*.proto`,\n"
        "`StoreGateway.Get`, `GetRequest.path`, `PutRequest.key`, `asyncio.sleep`.\n"
        "Not code: `sparkmill run`, `heartbeat.timeout`, `FINISHED`, `--detach`, `.proto`,\n"
        "`/etc/sparkmill/<service>.yaml`, Flink's `JobManagerRunner`.\n\n"
        "```python\nundefined_in_a_fence()\n```\n\n" + text
    )
    return doc


def test_the_committed_docs_resolve() -> None:
    result = run_check(ROOT, "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every code reference in the docs resolves" in result.stdout


def test_references_that_exist_pass(project: Path) -> None:
    result = run_check(project, "--check")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("reference", "why"),
    [
        ("`Store._forget`", "class Store has no attribute _forget"),
        ("`Storage.put`", "Storage is no class of the project"),
        ("`_vanished_helper`", "_vanished_helper is defined nowhere in the project"),
        ("`close_store()`", "close_store is defined nowhere in the project"),
        ("`common/store/missing.py`", "no such path 'common/store/missing.py'"),
        ("`gone.py`", "no file named 'gone.py'"),
        ("`sparkmill.common.store.cache`", "module sparkmill.common.store defines no cache"),
        (
            "`sparkmill.common.store.store.Store.drop`",
            "Store (in sparkmill.common.store.store) has no attribute drop",
        ),
        ("`StoreGateway.Delete`", "class StoreGateway has no attribute Delete"),
        ("`PutRequest.value`", "class PutRequest has no attribute value"),
        ("`common.store.store`", "write sparkmill.common.store.store"),
        ("[the API](api.md)", "link to a missing file 'api.md'"),
    ],
)
def test_a_broken_reference_fails_with_file_line_and_name(
    project: Path, reference: str, why: str
) -> None:
    write_doc(project, f"Later:\n\nsee {reference} here.\n")
    result = run_check(project, "--check")
    assert result.returncode == 1, result.stdout
    lines = [line for line in result.stdout.splitlines() if line.startswith("docs/")]
    assert len(lines) == 1, result.stdout
    assert lines[0].startswith("docs/store.md:16: "), lines[0]
    assert why in lines[0]


def test_without_check_the_problems_are_listed_but_do_not_fail(project: Path) -> None:
    write_doc(project, "`Store._forget`\n")
    result = run_check(project)
    assert result.returncode == 0
    assert "docs/store.md:14: `Store._forget`: class Store has no attribute _forget" in (
        result.stdout
    )


def test_a_stale_name_in_the_real_architecture_doc_fails(tmp_path: Path) -> None:
    for folder in ("common", "services", "protos", "docs", "deploy", "ansible", "scripts"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copytree(
        ROOT / "sparkmill",
        tmp_path / "sparkmill",
        symlinks=True,
        ignore=shutil.ignore_patterns("*.pyc", "__pycache__"),
    )
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    doc = tmp_path / "docs" / "architecture.md"
    text = doc.read_text()
    doc.write_text(text + "\nBuilt by `JobMaster._deployment_descriptor`.\n")
    line = len(text.splitlines()) + 2
    result = run_check(tmp_path, "--check")
    assert result.returncode == 1
    assert (
        f"docs/architecture.md:{line}: `JobMaster._deployment_descriptor`: "
        "class JobMaster has no attribute _deployment_descriptor"
    ) in result.stdout
