"""One test bed for all tests of this directory: started, converged twice, removed at the end.

(SPARKMILL_TESTBED_REUSE=1 uses a bed that is already up and converged and leaves it up.)

The session fixture runs ``scripts/testbed.sh up`` (Debian hosts under systemd-nspawn on a /24
of 198.18.0.0/15: 198.18.0.0/24 unless SPARKMILL_TESTBED_NET names another), converges
``ansible/site.yml`` onto them and ``scripts/testbed.sh down`` at the end, also when a test or
the set-up failed. The second converge (nothing may change) runs in the background while the
tests that only read the hosts or run jobs take ``bed_converging``; ``bed`` waits for it, so a
test that changes a host (a fault, a restart, another configuration) never meets a running play.
When this machine cannot run the test bed (not root, no systemd-nspawn or debootstrap, no Debian
mirror) the tests are skipped with the script's reason. A failing test prints the journals of
every host's services.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import FAILED_KEY, tier_of
from tests.testbed import bed as bed_state
from tests.testbed.bed import (
    VENV_BIN,
    CannotRun,
    TestBed,
    existing_bed,
    prepare_in_background,
    running_bed,
    stop_preparing,
)

ANSIBLE_REQUIREMENT = "ansible-core>=2.17,<2.20"


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


def pytest_collection_finish(session: pytest.Session) -> None:
    """When the test bed runs after other tiers, its Debian root and wheelhouse are built while
    those run (on a fresh machine about a minute and a half, mostly waiting for the mirror)."""
    if session.config.option.collectonly or os.geteuid() != 0:
        return
    if os.environ.get("SPARKMILL_TESTBED_REUSE") == "1":
        return
    tiers = {tier_of(item.path) for item in session.items}
    if "testbed" in tiers and len(tiers) > 1:
        prepare_in_background()


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_preparing()


@pytest.fixture(scope="session")
def bed_converging() -> Iterator[TestBed]:
    """The bed, possibly while its second converge still runs: for tests that only read the
    hosts or run jobs, never for one that changes a host."""
    if os.geteuid() != 0:
        pytest.skip("the test bed needs root (containers, a bridge, overlay mounts)")
    _ensure_ansible()
    if os.environ.get("SPARKMILL_TESTBED_REUSE") == "1":
        # While working on the tests: a bed left up and converged by hand, kept afterwards.
        yield existing_bed()
        return
    try:
        with running_bed(second_converge=True) as testbed:
            yield testbed
    except CannotRun as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def bed(bed_converging: TestBed) -> TestBed:
    """The bed with no play running on it: free to be changed."""
    bed_converging.settle()
    return bed_converging


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Before the fixtures of ``item`` are torn down: tell them whether a test of the bed runs
    next (``bed.bed_used_next``), so that a module does not restore hosts the bed's removal is
    about to throw away."""
    bed_state.bed_used_next = os.environ.get("SPARKMILL_TESTBED_REUSE") == "1" or (
        nextitem is not None and tier_of(nextitem.path) == "testbed"
    )


@pytest.fixture(autouse=True)
def _journals_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    names = [n for n in ("bed", "bed_converging") if n in request.fixturenames]
    testbed = request.getfixturevalue(names[0]) if names else None
    yield
    if testbed is not None and request.node.stash.get(FAILED_KEY, False):
        print(testbed.journals())
