"""What a ``collect()`` returns to the client, and how a job result carries it.

Each subtask of a collecting vertex returns its rows as its accumulator (:func:`encode_rows`).
The JobMaster puts the subtasks' accumulators of a vertex into the job result, one blob per
vertex (:func:`pack_accumulators`); the client takes them apart again
(:func:`unpack_accumulators`, :func:`decode_rows`).

Rows travel as JSON, never as pickle: the client must not run code a cluster process (or
something pretending to be one) chose. Values come back as the types PySpark's ``collect()``
gives for them: ``None``, ``bool``, ``int``, ``float`` (also NaN and infinities), ``str``,
``datetime.date``, ``datetime.datetime``, ``decimal.Decimal``, ``bytes`` (for binary
columns), ``list`` for arrays, ``dict`` for maps and ``tuple`` for nested structs (a nested
``Row`` compares equal to it). Any other value arrives as its ``str()``.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
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


def _to_json(value: Any) -> Any:
    """``value`` as plain JSON; the types JSON lacks become one-key objects tagged with ``$``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime.datetime):  # before date: a datetime is a date
        return {"$ts": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"$date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$dec": str(value)}
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, tuple):  # a nested struct (pyspark's Row is a tuple)
        return {"$tuple": [_to_json(v) for v in value]}
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {"$map": [[_to_json(k), _to_json(v)] for k, v in value.items()]}
    return str(value)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise ValueError("a collected value is an object that is not a tagged value")
    [(tag, payload)] = value.items()
    if tag == "$ts":
        return datetime.datetime.fromisoformat(str(payload))
    if tag == "$date":
        return datetime.date.fromisoformat(str(payload))
    if tag == "$dec":
        return decimal.Decimal(str(payload))
    if tag == "$bytes":
        return base64.b64decode(str(payload), validate=True)
    if tag == "$tuple" and isinstance(payload, list):
        return tuple(_from_json(v) for v in payload)
    if tag == "$map" and isinstance(payload, list):
        return {_hashable(_from_json(k)): _from_json(v) for k, v in payload}
    raise ValueError(f"a collected value has the unknown tag {tag[:40]!r}")


def encode_rows(columns: Sequence[str], rows: Sequence[tuple[Any, ...]], truncated: bool) -> bytes:
    document = {
        "columns": [str(c) for c in columns],
        "rows": [[_to_json(v) for v in r] for r in rows],
        "truncated": bool(truncated),
    }
    return json.dumps(document, separators=(",", ":")).encode()


def decode_rows(blob: bytes) -> CollectedRows:
    """The rows of :func:`encode_rows`; ``ValueError`` if ``blob`` is not such a document."""
    raw = json.loads(blob)
    if not isinstance(raw, dict) or not isinstance(raw.get("rows"), list):
        raise ValueError("collected rows are not a sparkmill rows document")
    columns = raw.get("columns")
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise ValueError("collected rows have no list of column names")
    rows = []
    for row in raw["rows"]:
        if not isinstance(row, list):
            raise ValueError("a collected row is not a list")
        rows.append(tuple(_from_json(v) for v in row))
    return CollectedRows(tuple(columns), tuple(rows), bool(raw.get("truncated", False)))


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
