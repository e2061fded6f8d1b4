"""How an option is declared: :func:`option` adds it to the group :func:`group` opened last.

The groups are kept in declaration order; the area modules of this package are imported in the
order of ``docs/configuration.md``, so that order is the documentation's.
"""

from __future__ import annotations

from typing import TypeVar

from sparkmill.common.config.kinds import Kind
from sparkmill.common.config.schema import ConfigOption, OptionGroup

T = TypeVar("T")

MS = 0.001
MIB = 1 << 20
DECLARED_GROUPS: list[OptionGroup] = []


def group(title: str, description: str) -> None:
    """Start a new group: the options declared after this call (with :func:`option`) join it."""
    DECLARED_GROUPS.append(OptionGroup(title, description, ()))


def option(
    key: str,
    kind: Kind[T],
    default: T,
    description: str,
    *,
    job_overridable: bool = False,
    choices: tuple[T, ...] | None = None,
    aliases: tuple[tuple[str, T], ...] = (),
    min: float | None = None,
    max: float | None = None,
    default_text: str = "",
) -> ConfigOption[T]:
    """Declare an option in the current group (see :class:`ConfigOption` for the fields)."""
    declared = ConfigOption(
        key, kind, default, description, job_overridable, choices, aliases, min, max, default_text
    )
    group = DECLARED_GROUPS[-1]
    DECLARED_GROUPS[-1] = OptionGroup(group.title, group.description, (*group.options, declared))
    return declared
