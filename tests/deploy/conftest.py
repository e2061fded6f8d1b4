"""The deploy tier's check (``scripts/check_deploy.sh``) starts in the background as soon as the
session knows it will run together with cheaper tiers (see ``tests/deploy/check_run.py``)."""

from __future__ import annotations

import pytest

from tests.conftest import tier_of
from tests.deploy import check_run


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    tiers = {tier_of(item.path) for item in session.items}
    if "deploy" in tiers and len(tiers) > 1:
        check_run.start_in_background()


def pytest_sessionfinish(session: pytest.Session) -> None:
    check_run.stop()
