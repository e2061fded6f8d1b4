"""Word count: read text files, count every word, write Parquet, show the most frequent words.

    sparkmill run examples/wordcount.py
    sparkmill run examples/wordcount.py -- --input 'books/*.txt' --output counts/

Sample text is generated on the first run (SPARKMILL_EXAMPLES_DIR moves it). The parameters
come after ``--`` and are read with argparse like any script's; relative paths are relative to
the directory the command runs in. (WORDCOUNT_INPUT and WORDCOUNT_OUTPUT still work as
defaults.)
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import sparkmill as sm
from sparkmill import functions as F

BASE = Path(os.environ.get("SPARKMILL_EXAMPLES_DIR") or Path(tempfile.gettempdir()) / "sparkmill")


def shared_scratch(directory: Path) -> Path:
    """The examples' scratch directory, made like /tmp (sticky, writable by all): a cluster's
    pipeline code runs as its own user (sparkmill-pipeline), which writes the output here."""
    directory.mkdir(parents=True, exist_ok=True)
    if directory.stat().st_uid == os.geteuid() and os.environ.get("SPARKMILL_EXAMPLES_DIR") is None:
        directory.chmod(0o1777)
    return directory


shared_scratch(BASE)

VOCABULARY = (
    "the quick brown fox jumps over a lazy dog while slot based runtimes schedule "
    "every subtask of a pipeline onto task executors and spark processes each record "
    "blocking partitions hand data between stages restarts never duplicate output "
    "déjà vu naïve café straße øresund 東京 données"
)
WORDS = VOCABULARY.split()


def sample_text(directory: Path, files: int = 6, lines: int = 400, seed: int = 3) -> str:
    """Generate a few text files (once) with a skewed word distribution; returns a glob."""
    if not any(directory.glob("*.txt")):
        directory.mkdir(parents=True, exist_ok=True)
        rng = random.Random(seed)
        weights = [1.0 / (rank + 1) for rank in range(len(WORDS))]  # Zipf-like
        for index in range(files):
            text = "\n".join(
                " ".join(rng.choices(WORDS, weights, k=rng.randint(0, 14))) for _ in range(lines)
            )
            scratch = directory / f".part-{index:02d}.txt.tmp"
            scratch.write_text(text + "\n", encoding="utf-8")
            scratch.rename(directory / f"part-{index:02d}.txt")
    return str(directory / "*.txt")


def top_words(df: Any, n: int = 10) -> Any:
    """Runs on the task executors with a real DataFrame."""
    return df.orderBy(F.desc("count"), "word").limit(n)


parser = argparse.ArgumentParser(prog="wordcount", description="Count the words of text files.")
parser.add_argument(
    "--input",
    default=os.environ.get("WORDCOUNT_INPUT"),
    help="text files (a glob or directory; default: generated sample text)",
)
parser.add_argument(
    "--output",
    default=os.environ.get("WORDCOUNT_OUTPUT") or str(BASE / "wordcount-output"),
    help="where the counts are written as Parquet (replaced)",
)
parser.add_argument(
    "--parallelism",
    type=int,
    default=None,
    help="subtasks per operator (default: the cluster decides from the input's size)",
)
args = parser.parse_args()
source = args.input or sample_text(BASE / "wordcount-input")

pipeline = sm.Pipeline("wordcount", parallelism=args.parallelism)
counts = (
    pipeline.read_text(source)
    .select(F.explode(F.split(F.lower("value"), r"\s+")).alias("word"))
    .where(F.col("word") != "")
    .key_by("word")
    .agg(F.count("*").alias("count"))
)
counts.write_parquet(args.output, mode="overwrite")
# The ten most frequent words: ten per subtask first, then the ten of those in one subtask.
(
    counts.transform(top_words, name="top 10 per subtask")
    .transform(top_words, name="top 10")
    .set_parallelism(1)
    .collect(name="most frequent words")
)
