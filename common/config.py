"""Cluster configuration: typed options, value parsers and the immutable :class:`Configuration`.

A cluster is configured by one YAML file of flat, dotted keys (``taskmanager.numberOfTaskSlots:
4``); nested mappings are accepted too and flatten with dots, so ``heartbeat: {interval: 5 s}``
is the same as ``heartbeat.interval: 5 s``. Every key must be declared (see
:mod:`common.config_options`, the one place where options live) or start with a free-form
prefix such as ``spark.conf.``. Values are validated when the file is loaded, so a service that
starts has a configuration it can trust::

    conf = Configuration.load("conf/sparkmill.yaml")
    slots = conf.get(config_options.TASK_MANAGER_NUM_TASK_SLOTS)  # -> int
    job_conf = conf.with_overrides(job_config, job_scope=True)     # job-scoped keys only

Value syntax (see :class:`Kind` and its instances):

* durations (``"500 ms"``, ``"10 s"``, ``"2 min"``, ``"1 h"``, ``"2 d"``) become float seconds;
  a bare number is milliseconds, as in Flink (a few options say otherwise, e.g. seconds);
* memory sizes (``"512m"``, ``"1 gb"``, ``"1024 kb"``) become int **bytes**; binary units, a
  bare number is bytes, as in Flink;
* addresses (``"host:port"`` or ``"tcp://host:port"``, port 0 = any free port) become the
  canonical ``"tcp://host:port"`` string.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Generic, Self, TypeVar, cast

import yaml

from sparkmill.common.errors import ConfigurationError

T = TypeVar("T")

FILE_KEY = "<file>"
"""The key :class:`ConfigurationError` names for problems with the file as a whole."""


# --------------------------------------------------------------------------------------------
# Value kinds


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


def _text(raw: object) -> str | None:
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
        text = _text(raw)
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
        text = _text(raw)
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
        text = None if isinstance(raw, bool) else _text(raw)
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
        text = None if isinstance(raw, bool | float) else _text(raw)
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


INT: Kind[int] = IntKind()
FLOAT: Kind[float] = FloatKind()
BOOL: Kind[bool] = BoolKind()
STRING: Kind[str] = StringKind()
DURATION: Kind[float] = DurationKind("ms")
DURATION_SECONDS: Kind[float] = DurationKind("s")
MEMORY: Kind[int] = MemoryKind()
ADDRESS: Kind[str] = AddressKind()


# --------------------------------------------------------------------------------------------
# Options and the registry


@dataclass(frozen=True, slots=True)
class ConfigOption(Generic[T]):
    """One configuration key: its type, default, bounds and whether a job may override it.

    ``choices`` restricts the parsed value (strings match case-insensitively and come back in
    the declared spelling); ``aliases`` maps extra accepted spellings to a choice. ``min`` and
    ``max`` are inclusive and compare against numeric values (seconds, bytes, ...).
    ``default_text`` replaces the default in the docs when it depends on the machine.
    """

    key: str
    kind: Kind[T]
    default: T
    description: str
    job_overridable: bool = False
    choices: tuple[T, ...] | None = None
    aliases: tuple[tuple[str, T], ...] = ()
    min: float | None = None
    max: float | None = None
    default_text: str = ""

    def parse(self, raw: object) -> T:
        """The validated value of ``raw``; :class:`ConfigurationError` naming the key if bad."""
        try:
            return self.check(raw)
        except ValueError as exc:
            raise ConfigurationError(self.key, str(exc)) from None

    def check(self, raw: object) -> T:
        """Like :meth:`parse`, but raises :class:`ValueError` with the message only."""
        shown = repr(raw)
        if raw is None:
            raise ValueError(f"has no value (remove the key to use the default {self.format()!r})")
        try:
            value = self.kind.parse(raw)
        except ValueError as exc:
            raise ValueError(f"{shown} {exc}") from None
        if self.choices is not None:
            value = self._choose(value, shown)
        if self.kind.numeric:
            number, low, high = cast(float, value), self.min, self.max
            if (low is not None and number < low) or (high is not None and number > high):
                raise ValueError(f"{shown} is out of range: {self.range_text()}")
        return value

    def _choose(self, value: T, shown: str) -> T:
        assert self.choices is not None
        for name, target in (*((c, c) for c in self.choices), *self.aliases):
            same = name == value
            if isinstance(name, str) and isinstance(value, str):
                same = name.lower() == value.lower()
            if same:
                return target
        allowed = ", ".join(self.kind.format(c) for c in self.choices)
        raise ValueError(f"{shown} is not one of: {allowed}")

    def format(self, value: T | None = None) -> str:
        """The canonical string of ``value`` (default: of the default value)."""
        return self.kind.format(self.default if value is None else value)

    def range_text(self) -> str:
        """E.g. ``"must be at least 1"``, for messages and the docs; ``""`` if unbounded."""
        low = None if self.min is None else self.kind.format(cast(T, self.min))
        high = None if self.max is None else self.kind.format(cast(T, self.max))
        if low is not None and high is not None:
            return f"must be between {low} and {high}"
        if low is not None:
            return f"must be at least {low}"
        return "" if high is None else f"must be at most {high}"


@dataclass(frozen=True, slots=True)
class FreeFormPrefix:
    """A key prefix under which any key is accepted, with its value kept as a string."""

    prefix: str
    description: str
    job_overridable: bool = False


@dataclass(frozen=True, slots=True)
class OptionGroup:
    title: str
    description: str
    options: tuple[ConfigOption[Any], ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    """A rule over one or more keys; ``check`` returns ``(key, message)`` when broken."""

    description: str
    check: Callable[[Configuration], tuple[str, str] | None]


class OptionRegistry:
    """All declared options, the free-form prefixes and the cross-key constraints."""

    def __init__(
        self,
        groups: Iterable[OptionGroup],
        prefixes: Iterable[FreeFormPrefix] = (),
        constraints: Iterable[Constraint] = (),
    ) -> None:
        self.groups = tuple(groups)
        self.prefixes = tuple(prefixes)
        self.constraints = tuple(constraints)
        self.options: dict[str, ConfigOption[Any]] = {}
        for group in self.groups:
            for option in group.options:
                if option.key in self.options:
                    raise ValueError(f"option {option.key!r} is declared twice")
                self.options[option.key] = option

    def prefix_of(self, key: str) -> FreeFormPrefix | None:
        return next((p for p in self.prefixes if key.startswith(p.prefix)), None)

    def job_overridable_keys(self) -> list[str]:
        keys = [k for k, option in self.options.items() if option.job_overridable]
        return keys + [f"{p.prefix}*" for p in self.prefixes if p.job_overridable]

    def is_job_overridable(self, key: str) -> bool:
        option = self.options.get(key)
        prefix = self.prefix_of(key)
        return option.job_overridable if option else bool(prefix and prefix.job_overridable)

    def suggest(self, key: str) -> str | None:
        """The known key (or prefixed key) closest to a misspelt ``key``, if any is close."""
        candidates = list(self.options)
        parts = key.split(".")
        for prefix in (p.prefix for p in self.prefixes):
            depth = prefix.count(".")
            head = ".".join(parts[:depth]).lower()
            if len(parts) > depth and _similarity(head, prefix[:-1].lower()) >= 0.75:
                candidates.append(prefix + ".".join(parts[depth:]))  # a misspelt prefix
            elif parts[0] == prefix.split(".")[0]:
                candidates.append(prefix + key)  # a forgotten prefix
        by_lower = {c.lower(): c for c in candidates}
        found = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
        return by_lower[found[0]] if found else None


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _default_registry() -> OptionRegistry:
    from sparkmill.common import config_options  # late: config_options imports this module

    return config_options.REGISTRY


# --------------------------------------------------------------------------------------------
# YAML loading


class _LineMap(dict[str, object]):
    """A YAML mapping that remembers the (1-based) line of each key."""

    lines: dict[str, int]


class _Loader(yaml.SafeLoader):
    """Safe YAML, but duplicate and non-string keys are errors and key lines are kept."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> _LineMap:
    loader.flatten_mapping(node)
    result = _LineMap()
    result.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            problem = f"key {key!r} is not a string (quote it)"
            raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
        if key in result:
            problem = f"key '{key}' appears twice in the same mapping"
            raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
        result[key] = loader.construct_object(value_node, deep=True)
        result.lines[key] = key_node.start_mark.line + 1
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(FILE_KEY, f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(FILE_KEY, f"{path}: cannot read the file: {reason}") from None
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else f"{path}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigurationError(FILE_KEY, f"{where}: invalid YAML: {problem}") from None


def _flatten(mapping: Mapping[str, object], origin: str) -> Iterator[tuple[str, object, str]]:
    """``(dotted key, leaf value, origin)`` for every leaf of a possibly nested mapping."""
    lines = mapping.lines if isinstance(mapping, _LineMap) else {}
    for key, value in mapping.items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigurationError(str(key), f"keys must be non-empty strings ({origin})")
        where = f"{origin}:{lines[key]}" if key in lines else origin
        if isinstance(value, Mapping):
            for sub_key, leaf, leaf_origin in _flatten(value, origin):
                yield f"{key.strip()}.{sub_key}", leaf, leaf_origin
        else:
            yield key.strip(), value, where


# --------------------------------------------------------------------------------------------
# The configuration


class Configuration:
    """An immutable, validated set of configuration values (unset keys have their default)."""

    __slots__ = ("_free", "_origins", "_raw", "_registry", "_source", "_values")

    def __init__(self, *, registry: OptionRegistry | None = None) -> None:
        """An empty configuration: every option has its default."""
        self._registry = registry or _default_registry()
        self._values: dict[str, object] = {}  # declared keys that are set -> parsed value
        self._free: dict[str, str] = {}  # free-form (prefixed) keys that are set
        self._raw: dict[str, str] = {}  # every set key -> the value as written
        self._origins: dict[str, str] = {}  # every set key -> "file:line" / source, or ""
        self._source = ""

    # construction ------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, registry: OptionRegistry | None = None) -> Self:
        """Read and validate a YAML file; every problem is a :class:`ConfigurationError`."""
        file = Path(path)
        data = _read_yaml(file)
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            kind = "a list" if isinstance(data, list) else f"a single value ({data!r})"
            raise ConfigurationError(
                FILE_KEY, f"{file}: the top level must be a mapping of keys to values, not {kind}"
            )
        base = cls(registry=registry)
        return base._merged(_flatten(data, str(file)), job_scope=False, source=str(file))

    @classmethod
    def from_mapping(
        cls,
        mapping: Mapping[str, object],
        source: str = "",
        *,
        registry: OptionRegistry | None = None,
    ) -> Self:
        """Validate a (possibly nested) mapping; ``source`` is named in error messages."""
        base = cls(registry=registry)
        return base._merged(_flatten(mapping, source), job_scope=False, source=source)

    def with_overrides(
        self, mapping: Mapping[str, object], *, job_scope: bool = False, source: str = ""
    ) -> Self:
        """A copy with ``mapping`` applied on top. With ``job_scope`` (a job's own config),
        only job-overridable keys are accepted."""
        return self._merged(_flatten(mapping, source), job_scope=job_scope, source=self._source)

    def _merged(
        self, items: Iterable[tuple[str, object, str]], *, job_scope: bool, source: str
    ) -> Self:
        new = self._copy()
        new._source = source
        seen: set[str] = set()
        for key, raw, origin in items:
            suffix = f" ({origin})" if origin else ""
            if key in seen:
                raise ConfigurationError(key, f"is given twice{suffix}")
            seen.add(key)
            option = new._registry.options.get(key)
            prefix = new._registry.prefix_of(key)
            if option is None and prefix is None:
                hint = new._registry.suggest(key)
                advice = f"did you mean '{hint}'?" if hint else "see docs/configuration.md"
                raise ConfigurationError(key, f"unknown key; {advice}{suffix}")
            if job_scope and not new._registry.is_job_overridable(key):
                allowed = ", ".join(new._registry.job_overridable_keys())
                raise ConfigurationError(
                    key,
                    "is a cluster-wide key that a job cannot override; only job-scoped keys "
                    f"may be overridden: {allowed}{suffix}",
                )
            if option is not None:
                try:
                    new._values[key] = option.check(raw)
                except ValueError as exc:
                    raise ConfigurationError(key, f"{exc}{suffix}") from None
            elif key.endswith("."):
                raise ConfigurationError(key, f"has an empty name after the prefix{suffix}")
            else:
                text = _text(raw)
                if text is None:
                    raise ConfigurationError(key, f"{raw!r} is not a single value{suffix}")
                new._free[key] = text
            new._raw[key] = _text(raw) or ""
            new._origins[key] = origin
        new._check_constraints()
        return new

    def _check_constraints(self) -> None:
        for constraint in self._registry.constraints:
            broken = constraint.check(self)
            if broken is not None:
                key, message = broken
                origin = self._origins.get(key, "")
                raise ConfigurationError(key, f"{message} ({origin})" if origin else message)

    def _copy(self) -> Self:
        new = type(self)(registry=self._registry)
        new._values = dict(self._values)
        new._free = dict(self._free)
        new._raw = dict(self._raw)
        new._origins = dict(self._origins)
        new._source = self._source
        return new

    # access ------------------------------------------------------------------------------

    @property
    def registry(self) -> OptionRegistry:
        return self._registry

    @property
    def source(self) -> str:
        """Where this configuration was read from (file path or the given source), or ``""``."""
        return self._source

    def get(self, option: ConfigOption[T]) -> T:
        """The value of ``option``: the configured one, else its default."""
        if option.key in self._values:
            return cast(T, self._values[option.key])
        return option.default

    def is_set(self, option: ConfigOption[Any] | str) -> bool:
        """Whether the key was given explicitly (rather than defaulted)."""
        key = option if isinstance(option, str) else option.key
        return key in self._raw

    def raw(self, key: str) -> str | None:
        """The value of ``key`` as it was written (as text), or None if it was not set."""
        return self._raw.get(key)

    def origin(self, key: str) -> str:
        """Where ``key`` was set (``file:line`` or a source name), or ``""``."""
        return self._origins.get(key, "")

    def prefixed(self, prefix: FreeFormPrefix | str) -> dict[str, str]:
        """The set keys under ``prefix`` (e.g. ``"spark.conf."``), prefix removed, as strings."""
        if isinstance(prefix, FreeFormPrefix):
            prefix = prefix.prefix
        return {
            key[len(prefix) :]: value
            for key, value in sorted(self.to_strings().items())
            if key.startswith(prefix)
        }

    def to_strings(self, *, include_defaults: bool = False) -> dict[str, str]:
        """Canonical strings of the set keys (and of all defaults if asked), sorted by key.

        ``Configuration.from_mapping(conf.to_strings())`` equals ``conf``.
        """
        out = dict(self._free)
        for key, option in self._registry.options.items():
            if key in self._values:
                out[key] = option.format(self._values[key])
            elif include_defaults:
                out[key] = option.format()
        return dict(sorted(out.items()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Configuration):
            return NotImplemented
        return self._values == other._values and self._free == other._free

    def __hash__(self) -> int:
        return hash(frozenset(self.to_strings().items()))

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={v!r}" for k, v in self.to_strings().items())
        return f"Configuration({items})"
