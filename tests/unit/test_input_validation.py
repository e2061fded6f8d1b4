"""Ids that arrive from outside never become paths outside their base directory."""

from __future__ import annotations

import datetime
import decimal
import os
import pickle
from pathlib import Path

import pytest

from sparkmill.common.core.errors import InvalidArgumentError
from sparkmill.common.exchange import layout
from sparkmill.common.pipeline.collect import decode_rows, encode_rows

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


def test_collected_rows_round_trip_the_types_collect_returns() -> None:
    row = (
        None,
        True,
        7,
        1.5,
        float("inf"),
        "s",
        datetime.date(2024, 2, 29),
        datetime.datetime(2024, 2, 29, 12, 30, 1, 5),
        decimal.Decimal("12.340"),
        b"\x00\xff",
        [1, None],
        {"k": (1, "x")},
        ("nested", 2),
    )
    decoded = decode_rows(encode_rows(["c"] * len(row), [row], truncated=True))
    assert decoded.rows == (row,)
    assert decoded.truncated
    assert [type(v) for v in decoded.rows[0]] == [type(v) for v in row]


class _Exploit:
    """Unpickling this creates the directory ``marker``: code run by whoever made the blob."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.marker),))


def test_a_pickle_as_collected_rows_is_refused_and_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    blob = pickle.dumps({"columns": ["a"], "rows": [(_Exploit(marker),)], "truncated": False})
    with pytest.raises(ValueError):
        decode_rows(blob)
    assert not marker.exists()
