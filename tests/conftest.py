"""Shared pytest wiring: the test tiers, and service logs printed when a test that used a
cluster fails.

Every test belongs to exactly one tier, named by the directory under ``tests/`` it lives in:

* ``unit``: hand-written fakes, no process, no Spark (``./scripts/test.sh --fast`` runs these);
* ``integration``: real service processes on loopback, real ZooKeeper, real Spark;
* ``deploy``: the systemd units and the Ansible role checked for real (``scripts/check_deploy.sh``);
* ``testbed``: the playbook converged onto Debian hosts under systemd-nspawn, HA across hosts.

The marker is applied here, by directory, so a new file cannot forget it; a test outside these
directories, or one that marks itself with another tier, stops the collection with an error.
The tiers run in that order, cheapest first: a broken unit test shows in the first minute of a
whole run, not after the half hour of the heavier tiers. Two slow preparations start in the
background at collection when their tier runs with others: the deploy tier's check
(``tests/deploy/check_run.py``, one core for two minutes, beside the unit tier that mostly waits
on timers) and the test bed's Debian root and wheelhouse (``tests/testbed/conftest.py``).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

# Every Spark JVM the tests start (the reference sessions, the task executors of local clusters,
# `sparkmill run`; the variable is inherited) runs jobs of a few rows and lives for seconds to
# minutes: the C1 compiler alone, one compiler thread and the serial collector halve the CPU a
# JVM's start and first jobs take (about 18 s -> 9 s on 2 cores), which the suite, bound by the
# machine's two cores, gets back as time. Production keeps the JVM's defaults: its JVMs are long
# lived, and C2's compiled code pays off. Set SPARK_SUBMIT_OPTS to run the tests with others.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)

TIERS = ("unit", "integration", "deploy", "testbed")
TESTS_DIR = Path(__file__).resolve().parent


def tier_of(path: Path) -> str | None:
    """The tier of a test file: the directory right under ``tests/`` it lives in, if a tier."""
    try:
        parts = path.resolve().relative_to(TESTS_DIR).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems: list[str] = []
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            problems.append(f"{item.nodeid}: outside every tier (tests/{{{','.join(TIERS)}}}/)")
            continue
        item.add_marker(getattr(pytest.mark, tier))
        marked = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        if marked != {tier}:
            others = ", ".join(sorted(marked - {tier}))
            problems.append(f"{item.nodeid}: in the {tier} tier but also marked {others}")
    if problems:
        raise pytest.UsageError("tests without exactly one tier:\n  " + "\n  ".join(problems))
    # A stable sort: within a tier the order stays the files' (module fixtures stay together).
    items.sort(key=lambda item: TIERS.index(tier_of(item.path) or TIERS[0]))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.stash[FAILED_KEY] = report.failed


FAILED_KEY = pytest.StashKey[bool]()
