"""What a ``collect()`` returns to the client, and how a job result carries it.

Each subtask of a collecting vertex returns its rows as its accumulator (:func:`encode_rows`).
The JobMaster puts the subtasks' accumulators of a vertex into the job result, one blob per
vertex (:func:`pack_accumulators`); the client takes them apart again
(:func:`unpack_accumulators`, :func:`decode_rows`).
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_LENGTH_BYTES = 4


@dataclass(frozen=True, slots=True)
class CollectedRows:
    """One subtask's share of a ``collect()``."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool  # the subtask had more rows than the collect's limit


def encode_rows(columns: Sequence[str], rows: Sequence[tuple[Any, ...]], truncated: bool) -> bytes:
    return pickle.dumps(
        {"columns": list(columns), "rows": [tuple(r) for r in rows], "truncated": truncated},
        protocol=pickle.HIGHEST_PROTOCOL,
    )


def decode_rows(blob: bytes) -> CollectedRows:
    raw = pickle.loads(blob)
    return CollectedRows(
        tuple(raw["columns"]), tuple(tuple(r) for r in raw["rows"]), bool(raw["truncated"])
    )


def pack_accumulators(parts: Mapping[int, bytes]) -> bytes:
    """Subtask results in subtask order, each prefixed by its 4-byte length."""
    return b"".join(len(parts[i]).to_bytes(_LENGTH_BYTES, "big") + parts[i] for i in sorted(parts))


def unpack_accumulators(blob: bytes) -> list[bytes]:
    """The subtask results of :func:`pack_accumulators`, in subtask order."""
    out, offset = [], 0
    while offset < len(blob):
        size = int.from_bytes(blob[offset : offset + _LENGTH_BYTES], "big")
        out.append(blob[offset + _LENGTH_BYTES : offset + _LENGTH_BYTES + size])
        offset += _LENGTH_BYTES + size
    return out
