"""Configuration value kinds: how a raw YAML value becomes a typed one, and back to text.

* durations (``"500 ms"``, ``"10 s"``, ``"2 min"``, ``"1 h"``, ``"2 d"``) become float seconds;
  a bare number is milliseconds, as in Flink (a few options say otherwise, e.g. seconds);
* memory sizes (``"512m"``, ``"1 gb"``, ``"1024 kb"``) become int **bytes**; binary units, a
  bare number is bytes, as in Flink;
* addresses (``"host:port"`` or ``"tcp://host:port"``, port 0 = any free port) become the
  canonical ``"tcp://host:port"`` string.

A kind raises :class:`ValueError` with the message only; the option that uses it adds the key
(see :mod:`sparkmill.common.config.schema`).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Generic, TypeVar

T = TypeVar("T")


class Kind(Generic[T]):
    """How one type of value is parsed from YAML/strings and written back canonically.

    :meth:`parse` raises :class:`ValueError` whose text completes the sentence
    ``"<value> ..."``, e.g. ``"is not a duration (examples: ...)"``.
    """

    name: str = "value"
    numeric: bool = False
    """Values are numbers (seconds, bytes, ...) that ``min``/``max`` bounds compare against."""

    def parse(self, raw: object) -> T:
        raise NotImplementedError

    def format(self, value: T) -> str:
        return str(value)


def as_text(raw: object) -> str | None:
    """A scalar as text (YAML booleans as ``true``/``false``); None for non-scalars."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, str | int | float):
        return str(raw)
    return None


_INT_RE = re.compile(r"[+-]?\d+", re.ASCII)


class IntKind(Kind[int]):
    name = "int"
    numeric = True

    def parse(self, raw: object) -> int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and _INT_RE.fullmatch(raw.strip()):
            return int(raw.strip())
        raise ValueError("is not an integer")

    def format(self, value: int) -> str:
        return str(int(value))


class FloatKind(Kind[float]):
    name = "float"
    numeric = True

    def parse(self, raw: object) -> float:
        value: float | None = None
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            value = float(raw)
        elif isinstance(raw, str):
            try:
                value = float(raw.strip())
            except ValueError:
                value = None
        if value is None or not math.isfinite(value):
            raise ValueError("is not a number (examples: '2', '0.5', '1.5')")
        return value

    def format(self, value: float) -> str:
        return repr(float(value))


_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})


class BoolKind(Kind[bool]):
    name = "bool"

    def parse(self, raw: object) -> bool:
        if isinstance(raw, bool):
            return raw
        text = as_text(raw)
        if text is not None and text.strip().lower() in _TRUE:
            return True
        if text is not None and text.strip().lower() in _FALSE:
            return False
        raise ValueError("is not a boolean (expected true/false, yes/no or 1/0)")

    def format(self, value: bool) -> str:
        return "true" if value else "false"


class StringKind(Kind[str]):
    """Any scalar, kept as text. Options with ``choices`` show up as ``enum`` in the docs."""

    name = "string"

    def parse(self, raw: object) -> str:
        text = as_text(raw)
        if text is None:
            raise ValueError("is not a single value (expected a string)")
        return text


def _scaled(number: str, unit: int) -> int:
    return int((Decimal(number) * unit).to_integral_value())


_DURATION_RE = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*([a-zµ]*)\s*", re.IGNORECASE)
_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "min": 60 * 10**9, "h": 3600 * 10**9}
_NS["d"] = 24 * _NS["h"]
_DURATION_UNITS: dict[str, int] = {
    **dict.fromkeys(("ns", "nano", "nanos", "nanosecond", "nanoseconds"), _NS["ns"]),
    **dict.fromkeys(("us", "µs", "micro", "micros", "microsecond", "microseconds"), _NS["us"]),
    **dict.fromkeys(("ms", "milli", "millis", "millisecond", "milliseconds"), _NS["ms"]),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), _NS["s"]),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), _NS["min"]),
    **dict.fromkeys(("h", "hour", "hours"), _NS["h"]),
    **dict.fromkeys(("d", "day", "days"), _NS["d"]),
}


class DurationKind(Kind[float]):
    """A duration as float **seconds**; a bare number is in ``bare_unit`` (Flink: ms)."""

    numeric = True

    def __init__(self, bare_unit: str = "ms") -> None:
        self.bare_unit = bare_unit
        self.name = "duration" if bare_unit == "ms" else f"duration (bare number = {bare_unit})"

    def parse(self, raw: object) -> float:
        text = None if isinstance(raw, bool) else as_text(raw)
        match = _DURATION_RE.fullmatch(text or "")
        if match is None or match.group(2).lower() not in {*_DURATION_UNITS, ""}:
            raise ValueError("is not a duration (examples: '500 ms', '10 s', '2 min')")
        number, unit = match.group(1), match.group(2).lower() or self.bare_unit
        if number.startswith("-"):
            raise ValueError("is not a duration: durations cannot be negative")
        return _scaled(number, _DURATION_UNITS[unit]) / 1e9

    def format(self, value: float) -> str:
        nanos = round(value * 1e9)
        for label in ("d", "h", "min", "s", "ms", "us"):
            if nanos % _NS[label] == 0 and (nanos or label == "s"):
                return f"{nanos // _NS[label]} {label}"
        return f"{nanos} ns"


_MEMORY_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)
_BYTES = {"bytes": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
_MEMORY_UNITS: dict[str, int] = {
    **dict.fromkeys(("", "b", "byte", "bytes"), _BYTES["bytes"]),
    **dict.fromkeys(("k", "kb", "kib", "kibibyte", "kibibytes"), _BYTES["kb"]),
    **dict.fromkeys(("m", "mb", "mib", "mebibyte", "mebibytes"), _BYTES["mb"]),
    **dict.fromkeys(("g", "gb", "gib", "gibibyte", "gibibytes"), _BYTES["gb"]),
    **dict.fromkeys(("t", "tb", "tib", "tebibyte", "tebibytes"), _BYTES["tb"]),
}


class MemoryKind(Kind[int]):
    """A memory size as int **bytes**; binary units (``1k`` = 1024); a bare number is bytes."""

    name = "memory size"
    numeric = True

    def parse(self, raw: object) -> int:
        text = None if isinstance(raw, bool | float) else as_text(raw)
        match = _MEMORY_RE.fullmatch(text or "")
        if match is None or match.group(2).lower() not in _MEMORY_UNITS:
            raise ValueError(
                "is not a memory size (examples: '512 mb', '1g', '1024 kb'; a bare number is bytes)"
            )
        return _scaled(match.group(1), _MEMORY_UNITS[match.group(2).lower()])

    def format(self, value: int) -> str:
        value = int(value)
        for label in ("tb", "gb", "mb", "kb"):
            if value and value % _BYTES[label] == 0:
                return f"{value // _BYTES[label]} {label}"
        return f"{value} bytes"


_ADDRESS_RE = re.compile(r"(?:tcp://)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.*-]+):(\d{1,5})", re.ASCII)


class AddressKind(Kind[str]):
    """``host:port`` or ``tcp://host:port`` (port 0 = any free port) as ``tcp://host:port``."""

    name = "address"

    def parse(self, raw: object) -> str:
        text = raw.strip() if isinstance(raw, str) else ""
        match = _ADDRESS_RE.fullmatch(text)
        if match is None or int(match.group(2)) > 65535:
            raise ValueError(
                "is not an address (expected 'host:port' or 'tcp://host:port', port 0-65535)"
            )
        return f"tcp://{match.group(1)}:{int(match.group(2))}"


_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}", re.ASCII)


class UserNameKind(Kind[str]):
    """A local system user's name (as ``useradd`` accepts it)."""

    name = "user"

    def parse(self, raw: object) -> str:
        text = raw.strip() if isinstance(raw, str) else ""
        if _USER_RE.fullmatch(text) is None:
            raise ValueError(
                "is not a user name (lower-case letters, digits, '_' and '-', at most 32, "
                "not starting with a digit or '-')"
            )
        return text


INT: Kind[int] = IntKind()
FLOAT: Kind[float] = FloatKind()
BOOL: Kind[bool] = BoolKind()
STRING: Kind[str] = StringKind()
DURATION: Kind[float] = DurationKind("ms")
DURATION_SECONDS: Kind[float] = DurationKind("s")
MEMORY: Kind[int] = MemoryKind()
ADDRESS: Kind[str] = AddressKind()
USER_NAME: Kind[str] = UserNameKind()


def port_range(text: str) -> tuple[int, int]:
    """``'8081'`` -> (8081, 8081), ``'50100-50200'`` -> (50100, 50200); ValueError otherwise."""
    low, dash, high = text.strip().partition("-")
    if not low.strip().isdigit() or (dash and not high.strip().isdigit()):
        raise ValueError(
            f"{text!r} is not a port or a port range (examples: '8081', '0', '50100-50200')"
        )
    first, last = int(low), int(high) if dash else int(low)
    if last > 65535 or first > last or (first == 0 and last != 0):
        raise ValueError(f"{text!r} is not a port range within 1-65535 (or 0 for a free port)")
    return first, last
