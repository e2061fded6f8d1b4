"""Column expressions for pipelines: ``pyspark.sql.functions``, recorded and replayed later.

A classic PySpark ``Column`` is a handle to an object inside a running JVM: it cannot be built
without a SparkSession, nor shipped to another process. A pipeline is defined in the client,
where no JVM runs, and executed by task executors. So this module offers the same API as
``pyspark.sql.functions`` (and ``pyspark.sql.Window``), but every call only *records* what was
asked: ``F.count("*").alias("n")`` is a small tree of :class:`Expr` nodes that pickles with the
pipeline and is replayed against the real ``pyspark.sql.functions`` inside the task::

    from sparkmill import functions as F

    words.where(F.col("word") != "").key_by("word").agg(F.count("*").alias("count"))

Everything a Column offers is recorded: operators (``==``, ``&``, ``+``, ``~``...), methods
(``.alias``, ``.cast``, ``.isNull``, ``.over``...), indexing, and calls (a recorded ``F.udf``
used as a decorator). Function names are checked against ``pyspark.sql.functions`` right away,
so a typo fails while the pipeline is built, not in the cluster.

Inside a ``transform(fn)`` the function receives a real DataFrame on the task executor. There
this module is *live* (the task executor turns it on): calls return real Columns, so the same
``F`` works in recorded expressions and inside functions alike (``pyspark.sql.functions`` works
there too).
"""

from __future__ import annotations

from typing import Any

from sparkmill.common.pipeline.expressions import (
    Expr,
    contains_expr,
    describe,
    is_live,
    recorder,
    resolve,
    set_live,
)

__all__ = [
    "Expr",
    "Window",
    "col",
    "contains_expr",
    "describe",
    "expr",
    "is_live",
    "lit",
    "resolve",
    "set_live",
]


def __getattr__(name: str) -> Any:
    """``F.anything``: a recorder of ``pyspark.sql.functions.anything``."""
    if name.startswith("__"):
        raise AttributeError(name)
    return recorder("functions", name)


class _WindowRecorder:
    """``Window.partitionBy(...)...`` recorded (``pyspark.sql.Window``)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return recorder("Window", name)

    def __repr__(self) -> str:
        return "sparkmill.functions.Window"


Window = _WindowRecorder()


def col(name: str) -> Any:
    return recorder("functions", "col")(name)


def lit(value: Any) -> Any:
    return recorder("functions", "lit")(value)


def expr(sql: str) -> Any:
    return recorder("functions", "expr")(sql)
