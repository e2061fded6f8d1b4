"""Explicit lifecycle state machines: an Enum, a table of allowed transitions, named guards.

Every lifecycle in sparkmill (job status, execution state, task slot state, task slot table
state...) declares its allowed transitions as data, so the table *is* the documentation and an
illegal transition is caught where it happens instead of corrupting state silently.

Two ways to ask:

* :meth:`TransitionTable.can_transition` - a guard; an expected refusal is a ``False``.
* :meth:`TransitionTable.check` - asserts the transition is legal, raising
  :class:`~sparkmill.common.core.errors.IllegalStateBug` otherwise (a caller that gets here has a
  bug).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

from sparkmill.common.core.errors import IllegalStateBug

S = TypeVar("S", bound=enum.Enum)


class TransitionTable(Generic[S]):
    def __init__(self, name: str, transitions: Mapping[S, Iterable[S]]) -> None:
        self.name = name
        self._allowed: dict[S, frozenset[S]] = {s: frozenset(t) for s, t in transitions.items()}

    def allowed_from(self, state: S) -> frozenset[S]:
        return self._allowed.get(state, frozenset())

    def can_transition(self, current: S, target: S) -> bool:
        return target in self.allowed_from(current)

    def is_terminal(self, state: S) -> bool:
        return not self.allowed_from(state)

    def check(self, current: S, target: S, what: str = "") -> None:
        if not self.can_transition(current, target):
            subject = f" of {what}" if what else ""
            raise IllegalStateBug(
                f"illegal {self.name} transition{subject}: {current.name} -> {target.name} "
                f"(allowed from {current.name}: "
                f"{sorted(s.name for s in self.allowed_from(current)) or 'none, it is terminal'})"
            )

    def states(self) -> list[S]:
        return list(self._allowed)
