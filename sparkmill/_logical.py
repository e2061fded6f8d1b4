"""The logical plan of a pipeline: what :class:`~sparkmill.pipeline.Pipeline` records and
``sparkmill._compile`` turns into a JobGraph (both import it; neither imports the other's
internals)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.pipeline import plan as S


@dataclass(frozen=True)
class Edge:
    node: Node
    partitioner: str = S.FORWARD
    keys: tuple[str, ...] = ()


@dataclass(eq=False)
class Node:
    """One logical operator (the compiler chains several into one job vertex)."""

    index: int
    label: str
    op: S.Operation | S.Terminal
    inputs: list[Edge] = field(default_factory=list)
    parallelism: int | None = None
    resources: ResourceProfile | None = None
    slot_sharing_group: str | None = None
    combine: bool = True  # aggregates: may the compiler split it (partial + final)?

    @property
    def is_terminal(self) -> bool:
        return isinstance(self.op, S.Terminal)


class LogicalPlan(Protocol):
    """What the compiler reads of a pipeline."""

    @property
    def name(self) -> str: ...

    @property
    def parallelism(self) -> int: ...

    @property
    def config(self) -> dict[str, str]: ...

    @property
    def nodes(self) -> list[Node]: ...
