"""Blocking result partitions: how vertices hand data to each other (Parquet under exchange.dir).

A producer subtask writes its partition of a data set once, completely, before any consumer
starts (the edges are BLOCKING)::

    {exchange_dir}/{job_id}/{dataset_id}/{producer_subtask}/{attempt_id}/
        _schema.json                    the DataFrame schema (so empty partitions are fine)
        data/                           Parquet, split into sub-partitions when needed:
        data/__sm_part=3/               the rows for reader 3

Every attempt writes to its own directory, and a consumer reads exactly the attempts its input
gate names (each partition's *finished* producer attempt): files of failed or superseded
attempts are never read.

Splitting, per partitioner:

* ``hash`` - one sub-partition per consumer subtask: ``pmod(hash(keys), n)`` with Spark's own
  Murmur3 hash (the same in every process), numeric keys hashed as normalized doubles so that
  equal values of different numeric types (an int and a long key of a join) meet;
* ``rebalance`` - round robin over the consumer subtasks;
* ``broadcast`` - not split; every consumer reads everything;
* ``forward`` (POINTWISE) - with S producers and T consumers, S >= T: each consumer reads whole
  partitions; S < T: partition p is split round robin among its readers
  ``[ceil(p*T/S), ceil((p+1)*T/S))`` (the execution graph's pointwise rule).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sparkmill.common.jobgraph import NO_DATA_PARTITIONER
from sparkmill.services.taskexecutor.operators import InputGateInfo, InputPartitionInfo
from sparkmill.services.taskexecutor.spark import spec as S
from sparkmill.services.taskexecutor.spark.cleanup import job_exchange_dir

SCHEMA_FILE = "_schema.json"
DATA_DIR = "data"


class MissingPartitionError(RuntimeError):
    """A result partition named by an input gate is not on disk."""


def partition_dir(
    exchange_dir: str, job_id: str, dataset_id: str, producer_subtask: int, attempt_id: str
) -> Path:
    return job_exchange_dir(exchange_dir, job_id) / dataset_id / str(producer_subtask) / attempt_id


def pointwise_readers(partition: int, producers: int, consumers: int) -> tuple[int, int]:
    """(first reader, number of readers) of a partition under the POINTWISE rule."""
    if producers >= consumers:
        return partition * consumers // producers, 1
    first = -(-partition * consumers // producers)
    end = -(-(partition + 1) * consumers // producers)
    return first, end - first


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
) -> None:
    from pyspark.sql import functions as F

    readers = output.consumer_parallelism
    split: Any = None
    if output.partitioner == S.HASH:
        split = hash_split(df, output.keys, readers)
    elif output.partitioner == S.REBALANCE:
        split = F.pmod(F.monotonically_increasing_id() + F.lit(subtask), F.lit(readers))
    elif output.partitioner == S.FORWARD:
        _, count = pointwise_readers(subtask, parallelism, readers)
        if count > 1:
            split = F.pmod(F.monotonically_increasing_id(), F.lit(count))
    elif output.partitioner != S.BROADCAST:
        raise ValueError(f"unknown partitioner {output.partitioner!r}")
    target.mkdir(parents=True, exist_ok=True)
    schema_json = df.schema.json()
    data = str(target / DATA_DIR)
    if split is None:
        df.write.mode("overwrite").parquet(data)
    else:
        df.withColumn(S.SUB_PARTITION_COLUMN, split).write.mode("overwrite").partitionBy(
            S.SUB_PARTITION_COLUMN
        ).parquet(data)
    scratch = target / (SCHEMA_FILE + ".tmp")
    scratch.write_text(schema_json)
    os.replace(scratch, target / SCHEMA_FILE)


# -- reading ------------------------------------------------------------------------------------


def partition_readable(exchange_dir: str, job_id: str, part: InputPartitionInfo) -> bool:
    """Whether a finished attempt's partition is (still) on disk: its schema file is written
    only after the data."""
    base = partition_dir(
        exchange_dir, job_id, part.dataset_id, part.partition_number, part.producer_attempt_id
    )
    return (base / SCHEMA_FILE).is_file() and (base / DATA_DIR).is_dir()


def missing_partitions(
    gates: list[InputGateInfo], exchange_dir: str, job_id: str
) -> tuple[InputPartitionInfo, ...]:
    """The partitions named by ``gates`` that are not readable (a stat or two per partition:
    called after a task failed, to tell a lost input from any other failure)."""
    return tuple(
        part
        for gate in gates
        if gate.partitioner != NO_DATA_PARTITIONER
        for part in gate.partitions
        if not partition_readable(exchange_dir, job_id, part)
    )


def gate_paths(
    gate: InputGateInfo, exchange_dir: str, job_id: str, subtask: int, parallelism: int
) -> tuple[list[str], str | None]:
    """The directories this subtask reads for ``gate``, and the data set's schema (JSON)."""
    paths: list[str] = []
    schema: str | None = None
    for part in sorted(gate.partitions, key=lambda p: p.partition_number):
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
        if gate.partitioner in (S.HASH, S.REBALANCE):
            path = data / f"{S.SUB_PARTITION_COLUMN}={subtask}"
        elif gate.partitioner == S.FORWARD:
            first, count = pointwise_readers(
                part.partition_number, gate.producer_parallelism, parallelism
            )
            path = data / f"{S.SUB_PARTITION_COLUMN}={subtask - first}" if count > 1 else data
        else:
            path = data
        if path.is_dir():
            paths.append(str(path))
    return paths, schema


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
