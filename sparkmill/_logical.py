"""The logical plan of a pipeline: what :class:`~sparkmill.pipeline.Pipeline` records and
``sparkmill._compile`` turns into a JobGraph (both import it; neither imports the other's
internals)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Protocol

from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.pipeline import plan as S

# Frames in this package are sparkmill's own; the first frame outside it is the user's code.
_PACKAGE_DIR = str(Path(__file__).resolve().parent) + "/"


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
    # ``file:line`` of the pipeline code that created the operator (for build-time errors).
    origin: str = ""

    @property
    def is_terminal(self) -> bool:
        return isinstance(self.op, S.Terminal)


class LogicalPlan(Protocol):
    """What the compiler reads of a pipeline."""

    @property
    def name(self) -> str: ...

    @property
    def parallelism(self) -> int | None: ...

    @property
    def config(self) -> dict[str, str]: ...

    @property
    def nodes(self) -> list[Node]: ...


def caller_origin() -> str:
    """``file:line`` of the innermost caller outside the sparkmill package ("" if none)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR) and not filename.startswith("<frozen"):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""
