"""One test bed for all tests of this directory: started, converged twice, removed at the end.

(SPARKMILL_TESTBED_REUSE=1 uses a bed that is already up and converged and leaves it up.)

The session fixture runs ``scripts/testbed.sh up`` (Debian hosts under systemd-nspawn on a /24
of 198.18.0.0/15: 198.18.0.0/24 unless SPARKMILL_TESTBED_NET names another), converges
``ansible/site.yml`` onto them twice and ``scripts/testbed.sh down`` at the end, also when a
test or the set-up failed. When this machine cannot run the test bed (not root, no
systemd-nspawn or debootstrap, no Debian mirror) the tests are skipped with the script's reason.
A failing test prints the journals of every host's services.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.conftest import FAILED_KEY
from tests.testbed.bed import (
    CACHE,
    EXIT_CANNOT_RUN,
    SCRIPT,
    STATE,
    VENV_BIN,
    TestBed,
    parse_inventory,
)

ANSIBLE_REQUIREMENT = "ansible-core>=2.17,<2.20"


def _script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPARKMILL_VENV=sys.prefix)
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _ensure_ansible() -> None:
    if (VENV_BIN / "ansible-playbook").exists():
        return
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", ANSIBLE_REQUIREMENT],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"ansible-core cannot be installed: {result.stderr.strip()[-300:]}")


@pytest.fixture(scope="session")
def bed() -> Iterator[TestBed]:
    if os.geteuid() != 0:
        pytest.skip("the test bed needs root (containers, a bridge, overlay mounts)")
    _ensure_ansible()
    if os.environ.get("SPARKMILL_TESTBED_REUSE") == "1":
        # While working on the tests: a bed left up and converged by hand, kept afterwards.
        addresses, groups = parse_inventory(STATE / "inventory.ini")
        yield TestBed(inventory=STATE / "inventory.ini", addresses=addresses, groups=groups)
        return
    started = time.monotonic()
    try:
        up = _script("up", timeout=900)
        if up.returncode == EXIT_CANNOT_RUN:
            reason = next(
                (line for line in up.stderr.splitlines() if "CANNOT RUN" in line),
                "scripts/testbed.sh cannot run here",
            )
            pytest.skip(reason.strip())
        assert up.returncode == 0, f"testbed.sh up exited {up.returncode}:\n{up.stderr[-6000:]}"
        addresses, groups = parse_inventory(STATE / "inventory.ini")
        testbed = TestBed(inventory=STATE / "inventory.ini", addresses=addresses, groups=groups)
        testbed.timings["up"] = time.monotonic() - started
        for name in ("converge-1", "converge-2"):
            began = time.monotonic()
            testbed.converges.append(testbed.playbook("site.yml"))
            testbed.timings[name] = time.monotonic() - began
        yield testbed
        # Kept after `down` (which removes the state directory) for a look at the durations.
        (CACHE / "last-run-timings.json").write_text(
            json.dumps({k: round(v, 1) for k, v in testbed.timings.items()}) + "\n"
        )
    finally:
        down = _script("down", timeout=300)
        assert down.returncode in (0, EXIT_CANNOT_RUN), f"testbed.sh down failed:\n{down.stderr}"


@pytest.fixture(autouse=True)
def _journals_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    testbed = request.getfixturevalue("bed") if "bed" in request.fixturenames else None
    yield
    if testbed is not None and request.node.stash.get(FAILED_KEY, False):
        print(testbed.journals())
