"""Blocking result partitions: writing and reading them with Spark (Parquet under exchange.dir).

A producer subtask writes its partition of a data set once, completely, before any consumer
starts (the edges are BLOCKING). Where the files go is the shared exchange layout
(:mod:`sparkmill.common.exchange.layout`); who reads a POINTWISE partition is the shared rule
(:mod:`sparkmill.common.exchange.pointwise`), the same one the JobMaster wires the graph with.

Splitting, per partitioner:

* ``hash`` - ``pmod(hash(keys), K)`` with Spark's own Murmur3 hash (the same in every process),
  numeric keys hashed as normalized doubles so that equal values of different numeric types (an
  int and a long key of a join) meet;
* ``rebalance`` - round robin over the ``K`` sub-partitions;
* ``broadcast`` - not split; every consumer reads everything;
* ``forward`` (POINTWISE) - with S producers and T consumers, S >= T: each consumer reads whole
  partitions; S < T: partition p is split round robin among its readers
  ``[ceil(p*T/S), ceil((p+1)*T/S))`` (see :func:`pointwise_readers`).

``K`` is the number of consumer subtasks, or more when the consumer's parallelism is decided
after the producers ran: each consumer then reads a contiguous range of sub-partitions (see
:mod:`sparkmill.common.exchange.subpartitions`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sparkmill.common.core.errors import IllegalStateBug, MissingPartitionError
from sparkmill.common.core.partitions import InputGateInfo
from sparkmill.common.exchange.layout import (
    DATA_DIR,
    SCHEMA_FILE,
    SUB_PARTITION_COLUMN,
    partition_dir,
    sub_partition_dir,
)
from sparkmill.common.exchange.pointwise import pointwise_readers
from sparkmill.common.exchange.skewed_splits import subtask_slice
from sparkmill.common.exchange.subpartitions import subpartition_range
from sparkmill.common.pipeline import plan as S

# -- writing ------------------------------------------------------------------------------------


def _find_column(df: Any, name: str) -> str:
    for field in df.schema.fields:
        if field.name == name:
            return str(field.name)
    for field in df.schema.fields:
        if field.name.lower() == name.lower():
            return str(field.name)
    raise KeyError(
        f"key column '{name}' does not exist (columns: {', '.join(df.columns) or 'none'})"
    )


def hash_split(df: Any, keys: tuple[str, ...], readers: int) -> Any:
    """The sub-partition of each row for a hash exchange (a Column)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    columns = []
    for key in keys:
        name = _find_column(df, key)
        column = F.col(f"`{name}`")
        if isinstance(df.schema[name].dataType, NumericType):
            column = column.cast("double")
            column = F.when(column == 0, F.lit(0.0)).otherwise(column)  # -0.0 joins 0.0
        columns.append(column)
    return F.pmod(F.hash(*columns), F.lit(readers))


def write_partition(
    df: Any,
    output: S.ExchangeOutput,
    target: Path,
    subtask: int,
    parallelism: int,
    schema: Any = None,
) -> None:
    """Write ``df`` as the partition at ``target``; ``schema`` (a StructType) is the schema
    recorded for its readers when ``df`` was read back from another output of the same
    subtask (files make every column nullable; the readers get the subtask's own schema)."""
    from pyspark.sql import functions as F

    readers = output.consumer_parallelism
    split: Any = None
    if output.partitioner == S.HASH:
        split = hash_split(df, output.keys, readers)
    elif output.partitioner == S.REBALANCE:
        split = F.pmod(F.monotonically_increasing_id() + F.lit(subtask), F.lit(readers))
    elif output.partitioner == S.FORWARD:
        count = len(pointwise_readers(subtask, parallelism, readers))
        if count > 1:
            split = F.pmod(F.monotonically_increasing_id(), F.lit(count))
    elif output.partitioner != S.BROADCAST:
        raise ValueError(f"unknown partitioner {output.partitioner!r}")
    target.mkdir(parents=True, exist_ok=True)
    schema_json = (schema if schema is not None else df.schema).json()
    data = str(target / DATA_DIR)
    if split is None:
        df.write.mode("overwrite").parquet(data)
    else:
        df.withColumn(SUB_PARTITION_COLUMN, split).write.mode("overwrite").partitionBy(
            SUB_PARTITION_COLUMN
        ).parquet(data)
    scratch = target / (SCHEMA_FILE + ".tmp")
    scratch.write_text(schema_json)
    os.replace(scratch, target / SCHEMA_FILE)


def subpartition_sizes(target: Path, count: int) -> tuple[int, ...]:
    """The bytes :func:`write_partition` wrote into each of the ``count`` sub-partitions of a
    hash or rebalance output at ``target`` (Spark's hidden and ``_`` files left out; a
    sub-partition no row went to has no directory: 0). One listing per sub-partition, on the
    driver."""
    data = target / DATA_DIR
    sizes = []
    for k in range(count):
        try:
            entries = list(os.scandir(sub_partition_dir(data, k)))
        except FileNotFoundError:
            sizes.append(0)
            continue
        sizes.append(
            sum(e.stat().st_size for e in entries if e.is_file() and e.name[0] not in "._")
        )
    return tuple(sizes)


def read_back(spark: Any, target: Path, schema: Any) -> Any:
    """The rows :func:`write_partition` just wrote to ``target``, all of its sub-partitions, with
    the columns of ``schema`` (the written DataFrame's): the other outputs of a subtask are
    written from these files instead of a cached copy of the result (which adaptive execution
    fills with a Spark job of its own, then keeps in memory). One directory, listed on the
    driver; the schema is given, so nothing is inferred."""
    from pyspark.sql import functions as F

    # The sub-partition column comes back from the directory names; it is not the subtask's.
    df = spark.read.schema(schema).parquet(str(target / DATA_DIR))
    return df.select(*(F.col("`" + name.replace("`", "``") + "`") for name in schema.fieldNames()))


# -- reading ------------------------------------------------------------------------------------


def gate_paths(
    gate: InputGateInfo, exchange_dir: str, job_id: str, subtask: int, parallelism: int
) -> tuple[list[str], str | None]:
    """The directories this subtask reads for ``gate``, and the data set's schema (JSON)."""
    paths: list[str] = []
    schema: str | None = None
    subpartitions: range | None = None
    producers: range | None = None  # all of them
    if gate.read_slices and gate.partitioner in (S.HASH, S.REBALANCE):
        # A skewed sub-partition split across subtasks: this one reads it from some producers.
        subpartitions, producers = subtask_slice(
            gate.read_slices, subtask, gate.subpartitions, gate.producer_parallelism
        )
    elif gate.partitioner in (S.HASH, S.REBALANCE):
        subpartitions = subpartition_range(
            subtask, parallelism, gate.subpartitions, gate.subpartition_bounds
        )
    for part in sorted(gate.partitions, key=lambda p: p.partition_number):
        if producers is not None and part.partition_number not in producers:
            continue
        base = partition_dir(
            exchange_dir, job_id, gate.dataset_id, part.partition_number, part.producer_attempt_id
        )
        schema_file = base / SCHEMA_FILE
        if not schema_file.exists():
            raise MissingPartitionError(
                f"result partition {part.partition_number} of data set {gate.dataset_id} "
                f"(attempt {part.producer_attempt_id}) is missing under {base}; is exchange.dir "
                f"({exchange_dir}) shared by all task executors?"
            )
        if schema is None:
            schema = schema_file.read_text()
        data = base / DATA_DIR
        if subpartitions is not None:
            paths.extend(
                str(path)
                for path in (sub_partition_dir(data, k) for k in subpartitions)
                if path.is_dir()
            )
            continue
        if gate.partitioner == S.FORWARD:
            readers = pointwise_readers(
                part.partition_number, gate.producer_parallelism, parallelism
            )
            if subtask not in readers:
                raise IllegalStateBug(
                    f"subtask {subtask} of {parallelism} is wired to partition "
                    f"{part.partition_number} of data set {gate.dataset_id}, which is read by "
                    f"subtasks {readers.start}..{readers.stop - 1}"
                )
            path = sub_partition_dir(data, subtask - readers.start) if len(readers) > 1 else data
        else:
            path = data
        if path.is_dir():
            paths.append(str(path))
    return paths, schema


def hash_gate_producers(gate: InputGateInfo, subtask: int) -> int | None:
    """How many producer subtasks' partitions consumer ``subtask`` reads from a hash-partitioned
    ``gate`` (every producer's, or those of its skewed slice); None for another partitioner."""
    if gate.partitioner != S.HASH:
        return None
    if not gate.read_slices:
        return len(gate.partitions)
    _, producers = subtask_slice(
        gate.read_slices, subtask, gate.subpartitions, gate.producer_parallelism
    )
    return sum(1 for part in gate.partitions if part.partition_number in producers)


def read_gate(
    spark: Any, gate: InputGateInfo, exchange_dir: str, job_id: str, subtask: int, parallelism: int
) -> Any:
    from pyspark.sql.types import StructType

    paths, schema_json = gate_paths(gate, exchange_dir, job_id, subtask, parallelism)
    if schema_json is None:
        raise MissingPartitionError(f"the input gate of data set {gate.dataset_id} is empty")
    schema = StructType.fromJson(json.loads(schema_json))
    if not paths:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*paths)
