"""Typed configuration option definitions: an option, a free-form prefix, a group, a cross-key
constraint and the registry of them all (the options themselves are in
:mod:`sparkmill.common.config.options`; loading and validating a file is
:mod:`sparkmill.common.config.configuration`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

from sparkmill.common.config.kinds import Kind
from sparkmill.common.core.errors import ConfigurationError

T = TypeVar("T")


class ConfigValues(Protocol):
    """What a cross-key :class:`Constraint` reads: the value of an option
    (:class:`~sparkmill.common.config.configuration.Configuration` is one)."""

    def get(self, option: ConfigOption[T]) -> T: ...


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
    check: Callable[[ConfigValues], tuple[str, str] | None]


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
