"""The wheel a user installs: one top-level package, and it runs the README's first command.

Builds the wheel exactly as a release would (``pip wheel``), checks that ``sparkmill`` is its
only top-level import package (the repository's ``common/`` and ``services/`` ship inside it),
installs it into a fresh virtualenv and runs ``sparkmill run examples/wordcount.py`` from a
directory outside the checkout, so nothing of the source tree can be imported by accident.
The virtualenv gets no pip of its own (``--without-pip``: ensurepip's copy costs 3-4 s and is
not what is tested); this interpreter's pip installs into it (``pip --python``), dependencies
and entry points as ``pip install`` inside it would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> str:
    result = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, (
        f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout[-8000:]}"
    )
    return result.stdout


@pytest.mark.timeout(900)
def test_the_wheel_has_one_top_level_package_and_runs_wordcount(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    dist = tmp_path / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    (wheel,) = dist.glob("sparkmill-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top_level = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
    }
    assert top_level == {"sparkmill"}
    assert "sparkmill/common/v1/gateways.py" in names
    assert "sparkmill/services/entrypoint.py" in names

    venv = tmp_path / "venv"
    run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            str(wheel),
        ],
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    work = tmp_path / "work"
    work.mkdir()
    env["SPARKMILL_EXAMPLES_DIR"] = str(tmp_path / "examples-data")
    output = run(
        [str(venv / "bin" / "sparkmill"), "run", str(ROOT / "examples" / "wordcount.py")],
        cwd=work,
        env=env,
        timeout=600,
    )
    assert "FINISHED" in output, output[-4000:]
    # The installed package, not the checkout, ran the services.
    where = run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sparkmill.services.entrypoint as e; print(e.__file__)",
        ],
        cwd=work,
        env=env,
        timeout=60,
    )
    assert str(venv) in where and str(ROOT) not in where
    assert (tmp_path / "examples-data" / "wordcount-output" / "_SUCCESS").exists()
