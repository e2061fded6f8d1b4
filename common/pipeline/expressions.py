"""Recorded column expressions: the part of ``sparkmill.functions`` both sides share.

The client records calls of ``pyspark.sql.functions`` (and ``pyspark.sql.Window``) as trees of
:class:`Expr` nodes, which travel pickled in a vertex's chain spec; the task executor replays
them against the real PySpark (:func:`resolve`). Users import the facade
``from sparkmill import functions as F``. PySpark is imported only when a name is checked or an
expression replayed, never when this module is imported.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from typing import Any

_ROOTS = {"functions": "pyspark.sql.functions", "Window": "pyspark.sql.window"}
_live = False


def set_live(live: bool) -> None:
    """Live mode (task executors): calls go straight to PySpark instead of being recorded."""
    global _live
    _live = live


def is_live() -> bool:
    return _live


class Expr:
    """A recorded expression: ``target.name(*args, **kwargs)`` (or ``target[key]``).

    ``target`` is a root (``"functions"`` or ``"Window"``) or another :class:`Expr`.
    """

    __slots__ = ("_args", "_kind", "_kwargs", "_name", "_target")
    _target: Expr | str
    _name: str
    _args: tuple[Any, ...]
    _kwargs: dict[str, Any]
    _kind: str

    def __init__(
        self,
        target: Expr | str,
        name: str,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        kind: str = "call",
    ) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_args", tuple(args))
        object.__setattr__(self, "_kwargs", dict(kwargs or {}))
        object.__setattr__(self, "_kind", kind)  # "call" | "getattr"

    # -- pickling (slots + __getattr__ need an explicit state) -------------------------------

    def __getstate__(self) -> tuple[Any, ...]:
        return (self._target, self._name, self._args, self._kwargs, self._kind)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for slot, value in zip(
            ("_target", "_name", "_args", "_kwargs", "_kind"), state, strict=True
        ):
            object.__setattr__(self, slot, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("recorded expressions are immutable")

    # -- introspection (used by the compiler, e.g. to split aggregations) --------------------

    @property
    def function_name(self) -> str | None:
        """``"count"`` for ``F.count(...)``; None when this is not a direct function call."""
        return self._name if self._target == "functions" and self._kind == "call" else None

    @property
    def call_args(self) -> tuple[Any, ...]:
        return self._args

    @property
    def call_kwargs(self) -> dict[str, Any]:
        return dict(self._kwargs)

    @property
    def method_target(self) -> Expr | None:
        """For ``x.alias("n")``: ``x`` (and :attr:`method_name` is ``"alias"``)."""
        return self._target if isinstance(self._target, Expr) else None

    @property
    def method_name(self) -> str:
        return self._name

    # -- recording ----------------------------------------------------------------------------

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Method(self, name)

    def __getitem__(self, key: object) -> Expr:
        return Expr(self, "__getitem__", (key,))

    def __call__(self, *args: Any, **kwargs: Any) -> Expr:
        return Expr(self, "__call__", args, kwargs)

    def __iter__(self) -> Any:
        raise TypeError("a column expression is not iterable")

    def __bool__(self) -> bool:
        raise ValueError(
            "a column expression has no truth value: use '&' for 'and', '|' for 'or', "
            "'~' for 'not' (with parentheses around comparisons)"
        )

    def __repr__(self) -> str:
        return f"Expr<{describe(self)}>"

    # Operators: each is the Column method of the same name, applied when replayed.
    def _op(self, name: str, *args: Any) -> Expr:
        return Expr(self, name, args)

    def __eq__(self, other: object) -> Expr:  # type: ignore[override]
        return self._op("__eq__", other)

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]
        return self._op("__ne__", other)

    __hash__ = None  # type: ignore[assignment]

    def __lt__(self, other: object) -> Expr:
        return self._op("__lt__", other)

    def __le__(self, other: object) -> Expr:
        return self._op("__le__", other)

    def __gt__(self, other: object) -> Expr:
        return self._op("__gt__", other)

    def __ge__(self, other: object) -> Expr:
        return self._op("__ge__", other)

    def __add__(self, other: object) -> Expr:
        return self._op("__add__", other)

    def __radd__(self, other: object) -> Expr:
        return self._op("__radd__", other)

    def __sub__(self, other: object) -> Expr:
        return self._op("__sub__", other)

    def __rsub__(self, other: object) -> Expr:
        return self._op("__rsub__", other)

    def __mul__(self, other: object) -> Expr:
        return self._op("__mul__", other)

    def __rmul__(self, other: object) -> Expr:
        return self._op("__rmul__", other)

    def __truediv__(self, other: object) -> Expr:
        return self._op("__truediv__", other)

    def __rtruediv__(self, other: object) -> Expr:
        return self._op("__rtruediv__", other)

    def __mod__(self, other: object) -> Expr:
        return self._op("__mod__", other)

    def __rmod__(self, other: object) -> Expr:
        return self._op("__rmod__", other)

    def __pow__(self, other: object) -> Expr:
        return self._op("__pow__", other)

    def __rpow__(self, other: object) -> Expr:
        return self._op("__rpow__", other)

    def __and__(self, other: object) -> Expr:
        return self._op("__and__", other)

    def __rand__(self, other: object) -> Expr:
        return self._op("__rand__", other)

    def __or__(self, other: object) -> Expr:
        return self._op("__or__", other)

    def __ror__(self, other: object) -> Expr:
        return self._op("__ror__", other)

    def __neg__(self) -> Expr:
        return self._op("__neg__")

    def __invert__(self) -> Expr:
        return self._op("__invert__")


class _Method:
    """``expr.alias`` before it is called."""

    __slots__ = ("_name", "_target")

    def __init__(self, target: Expr, name: str) -> None:
        self._target = target
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Expr:
        return Expr(self._target, self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"<method {self._name} of {self._target!r}>"


def _root_module(root: str) -> Any:
    return importlib.import_module(_ROOTS[root])


def recorder(root: str, name: str) -> Any:
    namespace = _root_module(root)
    if root == "Window":
        namespace = namespace.Window
    if not hasattr(namespace, name) or name.startswith("_"):
        public = [n for n in dir(namespace) if not n.startswith("_")]
        close = difflib.get_close_matches(name, public, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        where = "pyspark.sql.functions" if root == "functions" else "pyspark.sql.Window"
        raise AttributeError(f"{where} has no {name!r}{hint}")
    attribute = getattr(namespace, name)
    if not callable(attribute):
        return attribute  # a constant such as Window.unboundedPreceding

    def record(*args: Any, **kwargs: Any) -> Any:
        if _live:
            return attribute(*args, **kwargs)
        return Expr(root, name, args, kwargs)

    record.__name__ = name
    record.__doc__ = f"Recorded {_ROOTS[root]}.{name} (replayed on the task executor)."
    return record


# -- replay (task executor side) ---------------------------------------------------------------


def resolve(value: Any) -> Any:
    """Replace every recorded expression in ``value`` (recursively) by the real thing."""
    if isinstance(value, Expr):
        return _evaluate(value)
    if isinstance(value, list):
        return [resolve(v) for v in value]
    if isinstance(value, tuple):
        return tuple(resolve(v) for v in value)
    if isinstance(value, dict):
        return {k: resolve(v) for k, v in value.items()}
    return value


def _evaluate(node: Expr) -> Any:
    target = node._target
    if isinstance(target, str):
        base: Any = _root_module(target)
        if target == "Window":
            base = base.Window
    else:
        base = _evaluate(target)
    args = resolve(node._args)
    kwargs = resolve(node._kwargs)
    if node._name == "__call__":
        return base(*args, **kwargs)
    return getattr(base, node._name)(*args, **kwargs)


def contains_expr(value: Any) -> bool:
    if isinstance(value, Expr):
        return True
    if isinstance(value, list | tuple):
        return any(contains_expr(v) for v in value)
    if isinstance(value, dict):
        return any(contains_expr(v) for v in value.values())
    return False


def describe(value: Any) -> str:
    """A readable rendering, e.g. ``count('*').alias('n')`` (for names and messages)."""
    if not isinstance(value, Expr):
        return repr(value)
    parts = [describe(a) for a in value._args]
    parts += [f"{k}={describe(v)}" for k, v in value._kwargs.items()]
    call = f"({', '.join(parts)})"
    target = value._target
    if isinstance(target, str):
        prefix = "" if target == "functions" else "Window."
        return f"{prefix}{value._name}{call}"
    if value._name == "__getitem__":
        return f"{describe(target)}[{parts[0]}]"
    if value._name == "__call__":
        return f"{describe(target)}{call}"
    return f"{describe(target)}.{value._name}{call}"
