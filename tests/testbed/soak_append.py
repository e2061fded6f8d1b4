"""The soak's appending job: each submission appends one "day" to a partitioned table on the
share, ``ROWS`` rows with ids ``0..ROWS-1``, as JSON lines (checked without Spark).

Exactly once, at the end: the partition of every FINISHED job holds each id exactly once, and
no other job's partition holds any file (a failed job commits nothing).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import sparkmill as sm
from sparkmill import functions as F
from sparkmill.client import ClusterClient
from tests.testbed.bed import TestBed

ROWS = 5000


@dataclass(frozen=True)
class AppendCheck:
    rows: int = 0
    wrong: int = 0
    duplicated: int = 0


def table_dir(bed: TestBed) -> Path:
    return bed.shared / "work" / "soak-append" / "events"


def submit_append(client: ClusterClient, bed: TestBed, name: str, day: int) -> str:
    pipeline = sm.Pipeline(f"soak-append-{name}", parallelism=3)
    (
        pipeline.range(ROWS)
        .with_column("day", F.lit(day))
        .write_json(str(table_dir(bed)), mode="append", partition_by=["day"])
    )
    return client.submit(pipeline.build_job_graph(), timeout=120)


def _ids(partition: Path) -> Counter[int]:
    ids: Counter[int] = Counter()
    for path in partition.glob("part-*"):
        for line in path.read_text().splitlines():
            if line.strip():
                ids[int(json.loads(line)["id"])] += 1
    return ids


def check_append(bed: TestBed, finished: dict[str, int], others: dict[str, int]) -> AppendCheck:
    """``finished``/``others``: job id -> day of the FINISHED / not finished appending jobs."""
    table = table_dir(bed)
    rows = wrong = duplicated = 0
    for day in finished.values():
        ids = _ids(table / f"day={day}")
        rows += sum(ids.values())
        wrong += sum(1 for i in range(ROWS) if ids[i] == 0) + sum(
            n for i, n in ids.items() if not 0 <= i < ROWS
        )
        duplicated += sum(n - 1 for i, n in ids.items() if n > 1)
    for day in others.values():
        wrong += sum(_ids(table / f"day={day}").values())
    return AppendCheck(rows, wrong, duplicated)


def next_day() -> int:
    """A day number no other submission of this bed used (the table lives across runs)."""
    time.sleep(0.001)
    return int(time.time() * 1000)
