"""Build-time checks of a pipeline's schemas and column names, without Spark.

A schema string with a misspelt type (``"id BIGIN"``) or a ``key_by``/``join(on=)``/``select``
naming a column that does not exist would otherwise only fail inside Spark on a task executor,
after slots were allocated and sessions started. Where the columns are *known* on the client (a
source with an explicit schema, ``range``, ``read_text``, and what ``select``, ``with_column``,
``drop``, ``agg`` and ``join`` make of known columns) they are checked here; where they are not
(a ``transform`` function, a CSV source without a schema) nothing is assumed and Spark checks at
run time, as before. Spark compares column names case-insensitively by default, and so does
this check.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sparkmill._logical import LogicalPlan, Node
from sparkmill.common.core.errors import PipelineError
from sparkmill.common.pipeline import plan as S
from sparkmill.common.pipeline.expressions import Expr

Columns = tuple[str, ...] | None  # None: not known on the client

# Spark SQL's type names (and their aliases) as its DDL parser accepts them.
_SIMPLE_TYPES = frozenset(
    {
        "boolean",
        "byte",
        "tinyint",
        "short",
        "smallint",
        "int",
        "integer",
        "long",
        "bigint",
        "float",
        "real",
        "double",
        "decimal",
        "dec",
        "numeric",
        "string",
        "varchar",
        "char",
        "character",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "timestamp_ltz",
        "interval",
        "void",
        "variant",
    }
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# -- schema strings -------------------------------------------------------------------------------


def _split_top_level(text: str, separator: str = ",") -> list[str]:
    """``text`` split at ``separator`` outside <>, () and quotes."""
    parts: list[str] = []
    depth = 0
    quote = ""
    current: list[str] = []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "`'\"":
            quote = char
        elif char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _check_type(text: str, where: str) -> None:
    """Raise a :class:`PipelineError` naming ``text`` if it is not a Spark SQL type."""
    text = text.strip()
    match = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text)
    base = match.group(0).lower() if match else ""
    rest = text[len(base) :].strip()
    if base in ("array", "map", "struct") and rest.startswith("<") and rest.endswith(">"):
        inner = rest[1:-1]
        if base == "array":
            _check_type(inner, where)
        elif base == "map":
            parts = _split_top_level(inner)
            if len(parts) != 2:
                raise PipelineError(f"{where}: map<...> needs a key and a value type: {text!r}")
            for part in parts:
                _check_type(part, where)
        else:
            _struct_fields(inner, where, colon=True)
        return
    if base not in _SIMPLE_TYPES:
        raise PipelineError(
            f"{where}: unknown type {text.split()[0] if text else text!r} (Spark SQL types: "
            "boolean, tinyint, smallint, int, bigint, float, double, decimal(p,s), string, "
            "varchar(n), char(n), binary, date, timestamp, array<T>, map<K,V>, struct<...>)"
        )


def _struct_fields(text: str, where: str, *, colon: bool) -> tuple[str, ...]:
    names: list[str] = []
    for field in _split_top_level(text):
        field = field.strip()
        if not field:
            raise PipelineError(f"{where}: an empty column definition")
        if field.startswith("`"):
            end = field.find("`", 1)
            name, rest = field[1:end], field[end + 1 :]
        else:
            match = _IDENTIFIER.match(field)
            if match is None:
                raise PipelineError(f"{where}: {field!r} does not start with a column name")
            name, rest = match.group(0), field[match.end() :]
        rest = rest.strip()
        if colon or rest.startswith(":"):
            rest = rest.removeprefix(":").strip()
        if not rest:
            raise PipelineError(f"{where}: column {name!r} has no type")
        # Trailing NOT NULL / COMMENT '...' belong to the column, not its type.
        kind = re.split(r"\s+(?:not\s+null|comment\s)", rest, maxsplit=1, flags=re.I)[0]
        _check_type(kind, f"{where}: column {name!r}")
        names.append(name)
    return tuple(names)


def schema_columns(schema: Any, where: str) -> Columns:
    """The column names of a DDL string (checked: :class:`PipelineError` for a bad type), a
    pyspark ``StructType`` or a list of names; None for anything else."""
    if isinstance(schema, str):
        text = schema.strip()
        if text.lower().startswith("struct<") and text.endswith(">"):
            text = text[len("struct<") : -1]
        return _struct_fields(text, f"{where}: schema {schema!r}", colon=False)
    names = getattr(schema, "fieldNames", None)
    if callable(names):
        return tuple(str(n) for n in names())
    if isinstance(schema, list | tuple) and all(isinstance(n, str) for n in schema):
        return tuple(schema)
    return None


# -- columns through the plan ---------------------------------------------------------------------


def check_plan(plan: LogicalPlan) -> None:
    """Check every schema string and every column name that can be checked on the client."""
    known: dict[int, Columns] = {}
    for node in plan.nodes:
        inputs = [known[edge.node.index] for edge in node.inputs]
        try:
            known[node.index] = _columns_of(node, inputs)
        except PipelineError as exc:
            if exc.origin or not node.origin:
                raise
            raise PipelineError(str(exc), origin=node.origin) from None


def _missing(node: Node, name: str, columns: Sequence[str], what: str) -> PipelineError:
    return PipelineError(
        f"'{node.label}': {what} {name!r} is not a column of its input "
        f"(known columns: {', '.join(columns) or 'none'})"
    )


def _require(node: Node, names: Sequence[str], columns: Columns, what: str) -> None:
    if columns is None:
        return
    lowered = {c.lower() for c in columns}
    for name in names:
        if name.lower() not in lowered:
            raise _missing(node, name, columns, what)


def _plain_name(value: Any) -> str | None:
    """``"x"`` for ``"x"``, ``F.col("x")``, ``F.column("x")``; None for anything else."""
    if isinstance(value, Expr):
        # (function_name compares the target: only ask a root call, not a method's result)
        if (
            value.method_target is None
            and value.function_name in ("col", "column")
            and len(value.call_args) == 1
        ):
            value = value.call_args[0]
        else:
            return None
    if isinstance(value, str) and _IDENTIFIER.fullmatch(value):
        return value
    return None


def _output_name(value: Any) -> str | None:
    """The column name a select item produces, when the client can tell."""
    if isinstance(value, Expr) and value.method_name in ("alias", "name"):
        args = value.call_args
        if value.method_target is not None and len(args) == 1 and isinstance(args[0], str):
            return args[0]
    return _plain_name(value)


def _columns_of(node: Node, inputs: list[Columns]) -> Columns:
    op = node.op
    first = inputs[0] if inputs else None
    if isinstance(op, S.FileSource):
        if op.format == "text":
            return ("value",)
        return schema_columns(op.schema, f"'{node.label}'") if op.schema is not None else None
    if isinstance(op, S.RangeSource):
        return ("id",)
    if isinstance(op, S.RowsSource):
        return schema_columns(op.schema, f"'{node.label}'") if op.schema is not None else None
    if isinstance(op, S.Apply):
        return _apply_columns(node, op, first)
    if isinstance(op, S.Aggregate):
        _require(node, op.keys, first, "the key")
        names = [_output_name(a) for a in op.aggs]
        if any(n is None for n in names):
            return None
        return (*op.keys, *(n for n in names if n is not None))
    if isinstance(op, S.Join):
        for side in inputs:
            _require(node, op.on, side, "the join key")
        if any(side is None for side in inputs):
            return None
        keys = {k.lower() for k in op.on}
        joined = list(op.on)
        for side in inputs:
            joined += [c for c in side or () if c.lower() not in keys]
        return tuple(joined)
    if isinstance(op, S.Union | S.SinkOutput | S.CollectOutput):
        return first
    return None  # a transform function, or an operator this check does not know


def _apply_columns(node: Node, op: S.Apply, columns: Columns) -> Columns:
    if op.method == "where":
        return columns
    if op.method == "select":
        produced: list[str] = []
        unknown = False
        for item in op.args:
            if isinstance(item, str) and item.strip() == "*":
                if columns is None:
                    return None
                produced += columns
                continue
            name = _plain_name(item)
            if name is not None:
                _require(node, [name], columns, "the selected column")
            out = _output_name(item)
            if out is None:
                unknown = True
            else:
                produced.append(out)
        return None if unknown or (columns is None and not produced) else tuple(produced)
    if columns is None:
        return None
    if op.method == "withColumn" and op.args and isinstance(op.args[0], str):
        name = _plain_name(op.args[1]) if len(op.args) > 1 else None
        if name is not None:
            _require(node, [name], columns, "the column")
        existing = [c for c in columns if c.lower() != op.args[0].lower()]
        return (*existing, op.args[0])
    if op.method == "withColumnRenamed" and len(op.args) == 2:
        old, new = op.args
        return tuple(new if c.lower() == str(old).lower() else c for c in columns)
    if op.method == "drop" and all(isinstance(c, str) for c in op.args):
        dropped = {str(c).lower() for c in op.args}
        return tuple(c for c in columns if c.lower() not in dropped)
    return None


__all__ = ["check_plan", "schema_columns"]
