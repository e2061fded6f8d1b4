"""The test bed's HA pipeline: a word count and a join, with exact answers known in advance.

    HA_INPUT=GLOB HA_OUTPUT=DIR [HA_HOLD=DIR] sparkmill --config ... submit ha_pipeline.py

    text files ─ explode words ─ key_by(word).agg(count) ─┬─ JSON  DIR/counts   (word, count)
                                                          └─ join on word ─ JSON DIR/joined
    vocabulary (word, length) ─ [holds] ─────────────────────┘          (word, count, length)

With ``HA_HOLD`` set, the vocabulary's subtask waits on its first run until the file
``HA_HOLD/release`` exists (later runs do not wait; at most HOLD_LIMIT_S): a test injects its
fault while the word count is done or under way and the join has not run, then releases. Every
run of that subtask leaves a marker file in ``HA_HOLD`` so a test can count them.

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


def _holding(directory: str) -> Any:
    def hold(df: Any) -> Any:
        markers = Path(directory)
        markers.mkdir(parents=True, exist_ok=True)
        (markers / f"run-{uuid.uuid4().hex}").touch()
        first, release = markers / "held", markers / "release"
        if not first.exists():
            first.touch()
            deadline = time.monotonic() + HOLD_LIMIT_S
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        return df

    return hold


pipeline = sm.Pipeline(os.environ.get("HA_NAME", "ha-wordcount-join"), parallelism=2)
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
    lengths = lengths.set_parallelism(1).transform(_holding(HOLD), name="hold").set_parallelism(1)
counts.join(lengths, on="word").write_json(os.environ["HA_OUTPUT"] + "/joined", mode="error")
