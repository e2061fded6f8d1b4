"""The test bed's HA pipeline: a word count and a join, with exact answers known in advance.

    HA_INPUT=GLOB HA_OUTPUT=DIR [HA_HOLD=DIR] sparkmill --config ... submit ha_pipeline.py

    text files ─ explode words ─ key_by(word).agg(count) ─┬─ JSON  DIR/counts   (word, count)
                                                          └─ join on word ─ JSON DIR/joined
    vocabulary (word, length) ─ [holds] ─────────────────────┘          (word, count, length)

With ``HA_HOLD`` set, the vocabulary's subtask waits on its first run until the file
``HA_HOLD/release`` exists (later runs do not wait; at most HOLD_LIMIT_S): a test injects its
fault while the word count is done or under way and the join has not run, then releases. Every
run of that subtask leaves a marker file in ``HA_HOLD`` so a test can count them. With
``HA_HOLD_PARALLELISM=N`` the vocabulary has N subtasks, and the first run of each holds (each
claims one of the markers ``held``, ``held-1``, ... ``held-{N-1}``): N subtasks in N slots, so
some hold on a host the test chooses by where they run.

The outputs are JSON lines so the controller checks them with plain Python against
:func:`tests.testbed.ha_data.expected` (no Spark on the checking side).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import sparkmill as sm
from sparkmill import functions as F

HOLD_LIMIT_S = 300.0
# The words of the generated input (tests.testbed.ha_data.VOCABULARY), with their lengths.
VOCABULARY = os.environ["HA_VOCABULARY"].split()
HOLD = os.environ.get("HA_HOLD", "")
HOLD_PARALLELISM = int(os.environ.get("HA_HOLD_PARALLELISM", "1"))


def _held_marker(index: int) -> str:
    return "held" if index == 0 else f"held-{index}"


def _claim_first_run(markers: Path, holders: int) -> bool:
    """Whether this run is one of the ``holders`` first runs (it created a marker of its own)."""
    for index in range(holders):
        try:
            (markers / _held_marker(index)).touch(exist_ok=False)
        except FileExistsError:
            continue
        return True
    return False


def _holding(directory: str, holders: int) -> Any:
    def hold(df: Any) -> Any:
        markers = Path(directory)
        markers.mkdir(parents=True, exist_ok=True)
        (markers / f"run-{uuid.uuid4().hex}").touch()
        release = markers / "release"
        if _claim_first_run(markers, holders):
            deadline = time.monotonic() + HOLD_LIMIT_S
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        return df

    return hold


# HA_PARALLELISM "auto": the cluster decides every parallelism from the input's size, with
# HA_AUTO_VOLUME bytes per subtask (the bed's input is small: this spreads it over a few), and
# runs speculative attempts of subtasks slower than 2 s and 1.5 times the median of their
# vertex's finished half (a paused host's are): the faults then race attempts, block executors
# and take over jobs with speculative attempts in flight.
AUTO = os.environ.get("HA_PARALLELISM", "2") == "auto"
pipeline = sm.Pipeline(
    os.environ.get("HA_NAME", "ha-wordcount-join"),
    parallelism=None if AUTO else int(os.environ.get("HA_PARALLELISM", "2")),
    config=(
        {
            "execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task": os.environ[
                "HA_AUTO_VOLUME"
            ],
            "execution.batch.speculative.enabled": "true",
            "slow-task-detector.execution-time.baseline-lower-bound": "2 s",
            # Three subtasks a vertex: the third may be found slow once two have finished.
            "slow-task-detector.execution-time.baseline-ratio": "0.5",
            "slow-task-detector.check-interval": "500 ms",
            "execution.batch.speculative.block-slow-node-duration": "20 s",
        }
        if AUTO
        else None
    ),
)
counts = (
    pipeline.read_text(os.environ["HA_INPUT"])
    .select(F.explode(F.split(F.lower("value"), r"\s+")).alias("word"))
    .where(F.col("word") != "")
    .key_by("word")
    .agg(F.count("*").alias("count"))
)
counts.write_json(os.environ["HA_OUTPUT"] + "/counts", mode="error")
lengths = pipeline.from_rows([(w, len(w)) for w in VOCABULARY], schema="word string, length int")
if HOLD:
    lengths = (
        lengths.set_parallelism(HOLD_PARALLELISM)
        .transform(_holding(HOLD, HOLD_PARALLELISM), name="hold")
        .set_parallelism(HOLD_PARALLELISM)
    )
counts.join(lengths, on="word").write_json(os.environ["HA_OUTPUT"] + "/joined", mode="error")
