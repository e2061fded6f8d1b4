#!/usr/bin/env python3
"""Build a reproducible sparkmill wheel from a source checkout: build_wheel.py CHECKOUT OUT_DIR.

Used by the Ansible role on the controller. The checkout is copied first (without .git, venvs
and build leftovers), so the build neither writes into it nor picks up a stale build/ tree;
SOURCE_DATE_EPOCH pins the timestamps inside the wheel, so the same sources give the same bytes
and an unchanged checkout changes nothing on the hosts. Prints the wheel's path as its last line.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "spark-warehouse",
    "metastore_db",
)
EPOCH = "315532800"  # 1980-01-01, the earliest time a zip entry can carry


def setuptools_is_recent() -> bool:
    if importlib.util.find_spec("setuptools") is None:
        return False
    import setuptools

    return int(setuptools.__version__.split(".")[0]) >= 77


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    source, out_dir = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    if not (source / "pyproject.toml").is_file():
        print(f"build_wheel: {source} has no pyproject.toml", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sparkmill-wheel-") as tmp:
        copy = Path(tmp) / "src"
        shutil.copytree(source, copy, ignore=IGNORE, symlinks=True)
        built = Path(tmp) / "out"
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(built)]
        if setuptools_is_recent():  # no need to fetch the build backend from an index
            command.append("--no-build-isolation")
        env = dict(os.environ, SOURCE_DATE_EPOCH=EPOCH, PYTHONDONTWRITEBYTECODE="1")
        result = subprocess.run([*command, str(copy)], env=env, stdout=sys.stderr, check=False)
        if result.returncode != 0:
            print(
                f"build_wheel: pip wheel failed with exit code {result.returncode}", file=sys.stderr
            )
            return result.returncode
        wheels = sorted(built.glob("sparkmill-*.whl"))
        if len(wheels) != 1:
            print(f"build_wheel: expected one sparkmill wheel, got {wheels}", file=sys.stderr)
            return 1
        target = out_dir / wheels[0].name
        shutil.copyfile(wheels[0], target.with_suffix(".tmp"))
        os.replace(target.with_suffix(".tmp"), target)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
