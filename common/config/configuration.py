"""Cluster configuration: loading and validating the immutable :class:`Configuration`.

A cluster is configured by one YAML file of flat, dotted keys (``taskmanager.numberOfTaskSlots:
4``); nested mappings are accepted too and flatten with dots, so ``heartbeat: {interval: 5 s}``
is the same as ``heartbeat.interval: 5 s``. Every key must be declared (see
:mod:`sparkmill.common.config.options`, the one place where options live) or start with a free-form
prefix such as ``spark.conf.``. Values are validated when the file is loaded, so a service that
starts has a configuration it can trust::

    conf = Configuration.load("conf/sparkmill.yaml")
    slots = conf.get(config_options.TASK_MANAGER_NUM_TASK_SLOTS)  # -> int
    job_conf = conf.with_overrides(job_config, job_scope=True)     # job-scoped keys only

Value syntax (see :mod:`sparkmill.common.config.kinds`):

* durations (``"500 ms"``, ``"10 s"``, ``"2 min"``, ``"1 h"``, ``"2 d"``) become float seconds;
  a bare number is milliseconds, as in Flink (a few options say otherwise, e.g. seconds);
* memory sizes (``"512m"``, ``"1 gb"``, ``"1024 kb"``) become int **bytes**; binary units, a
  bare number is bytes, as in Flink;
* addresses (``"host:port"`` or ``"tcp://host:port"``, port 0 = any free port) become the
  canonical ``"tcp://host:port"`` string.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Self, TypeVar, cast

import yaml

from sparkmill.common.config import registry as config_registry
from sparkmill.common.config.kinds import as_text
from sparkmill.common.config.schema import ConfigOption, FreeFormPrefix, OptionRegistry
from sparkmill.common.core.errors import ConfigurationError

T = TypeVar("T")

FILE_KEY = "<file>"
"""The key :class:`ConfigurationError` names for problems with the file as a whole."""


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
        self._registry = registry or config_registry.REGISTRY
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
                text = as_text(raw)
                if text is None:
                    raise ConfigurationError(key, f"{raw!r} is not a single value{suffix}")
                new._free[key] = text
            new._raw[key] = as_text(raw) or ""
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
