"""The pipeline API: describe a batch job of PySpark operators; sparkmill runs it.

::

    import sparkmill as sm
    from sparkmill import functions as F

    pipeline = sm.Pipeline("wordcount", parallelism=4)
    (pipeline.read_text("data/*.txt")
        .transform(lambda df: df.select(F.explode(F.split("value", r"\\s+")).alias("word")))
        .where(F.col("word") != "")
        .key_by("word")
        .agg(F.count("*").alias("count"))
        .write_parquet("out/wordcount"))

Nothing runs here: the methods only build a logical plan, which
:meth:`Pipeline.build_job_graph` compiles into a JobGraph (see ``sparkmill/_compile.py`` and
``docs/pipelines.md``). Every record is later processed by Spark inside the task executors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sparkmill._logical import Edge, Node, caller_origin
from sparkmill.common.core.errors import ConfigurationError, PipelineError
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.jobgraph.job_config import JobConfigValue, normalize_job_config
from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.common.pipeline import plan as S
from sparkmill.common.pipeline.collect import CollectedRows, decode_rows, unpack_accumulators

DEFAULT_COLLECT_LIMIT = 1000
DEFAULT_JOB_CONFIG = {"slot.request.timeout": "300 s"}
_FORMATS = ("parquet", "csv", "json")
_MODES = ("error", "overwrite", "append")
_JDBC_MODES = ("append", "overwrite")


class Pipeline:
    """A batch pipeline; ``parallelism`` is the default number of subtasks per operator.

    Left out (``None``), the cluster decides the parallelism of every operator not given one
    with :meth:`DataSet.set_parallelism` when the job starts, from the size of its input
    (``execution.batch.adaptive.auto-parallelism.*``).

    ``config`` overrides job-scoped cluster keys (restart strategy, slot request timeout...);
    values may be strings or typed (ints, floats, bools, ``datetime.timedelta`` durations) and
    are checked here, so a misspelt key or a bad value fails before anything is submitted.
    """

    def __init__(
        self,
        name: str,
        parallelism: int | None = None,
        *,
        config: Mapping[str, JobConfigValue] | None = None,
    ) -> None:
        if parallelism is not None and parallelism < 1:
            raise PipelineError(f"parallelism must be at least 1, not {parallelism}")
        try:
            job_config = normalize_job_config(config or {})
        except ConfigurationError as exc:
            raise PipelineError(f"pipeline {name!r}: {exc}") from None
        self.name = name
        self.parallelism = parallelism
        # Batch stages queue for slots while earlier stages run (Spark sessions may still be
        # starting): wait for slots as long as Flink does by default, not a local cluster's 60 s.
        self.config = {**DEFAULT_JOB_CONFIG, **job_config}
        self.nodes: list[Node] = []
        self._collects: dict[str, Collected] = {}
        self._last_vertex_names: dict[str, str] = {}  # collect name -> vertex name (last build)

    # -- sources --------------------------------------------------------------------------------

    def read_text(self, path: str | Sequence[str], **options: Any) -> DataSet:
        """Lines of text files (one column ``value``); globs and directories are expanded."""
        return self._files("text", path, None, options)

    def read_csv(
        self, path: str | Sequence[str], *, schema: Any = None, header: bool = True, **options: Any
    ) -> DataSet:
        """CSV files. Without ``schema`` every column is a string unless ``inferSchema=True``
        (inference reads all files in every subtask: give a schema for large inputs)."""
        return self._files("csv", path, schema, {"header": header, **options})

    def read_json(
        self, path: str | Sequence[str], *, schema: Any = None, **options: Any
    ) -> DataSet:
        """JSON lines files (the schema is inferred over all files unless given)."""
        return self._files("json", path, schema, options)

    def read_parquet(self, path: str | Sequence[str], **options: Any) -> DataSet:
        return self._files("parquet", path, None, options)

    def read_jdbc(
        self,
        url: str,
        *,
        table: str | None = None,
        query: str | None = None,
        credentials_file: str | None = None,
        partition_column: str | None = None,
        lower_bound: int | None = None,
        upper_bound: int | None = None,
        **options: Any,
    ) -> DataSet:
        """A database ``table`` (or the rows of a ``query``) through Spark's JDBC data source.

        With ``partition_column`` (a numeric column) and both bounds, each subtask reads one
        stride of ``[lower_bound, upper_bound)`` (rows outside the range go to the first or last
        subtask, as in Spark); without it one subtask reads everything. The user name and
        password come from ``credentials_file`` (``user=`` and ``password=`` lines, mode 0600),
        read on the task executors: they never enter the job graph.
        """
        _check_jdbc_url(url)
        if (table is None) == (query is None):
            raise PipelineError("read_jdbc() needs exactly one of table= or query=")
        bounds = (lower_bound, upper_bound)
        if partition_column is None and bounds != (None, None):
            raise PipelineError("read_jdbc(): lower_bound/upper_bound need a partition_column")
        if partition_column is not None:
            if lower_bound is None or upper_bound is None:
                raise PipelineError(
                    "read_jdbc(): a partition_column needs lower_bound and upper_bound"
                )
            if int(upper_bound) <= int(lower_bound):
                raise PipelineError(
                    f"read_jdbc(): upper_bound {upper_bound} must be above lower_bound "
                    f"{lower_bound}"
                )
        source = S.JdbcSource(
            url,
            table or "",
            query or "",
            partition_column or "",
            int(lower_bound or 0),
            int(upper_bound or 0),
            _credentials_path(credentials_file),
            _jdbc_options("read_jdbc()", options),
        )
        data = self._source(f"read_jdbc({table or 'query'})", source)
        if partition_column is None:
            data.node.parallelism = 1  # nothing to split the rows by
        return data

    def range(self, start: int, end: int | None = None, step: int = 1) -> DataSet:
        """Column ``id`` from ``start`` (inclusive) to ``end`` (exclusive), like ``spark.range``."""
        if end is None:
            start, end = 0, start
        if step == 0:
            raise PipelineError("range() step must not be 0")
        return self._source("range", S.RangeSource(int(start), int(end), int(step)))

    def from_rows(self, rows: Iterable[Any], schema: Any = None) -> DataSet:
        """Small in-memory data (tuples, dicts or Rows), shared out among the subtasks."""
        data = tuple(rows)
        if not data and schema is None:
            raise PipelineError("from_rows() of no rows needs a schema")
        source = self._source("from_rows", S.RowsSource(data, schema))
        if self.parallelism is None:
            source.node.parallelism = 1  # rows that fit in the job graph fit one subtask
        return source

    def _files(self, fmt: str, path: str | Sequence[str], schema: Any, options: Any) -> DataSet:
        paths = (path,) if isinstance(path, str) else tuple(path)
        if not paths:
            raise PipelineError(f"read_{fmt}() needs at least one path")
        opts = {k: _option_text(v) for k, v in options.items()}
        source = S.FileSource(fmt, tuple(absolute_path(p) for p in paths), opts, schema)
        return self._source(f"read_{fmt}", source)

    def _source(self, label: str, op: S.Operation) -> DataSet:
        return DataSet(self, self._add(label, op, []))

    def _add(self, label: str, op: Any, inputs: list[Edge]) -> Node:
        for edge in inputs:
            if edge.node not in self.nodes:
                raise PipelineError(f"'{label}' reads a data set of another pipeline")
            if edge.node.is_terminal:
                raise PipelineError(f"'{label}' cannot follow the sink '{edge.node.label}'")
        node = Node(len(self.nodes), label, op, inputs, origin=caller_origin())
        self.nodes.append(node)
        return node

    # -- compilation and results ---------------------------------------------------------------

    def build_job_graph(self) -> JobGraph:
        from sparkmill._compile import compile_pipeline

        compiled = compile_pipeline(self)
        self._last_vertex_names = compiled.collect_vertices
        return compiled.graph

    def explain(self) -> str:
        """The job vertices this pipeline becomes (chains, exchanges, parallelism)."""
        from sparkmill._compile import compile_pipeline, describe_graph

        return describe_graph(compile_pipeline(self).graph)

    def collected(self, result: Any) -> dict[str, list[Any]]:
        """Rows of every ``collect()`` of a finished job (a ``JobResult``), by collect name."""
        return {name: handle.rows(result) for name, handle in self._collects.items()}

    def render_result(self, result: Any) -> str:
        """A few rows of every ``collect()`` and where every sink wrote (for the CLI)."""
        lines: list[str] = []
        for name, handle in self._collects.items():
            rows = handle.rows(result)
            more = " (truncated at the collect limit)" if handle.truncated(result) else ""
            lines.append(f"{name}: {len(rows)} rows{more}")
            lines.extend(_table(rows[:20]))
            if len(rows) > 20:
                lines.append(f"  ... {len(rows) - 20} more")
        for node in self.nodes:
            if isinstance(node.op, S.SinkOutput):
                lines.append(f"output ({node.op.format}): {node.op.path}")
            elif isinstance(node.op, S.JdbcSinkOutput):
                lines.append(f"output (jdbc): table {node.op.table} of {node.op.url}")
        return "\n".join(lines)

    def _vertex_of_collect(self, name: str) -> str:
        if name not in self._last_vertex_names:
            raise PipelineError("the pipeline has not been built (call build_job_graph first)")
        return self._last_vertex_names[name]


class DataSet:
    """The result of an operator; each method adds a downstream operator."""

    def __init__(self, pipeline: Pipeline, node: Node, partitioner: str = S.FORWARD) -> None:
        self.pipeline = pipeline
        self.node = node
        self._partitioner = partitioner  # how the *next* operator receives this data

    def _then(self, label: str, op: Any) -> DataSet:
        edge = Edge(self.node, self._partitioner)
        return DataSet(self.pipeline, self.pipeline._add(label, op, [edge]))

    # -- operator settings (Flink-style: they apply to the operator that made this data set) --

    def set_parallelism(self, parallelism: int) -> DataSet:
        if parallelism < 1:
            raise PipelineError(f"parallelism must be at least 1, not {parallelism}")
        self.node.parallelism = parallelism
        return self

    def set_name(self, name: str) -> DataSet:
        if not name:
            raise PipelineError("an operator name must not be empty")
        self.node.label = name
        return self

    def set_resources(self, cpu_cores: float, memory_mb: int) -> DataSet:
        self.node.resources = ResourceProfile(cpu_cores, memory_mb)
        return self

    def set_slot_sharing_group(self, group: str) -> DataSet:
        self.node.slot_sharing_group = group
        return self

    # -- transformations ------------------------------------------------------------------------

    def transform(self, fn: Callable[[Any], Any], name: str | None = None) -> DataSet:
        """``fn(DataFrame) -> DataFrame``, run on the task executor (use pyspark freely)."""
        if not callable(fn):
            raise PipelineError(f"transform() needs a function, not {type(fn).__name__}")
        fn_name = getattr(fn, "__name__", "")
        label = name or (
            f"transform({fn_name})" if fn_name and fn_name != "<lambda>" else "transform"
        )
        return self._then(label, S.Transform(fn))

    def select(self, *cols: Any) -> DataSet:
        return self._then("select", S.Apply("select", cols))

    def where(self, condition: Any) -> DataSet:
        """Keep rows matching a recorded expression or a SQL string."""
        return self._then("where", S.Apply("where", (condition,)))

    filter = where

    def with_column(self, name: str, column: Any) -> DataSet:
        return self._then(f"with_column({name})", S.Apply("withColumn", (name, column)))

    def with_column_renamed(self, existing: str, new: str) -> DataSet:
        return self._then("with_column_renamed", S.Apply("withColumnRenamed", (existing, new)))

    def drop(self, *cols: str) -> DataSet:
        return self._then("drop", S.Apply("drop", cols))

    def union(self, *others: DataSet) -> DataSet:
        """All rows of this and the other data sets, matched by column position."""
        return self._union(others, S.Union())

    def union_by_name(self, *others: DataSet, allow_missing_columns: bool = False) -> DataSet:
        return self._union(others, S.Union(True, allow_missing_columns))

    def _union(self, others: Sequence[DataSet], op: S.Union) -> DataSet:
        if not others:
            raise PipelineError("union() needs at least one other data set")
        edges = [Edge(d.node, d._partitioner) for d in (self, *others)]
        return DataSet(self.pipeline, self.pipeline._add("union", op, edges))

    def key_by(self, *keys: str) -> KeyedDataSet:
        """Group by column names: rows with equal keys meet in one subtask (hash exchange)."""
        return KeyedDataSet(self, _column_names("key_by", keys))

    def join(self, other: DataSet, on: str | Sequence[str], how: str = "inner") -> DataSet:
        """Join on equally named key columns. Both sides are hash-exchanged on the keys, unless
        ``other`` is marked with :meth:`broadcast` (then every subtask reads all of it)."""
        keys = _column_names("join", (on,) if isinstance(on, str) else tuple(on))
        if other._partitioner == S.BROADCAST:
            if how not in (
                "inner",
                "left",
                "left_outer",
                "leftouter",
                "left_semi",
                "left_anti",
                "semi",
                "anti",
                "leftsemi",
                "leftanti",
            ):
                raise PipelineError(
                    f"a broadcast join cannot be '{how}': rows of the broadcast side would be "
                    "repeated by every subtask (use a hash join)"
                )
            left = Edge(self.node, self._partitioner)
            right = Edge(other.node, S.BROADCAST)
        else:
            left = Edge(self.node, S.HASH, keys)
            right = Edge(other.node, S.HASH, keys)
        node = self.pipeline._add("join", S.Join(keys, how), [left, right])
        return DataSet(self.pipeline, node)

    def rebalance(self) -> DataSet:
        """Spread the rows evenly (round robin) over the next operator's subtasks."""
        return DataSet(self.pipeline, self.node, S.REBALANCE)

    def broadcast(self) -> DataSet:
        """Send all rows to every subtask of the next operator (for small join sides)."""
        return DataSet(self.pipeline, self.node, S.BROADCAST)

    # -- sinks ----------------------------------------------------------------------------------

    def write_parquet(
        self,
        path: str,
        *,
        mode: str = "error",
        partition_by: Sequence[str] = (),
        **options: Any,
    ) -> DataSet:
        """Parquet files under ``path``. ``mode``: ``"error"`` (the directory must be empty),
        ``"overwrite"`` (replace it; with ``partition_by`` only the partitions this job writes)
        or ``"append"`` (add files next to what is there). ``partition_by``: Spark's
        ``partitionBy`` layout, ``column=value/`` directories."""
        return self._sink("parquet", path, mode, partition_by, options)

    def write_csv(
        self,
        path: str,
        *,
        mode: str = "error",
        header: bool = True,
        partition_by: Sequence[str] = (),
        **options: Any,
    ) -> DataSet:
        return self._sink("csv", path, mode, partition_by, {"header": header, **options})

    def write_json(
        self,
        path: str,
        *,
        mode: str = "error",
        partition_by: Sequence[str] = (),
        **options: Any,
    ) -> DataSet:
        return self._sink("json", path, mode, partition_by, options)

    def write_jdbc(
        self,
        url: str,
        table: str,
        *,
        mode: str = "append",
        credentials_file: str | None = None,
        **options: Any,
    ) -> DataSet:
        """Rows into a database table, exactly once (see "Database sinks" in
        ``docs/pipelines.md``): ``"append"`` adds them, ``"overwrite"`` replaces the table's
        rows; either way the rows appear in one transaction when the job commits."""
        _check_jdbc_url(url)
        if mode not in _JDBC_MODES:
            raise PipelineError(
                f"write_jdbc() mode must be one of {', '.join(_JDBC_MODES)}, not {mode!r}"
            )
        if not isinstance(table, str) or not table.strip():
            raise PipelineError("write_jdbc() needs a table name")
        opts = _jdbc_options("write_jdbc()", options)
        output = S.JdbcSinkOutput(
            url, table.strip(), mode, _credentials_path(credentials_file), opts
        )
        return self._then(f"write_jdbc({table.strip()})", output)

    def _sink(
        self,
        fmt: str,
        path: str,
        mode: str,
        partition_by: Sequence[str],
        options: dict[str, Any],
    ) -> DataSet:
        if fmt not in _FORMATS:
            raise PipelineError(f"unknown output format {fmt!r} (one of {', '.join(_FORMATS)})")
        if mode not in _MODES:
            raise PipelineError(f"write mode must be one of {', '.join(_MODES)}, not {mode!r}")
        columns = (partition_by,) if isinstance(partition_by, str) else tuple(partition_by)
        if columns:
            _column_names(f"write_{fmt}(partition_by=...)", columns)
            if len(set(columns)) != len(columns):
                raise PipelineError(f"write_{fmt}(): partition_by names a column twice")
        opts = {k: _option_text(v) for k, v in options.items()}
        if "partitionBy" in opts:
            raise PipelineError(f"write_{fmt}(): use partition_by=[...], not a partitionBy option")
        sink = S.SinkOutput(fmt, absolute_path(path), mode, opts, columns)
        return self._then(f"write_{fmt}", sink)

    def collect(self, limit: int = DEFAULT_COLLECT_LIMIT, name: str | None = None) -> Collected:
        """Return up to ``limit`` rows to the client (for small results)."""
        if limit < 1:
            raise PipelineError("collect() limit must be at least 1")
        name = name or f"collect-{len(self.pipeline._collects) + 1}"
        if name in self.pipeline._collects:
            raise PipelineError(f"there is already a collect() named {name!r}")
        self._then(f"collect({name})", S.CollectOutput(name, limit))
        handle = Collected(self.pipeline, name, limit)
        self.pipeline._collects[name] = handle
        return handle


class KeyedDataSet:
    """A data set grouped by key columns (see :meth:`DataSet.key_by`)."""

    def __init__(self, data: DataSet, keys: tuple[str, ...]) -> None:
        self._data = data
        self.keys = keys

    def agg(self, *aggs: Any, combine: bool = True) -> DataSet:
        """``groupBy(keys).agg(*aggs)``: one row per key. With ``combine`` (the default) and only
        aliased ``count``/``sum``/``min``/``max`` aggregates, each upstream subtask first
        aggregates its own rows, so only one row per key and subtask is exchanged."""
        if not aggs:
            raise PipelineError("agg() needs at least one aggregate expression")
        data = self._data
        edge = Edge(data.node, S.HASH, self.keys)
        node = data.pipeline._add("agg", S.Aggregate(self.keys, tuple(aggs)), [edge])
        node.combine = combine
        return DataSet(data.pipeline, node)

    def count(self, name: str = "count") -> DataSet:
        from sparkmill import functions as F

        return self.agg(F.count("*").alias(name))


class Collected:
    """The handle of a ``collect()``: read its rows from the finished job's result."""

    def __init__(self, pipeline: Pipeline, name: str, limit: int) -> None:
        self.pipeline = pipeline
        self.name = name
        self.limit = limit

    def _parts(self, result: Any) -> list[CollectedRows]:
        vertex = self.pipeline._vertex_of_collect(self.name)
        blob = result.accumulators.get(vertex, b"")
        return [decode_rows(part) for part in unpack_accumulators(blob) if part]

    def rows(self, result: Any) -> list[Any]:
        from pyspark.sql import Row

        rows: list[Any] = []
        for part in self._parts(result):
            make = Row(*part.columns)
            rows.extend(make(*values) for values in part.rows)
        return rows[: self.limit]

    def truncated(self, result: Any) -> bool:
        parts = self._parts(result)
        return any(p.truncated for p in parts) or sum(len(p.rows) for p in parts) > self.limit


# -- helpers ------------------------------------------------------------------------------------


def absolute_path(path: str) -> str:
    """Local paths become absolute (task executors may run elsewhere); URIs stay as they are."""
    if "://" in path or path.startswith("file:"):
        return path
    return str(Path(path).expanduser().absolute())


def _check_jdbc_url(url: str) -> None:
    if not isinstance(url, str) or not url.startswith("jdbc:"):
        raise PipelineError("a JDBC URL starts with 'jdbc:' (e.g. jdbc:postgresql://host/db)")
    lowered = url.lower()
    if "password=" in lowered or "@" in url.split("?", 1)[0]:
        # The URL travels in the job graph, logs and the dashboard: no secrets in it.
        raise PipelineError(
            "the JDBC URL must not carry credentials (they would be stored in the job graph "
            "and shown in logs): put them in a credentials_file"
        )


def _jdbc_options(what: str, options: Mapping[str, Any]) -> dict[str, str]:
    secret = sorted(k for k in options if k.lower() in ("user", "password"))
    if secret:
        raise PipelineError(
            f"{what}: {', '.join(secret)} must not be an option (it would be stored in the job "
            "graph): put the credentials in a credentials_file"
        )
    return {k: _option_text(v) for k, v in options.items()}


def _credentials_path(path: str | None) -> str:
    """Only the path travels; the task executors read (and check) the file."""
    if path is None:
        return ""
    if not isinstance(path, str) or not path:
        raise PipelineError("credentials_file must be a path")
    return absolute_path(path)


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _column_names(what: str, names: Sequence[Any]) -> tuple[str, ...]:
    if not names:
        raise PipelineError(f"{what}() needs at least one key column")
    for name in names:
        if not isinstance(name, str) or not name:
            raise PipelineError(
                f"{what}() keys must be column names, not {name!r} (add the column with "
                "with_column() first)"
            )
    return tuple(names)


def _table(rows: Sequence[Any]) -> list[str]:
    if not rows:
        return ["  (no rows)"]
    columns = list(rows[0].__fields__)
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    out = ["  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    out += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return out


def _cell(value: Any) -> str:
    text = "null" if value is None else str(value)
    return text if len(text) <= 40 else text[:37] + "..."
