"""A two-source PySpark pipeline whose second source waits for the test: a window in which the
first stage has finished and nothing has read its results yet.

    stage-a: range(3000), 4 subtasks, k = id % 7 ─┐ hash
                                                  ├─ join on k ─ key_by(k).agg ─ Parquet
    stage-b: range(7), 1 subtask, HOLDS ─────────┘ hash

Both stages leave a marker file per run (on the task executor, in the driver thread), so a test
counts how many times each really ran, across attempts and across JobMasters. stage-b's first
run blocks until the test creates the ``release`` file (later runs do not wait): the test kills,
deletes or checks what it wants while stage-a's results sit in ``exchange.dir`` unread.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sparkmill as sm
from sparkmill import functions as F
from sparkmill.common.v1 import jobs_pb2

A_PARALLELISM = 4
ROWS = 3000
KEYS = 7
HOLD_LIMIT_S = 300.0


def _marking(markers: Path, stage: str) -> Callable[[Any], Any]:
    def mark(df: Any) -> Any:
        markers.mkdir(parents=True, exist_ok=True)
        (markers / f"{stage}-{uuid.uuid4().hex}").touch()
        return df

    return mark


def _holding(markers: Path, release: Path, stage: str = "b") -> Callable[[Any], Any]:
    def hold(df: Any) -> Any:
        markers.mkdir(parents=True, exist_ok=True)
        (markers / f"{stage}-{uuid.uuid4().hex}").touch()
        first = markers / f"{stage}-held"
        if not first.exists():
            first.touch()
            deadline = time.monotonic() + HOLD_LIMIT_S
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        return df

    return hold


def held_pipeline(
    name: str, out: Path, markers: Path, release: Path, config: dict[str, str] | None = None
) -> sm.Pipeline:
    pipeline = sm.Pipeline(name, parallelism=2, config=config)
    a = (
        pipeline.range(ROWS)
        .set_parallelism(A_PARALLELISM)
        .transform(_marking(markers, "a"), name="stage-a")
        .set_parallelism(A_PARALLELISM)
        .with_column("k", F.col("id") % KEYS)
        .set_parallelism(A_PARALLELISM)
    )
    b = (
        pipeline.range(KEYS)
        .set_parallelism(1)
        .transform(_holding(markers, release), name="stage-b")
        .set_parallelism(1)
        .with_column_renamed("id", "k")
        .set_parallelism(1)
    )
    (
        a.join(b, on="k")
        .key_by("k")
        .agg(F.count("*").alias("n"), F.sum("id").alias("total"))
        .write_parquet(str(out))
    )
    return pipeline


def _unchanged(df: Any) -> Any:
    return df


def decided_pipeline(name: str, out: Path, markers: Path, release: Path) -> sm.Pipeline:
    """No parallelism set: the source gets the default (its size is unknown), the rest is
    decided from what their inputs wrote, once they have finished.

        range(3000), 3 subtasks ─ hash ─ agg by k, stage-x ─ rebalance ─ stage-y HOLDS
            ─ forward ─ fixed (1 subtask) ─ Parquet

    stage-y's first run holds as stage-b's does: stage-x is decided and finished by then.
    The output is :func:`expected_rows`'."""
    auto = "execution.batch.adaptive.auto-parallelism."
    config = {
        auto + "default-source-parallelism": "3",
        auto + "max-parallelism": "3",
        auto + "avg-data-volume-per-task": "4kb",
    }
    pipeline = sm.Pipeline(name, config=config)
    (
        pipeline.range(ROWS)
        .with_column("k", F.col("id") % KEYS)
        .key_by("k")
        .agg(F.count("*").alias("n"), F.sum("id").alias("total"))
        .transform(_marking(markers, "x"), name="stage-x")
        .rebalance()
        .transform(_holding(markers, release, "y"), name="stage-y")
        .transform(_unchanged, name="fixed")
        .set_parallelism(1)  # fixed, forward-fed by a vertex decided late
        .write_parquet(str(out))
    )
    return pipeline


def expected_rows() -> list[tuple[int, int, int]]:
    groups: dict[int, list[int]] = {}
    for i in range(ROWS):
        groups.setdefault(i % KEYS, []).append(i)
    return sorted((k, len(v), sum(v)) for k, v in groups.items())


def output_rows(out: Path) -> list[tuple[int, int, int]]:
    from tests.integration.conftest import reference_session

    spark = reference_session()
    return sorted((r["k"], r["n"], r["total"]) for r in spark.read.parquet(str(out)).collect())


def runs(markers: Path, stage: str) -> int:
    """How many times ``stage`` ran (``a``, ``b``, ``x`` or ``y``)."""
    return sum(1 for p in markers.glob(f"{stage}-*") if p.name != f"{stage}-held")


def vertex(details: jobs_pb2.JobDetails, label: str) -> jobs_pb2.VertexDetails:
    found = [v for v in details.vertices if label in v.name]
    assert len(found) == 1, [v.name for v in details.vertices]
    return found[0]


def held(details: jobs_pb2.JobDetails) -> bool:
    """stage-a finished everywhere and stage-b is running (held)."""
    from sparkmill.common.v1 import common_pb2

    a, b = vertex(details, "stage-a"), vertex(details, "stage-b")
    return (
        a.tasks_by_state.get(common_pb2.EXECUTION_FINISHED, 0) == A_PARALLELISM
        and b.tasks_by_state.get(common_pb2.EXECUTION_RUNNING, 0) == 1
    )
