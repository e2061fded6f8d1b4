"""What a ``spark`` vertex runs: the chain spec carried in its operator payload.

The client (``sparkmill.Pipeline``) compiles a pipeline into job vertices; each vertex's
payload is one of these specs, pickled with cloudpickle (user functions travel by value). The
task executor unpickles it and evaluates it with its SparkSession. This module is shared by
both sides and imports nothing from PySpark at import time (only :func:`encode_spec`, on the
client, loads PySpark's cloudpickle).

A :class:`ChainSpec` is an *in-tree* of operators: leaves read (a source share or an input
gate), inner nodes transform, and the single root's DataFrame goes to every output (a
blocking result partition per consuming edge, a file sink, or the client via ``collect``).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from sparkmill.common.core.errors import SuppressRestartsError

PAYLOAD_MAGIC = b"SMSPARK1"

# Partitioners of a data set (JobEdge.partitioner).
FORWARD = "forward"
HASH = "hash"
REBALANCE = "rebalance"
BROADCAST = "broadcast"


# -- leaves -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileSource:
    """Files (globs or directories) shared out among the subtasks, largest first."""

    format: str  # "text" | "csv" | "json" | "parquet"
    paths: tuple[str, ...]
    options: dict[str, str] = field(default_factory=dict)
    schema: Any = None  # a DDL string or a pyspark StructType


@dataclass(frozen=True)
class RangeSource:
    start: int
    end: int
    step: int = 1


@dataclass(frozen=True)
class RowsSource:
    rows: tuple[Any, ...]
    schema: Any = None  # DDL string, StructType, list of column names, or None (inferred)


@dataclass(frozen=True)
class JdbcSource:
    """A table or query of a database, read through Spark's JDBC data source.

    With ``partition_column`` each subtask reads the rows whose column falls into its stride of
    ``[lower_bound, upper_bound)`` (the first also reads NULLs and values below the range, the
    last values above it); without one a single subtask reads everything. The credentials stay
    in ``credentials_file`` (read on the task executor), never in the job graph.
    """

    url: str
    table: str  # the table name, or "" when ``query`` is given
    query: str = ""
    partition_column: str = ""
    lower_bound: int = 0
    upper_bound: int = 0
    credentials_file: str = ""
    options: dict[str, str] = field(default_factory=dict)

    @property
    def description(self) -> str:
        return f"table {self.table}" if self.table else "the query"


@dataclass(frozen=True)
class GateInput:
    """Read this subtask's share of an intermediate data set (see ``common/exchange``)."""

    dataset_id: str
    partitioner: str


# -- inner nodes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Apply:
    """``df.<method>(*args, **kwargs)``; recorded expressions in the arguments are replayed."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Transform:
    """``fn(df) -> DataFrame``: arbitrary user code, run where the task runs."""

    fn: Any


@dataclass(frozen=True)
class PartialAgg:
    """First phase of a split aggregation: ``groupBy(keys).agg(partial_i AS __sm_agg_i)``."""

    keys: tuple[str, ...]
    aggs: tuple[Any, ...]  # recorded expressions, already aliased to the partial names


@dataclass(frozen=True)
class FinalAgg:
    """Second phase: merge the partials per key; ``merges`` are (function, partial, name)."""

    keys: tuple[str, ...]
    merges: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class Aggregate:
    """``groupBy(keys).agg(*aggs)`` over all rows of the key (they all arrive here)."""

    keys: tuple[str, ...]
    aggs: tuple[Any, ...]


@dataclass(frozen=True)
class Join:
    on: tuple[str, ...]
    how: str = "inner"


@dataclass(frozen=True)
class Union:
    by_name: bool = False
    allow_missing_columns: bool = False


Operation = (
    FileSource
    | JdbcSource
    | RangeSource
    | RowsSource
    | GateInput
    | Apply
    | Transform
    | PartialAgg
    | FinalAgg
    | Aggregate
    | Join
    | Union
)


@dataclass(frozen=True)
class NodeSpec:
    index: int
    label: str  # the operator's name, for messages
    op: Operation
    inputs: tuple[int, ...] = ()  # indexes of earlier nodes of the same chain


# -- outputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExchangeOutput:
    """A blocking result partition of ``dataset_id``, split for its readers."""

    dataset_id: str
    partitioner: str
    keys: tuple[str, ...]
    consumer_parallelism: int


@dataclass(frozen=True)
class SinkOutput:
    """Files under ``path``, written with the commit protocol (see ``sinks.py``)."""

    format: str  # "parquet" | "csv" | "json"
    path: str
    mode: str  # "error" | "overwrite" | "append"
    options: dict[str, str] = field(default_factory=dict)
    # Spark's partitionBy: files under key=value/ directories; with "overwrite", only the
    # partitions the job writes are replaced (dynamic partition overwrite).
    partition_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class JdbcSinkOutput:
    """Rows for a database table, each attempt into a staging table of its own; the job's
    commit moves the winning attempts' rows into ``table`` in one transaction (``jdbc.py``)."""

    url: str
    table: str
    mode: str  # "append" | "overwrite"
    credentials_file: str = ""
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CollectOutput:
    """Rows returned to the client in the task's accumulator."""

    name: str
    limit: int


Output = ExchangeOutput | SinkOutput | JdbcSinkOutput | CollectOutput
Terminal = SinkOutput | JdbcSinkOutput | CollectOutput
"""What a pipeline ends with (the compiler turns each into an output of its chain)."""


@dataclass(frozen=True)
class ChainSpec:
    vertex_name: str
    nodes: tuple[NodeSpec, ...]
    root: int
    outputs: tuple[Output, ...]


@dataclass(frozen=True)
class SinkCommit:
    path: str
    format: str
    mode: str
    parallelism: int  # -1: automatic, the number of producers of ``done_dataset_id``
    partition_by: tuple[str, ...] = ()
    # The empty data set the sink's vertex produces for the commit: its input gate tells the
    # commit how many subtasks the JobMaster decided for that vertex.
    done_dataset_id: str = ""


@dataclass(frozen=True)
class JdbcCommit:
    """One database sink for the job's commit: its output and how many subtasks wrote it."""

    output: JdbcSinkOutput
    parallelism: int  # -1: automatic (see SinkCommit)
    done_dataset_id: str = ""


@dataclass(frozen=True)
class CommitSpec:
    """The final vertex: publish every sink (``_SUCCESS``) and drop the job's exchange data."""

    sinks: tuple[SinkCommit, ...]
    jdbc: tuple[JdbcCommit, ...] = ()


Spec = ChainSpec | CommitSpec


def encode_spec(spec: Spec) -> bytes:
    """Pickle with cloudpickle (functions and lambdas by value); raises on unpicklable parts."""
    from pyspark import cloudpickle

    pickler: Any = cloudpickle
    return PAYLOAD_MAGIC + bytes(pickler.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL))


def decode_spec(payload: bytes) -> Spec:
    if not payload.startswith(PAYLOAD_MAGIC):
        raise ValueError("the payload of a spark vertex is not a sparkmill chain spec")
    try:
        spec = pickle.loads(payload[len(PAYLOAD_MAGIC) :])
    except Exception as exc:
        # Code that cannot be loaded here will not load on a retry either.
        raise SuppressRestartsError(
            f"the pipeline's functions cannot be deserialized on this task executor "
            f"({type(exc).__name__}: {exc}); are the modules they use installed here?"
        ) from exc
    if not isinstance(spec, ChainSpec | CommitSpec):
        raise ValueError(f"the payload holds a {type(spec).__name__}, not a chain spec")
    return spec
