"""Shared pytest wiring: service logs are printed when a test that used a cluster fails."""

from __future__ import annotations

from collections.abc import Generator

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.stash[FAILED_KEY] = report.failed


FAILED_KEY = pytest.StashKey[bool]()
