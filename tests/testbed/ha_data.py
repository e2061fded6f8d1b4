"""The input of the HA pipeline (tests/testbed/ha_pipeline.py), its exact answer computed with
plain Python, and the comparison of a job's output with it.

The answer is computed independently of Spark and of sparkmill: a split on ASCII whitespace of
the lower-cased lines (the input has only spaces and newlines between words), counted with a
Counter. Outputs are JSON lines (the pipeline's sinks), read without Spark.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VOCABULARY = " ".join(
    [
        "the quick brown fox jumps over a lazy dog while slot based runtimes schedule every",
        "subtask of a pipeline onto task executors and spark processes each record blocking",
        "partitions hand data between stages restarts never duplicate output déjà vu naïve café",
        "straße øresund 東京 données Leader Standby Quorum",
    ]
).split()
WORDS = sorted(set(VOCABULARY))


def write_input(directory: Path, files: int = 4, lines: int = 300, seed: int = 13) -> str:
    """Text files with every vocabulary word at least once (so the join keeps them all); a
    glob. Written once: a later call with the files in place changes nothing."""
    if not any(directory.glob("*.txt")):
        directory.mkdir(parents=True, exist_ok=True)
        rng = random.Random(seed)
        for index in range(files):
            text = [" ".join(WORDS)] if index == 0 else []
            text += [" ".join(rng.choices(WORDS, k=rng.randint(0, 12))) for _ in range(lines)]
            scratch = directory / f".part-{index:02d}.txt.tmp"
            scratch.write_text("\n".join(text) + "\n", encoding="utf-8")
            scratch.rename(directory / f"part-{index:02d}.txt")
    return str(directory / "*.txt")


def expected(directory: Path) -> dict[str, list[tuple[Any, ...]]]:
    """The exact rows of each output, sorted: counts (word, count), joined (word, count, length)."""
    counts: Counter[str] = Counter()
    for path in sorted(directory.glob("*.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            counts.update(w for w in line.lower().split(" ") if w)
    lengths = {w.lower(): len(w) for w in WORDS}
    return {
        "counts": sorted(counts.items()),
        "joined": sorted((w, n, lengths[w]) for w, n in counts.items() if w in lengths),
    }


def read_rows(output: Path) -> dict[str, list[tuple[Any, ...]]]:
    """The committed rows of a job's outputs (what a reader sees: no _temporary, no hidden)."""
    columns = {"counts": ("word", "count"), "joined": ("word", "count", "length")}
    result: dict[str, list[tuple[Any, ...]]] = {}
    for name, names in columns.items():
        rows: list[tuple[Any, ...]] = []
        for path in sorted((output / name).glob("part-*")):
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    record = json.loads(line)
                    rows.append(tuple(record.get(c) for c in names))
        result[name] = sorted(rows, key=repr)
    return result


@dataclass(frozen=True)
class Check:
    """How a job's output differs from the answer (all zero and committed: exact)."""

    committed: bool  # both outputs have _SUCCESS
    rows: int
    wrong: int  # rows that are not in the answer, or missing from the output
    duplicated: int  # rows that are in the answer but appear more than once

    @property
    def exact(self) -> bool:
        return self.committed and self.wrong == 0 and self.duplicated == 0


def check(output: Path, answer: dict[str, list[tuple[Any, ...]]]) -> Check:
    got = read_rows(output)
    committed = all((output / name / "_SUCCESS").exists() for name in answer)
    wrong = duplicated = rows = 0
    for name, want in answer.items():
        have = Counter(got.get(name, []))
        need = Counter(want)
        rows += sum(have.values())
        for row, n in have.items():
            if row not in need:
                wrong += n
            elif n > need[row]:
                duplicated += n - need[row]
        wrong += sum(1 for row in need if row not in have)
    return Check(committed, rows, wrong, duplicated)
