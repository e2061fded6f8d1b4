"""The test bed's elastic pipeline: more subtasks than the fixed task executors have slots, all
running at once, each held until the test releases them.

    ELASTIC_OUTPUT=DIR ELASTIC_HOLD=DIR ELASTIC_PARALLELISM=N ELASTIC_ROWS=R sparkmill submit ...

    range(R) ─ [each subtask holds] ─ twice = id * 2 ─ JSON DIR   (id, twice)

Every subtask leaves a marker file in ``ELASTIC_HOLD`` and waits (at most HOLD_LIMIT_S) until
``ELASTIC_HOLD/release`` exists: N markers mean N slots in use at once, and the test injects its
fault while they hold. The output is JSON lines, checked with plain Python on the controller.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import sparkmill as sm

HOLD_LIMIT_S = 420.0
HOLD = os.environ["ELASTIC_HOLD"]


def _hold(df: Any) -> Any:
    markers = Path(HOLD)
    markers.mkdir(parents=True, exist_ok=True)
    (markers / f"run-{uuid.uuid4().hex}").touch()
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not (markers / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return df


pipeline = sm.Pipeline("elastic-grow", parallelism=int(os.environ["ELASTIC_PARALLELISM"]))
(
    pipeline.range(int(os.environ["ELASTIC_ROWS"]))
    .transform(_hold, name="hold")
    .transform(lambda df: df.withColumn("twice", df.id * 2), name="double")
    .write_json(os.environ["ELASTIC_OUTPUT"], mode="error")
)
