"""Ids that arrive from outside never become paths outside their base directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkmill.common.errors import InvalidArgumentError
from sparkmill.common.exchange import layout

HOSTILE_IDS = ["/", "/tmp/victim", "..", "../x", "job-1", "A" * 32, "0" * 31, ""]


@pytest.mark.parametrize("job_id", HOSTILE_IDS)
def test_exchange_and_sink_paths_refuse_ids_that_are_not_ids(tmp_path: Path, job_id: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not 32 lowercase hex"):
        layout.job_exchange_dir(str(tmp_path), job_id)
    with pytest.raises(InvalidArgumentError, match="not 32 lowercase hex"):
        layout.sink_temporary_dir(str(tmp_path / "out"), job_id)


def test_cleanup_with_a_path_as_job_id_deletes_nothing(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    layout.cleanup_job(str(tmp_path / "exchange"), str(victim))
    layout.cleanup_job(str(tmp_path / "exchange"), "../victim")
    assert (victim / "keep").is_dir()
