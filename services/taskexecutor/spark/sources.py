"""Sources: each subtask reads its own share of the input.

Files are listed through Hadoop's file system API (so ``hdfs://`` and ``s3a://`` paths work as
well as local ones), hidden files (``_*``, ``.*``) skipped, and shared out among the subtasks
deterministically: largest file first to the subtask with the fewest bytes so far (ties: the
lower subtask, then the path). Every subtask lists the same files, so the shares are disjoint
and complete. ``range`` and ``from_rows`` are split into contiguous slices.

Every subtask reads with the same schema (given, or found over *all* files of the source), so
the subtasks' results fit together even when a subtask gets no file at all.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from sparkmill.common.core.errors import InputNotFoundError
from sparkmill.common.pipeline import plan as S

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputFile:
    path: str
    size: int


def list_files(spark: Any, patterns: tuple[str, ...]) -> list[InputFile]:
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    found: dict[str, InputFile] = {}
    for pattern in patterns:
        path = jvm.org.apache.hadoop.fs.Path(pattern)
        fs = path.getFileSystem(conf)
        statuses = fs.globStatus(path)
        if statuses is None or len(statuses) == 0:
            raise InputNotFoundError(f"input path {pattern} does not exist or matches no file")
        todo = [(status, True) for status in statuses]
        while todo:
            status, matched = todo.pop()
            name = str(status.getPath().getName())
            if name.startswith(("_", ".")) and not matched:
                continue  # hidden: _SUCCESS, .crc files, _temporary...
            if status.isDirectory():
                todo.extend((child, False) for child in fs.listStatus(status.getPath()))
            else:
                text = str(status.getPath().toString())
                found[text] = InputFile(text, int(status.getLen()))
    return sorted(found.values(), key=lambda f: f.path)


def assign_files(files: list[InputFile], parallelism: int) -> list[list[str]]:
    """Largest first to the least loaded subtask; each share sorted by path."""
    shares: list[list[str]] = [[] for _ in range(parallelism)]
    loads = [0] * parallelism
    for f in sorted(files, key=lambda f: (-f.size, f.path)):
        target = min(range(parallelism), key=lambda i: (loads[i], i))
        shares[target].append(f.path)
        loads[target] += max(f.size, 1)
    return [sorted(share) for share in shares]


def _slice(total: int, subtask: int, parallelism: int) -> tuple[int, int]:
    return subtask * total // parallelism, (subtask + 1) * total // parallelism


def _reader(spark: Any, source: S.FileSource) -> Any:
    reader = spark.read.format(source.format)
    options = dict(source.options)
    base = _partitioned_base(source)
    if base is not None:
        options.setdefault("basePath", base)
    if options:
        reader = reader.options(**options)
    return reader


def _partitioned_base(source: S.FileSource) -> str | None:
    """The directory a single-directory source is read under, so that Spark finds the
    ``key=value/`` partition columns of a table written with ``partition_by`` even though each
    subtask loads only its share of the files (text keeps its one ``value`` column)."""
    if source.format == "text" or len(source.paths) != 1:
        return None
    path = source.paths[0]
    if any(c in path for c in "*?[{"):
        return None
    local = path.removeprefix("file://").removeprefix("file:")
    if "://" in local or not os.path.isdir(local):
        return None
    return path


def _local(path: str) -> str:
    return os.path.normpath(path.removeprefix("file://").removeprefix("file:"))


def _flat(files: list[InputFile], base: str) -> bool:
    """Whether every file lies directly in ``base``: then no partition column comes from a
    ``key=value/`` directory, and a footer's schema is the whole schema."""
    root = _local(base)
    return all(os.path.dirname(_local(f.path)) == root for f in files)


def read_files(spark: Any, source: S.FileSource, subtask: int, parallelism: int) -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    files = list_files(spark, source.paths)
    mine = assign_files(files, parallelism)[subtask] if files else []
    schema: Any = source.schema
    if source.format == "text":
        schema = StructType([StructField("value", StringType(), True)])
    elif schema is None and files:
        if source.format == "parquet":
            # Every file of a source is expected to share one schema: read it from the share
            # (or the first file when the share is empty), from the footer on the driver when
            # Spark wrote the file, else as Spark infers it (a Spark job of its own).
            first = mine or [files[0].path]
            base = _partitioned_base(source)
            if base is None or _flat(files, base):
                schema = spark_parquet_schema(spark, first[0])
            if schema is None:
                schema = _reader(spark, source).load(first).schema
        else:
            schema = _reader(spark, source).load([f.path for f in files]).schema
    if not mine:
        return spark.createDataFrame([], schema if schema is not None else StructType([]))
    reader = _reader(spark, source)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load(mine)


SPARK_SCHEMA_KEY = "org.apache.spark.sql.parquet.row.metadata"


def spark_parquet_schema(spark: Any, path: str) -> Any:
    """The schema Spark recorded in the footer of a Parquet file it wrote (the schema it infers
    for that file), read on the driver: no Spark job. ``None`` for another writer's file (or a
    footer that cannot be read): then Spark infers the schema. Not for a partitioned table
    read under its base directory, whose partition columns are not in any footer."""
    import json

    from pyspark.sql.types import StructType

    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    reader = None
    try:
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        input_file = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(hadoop_path, conf)
        reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(input_file)
        text = reader.getFooter().getFileMetaData().getKeyValueMetaData().get(SPARK_SCHEMA_KEY)
        if text is None:
            return None
        return StructType.fromJson(_nullable(json.loads(str(text))))
    except Exception:
        log.debug("could not read the Spark schema in the footer of %s", path, exc_info=True)
        return None
    finally:
        if reader is not None:
            try:
                reader.close()
            except Exception:
                log.debug("closing the footer reader of %s failed", path, exc_info=True)


def _nullable(data_type: Any) -> Any:
    """The JSON form of a data type with every field, array element and map value nullable, as
    Spark makes the schema it infers for files (a footer keeps the writer's nullability)."""
    if not isinstance(data_type, dict):
        return data_type  # a simple type: "long", "string", ...
    kind = data_type.get("type")
    if kind == "struct":
        fields = [
            {**f, "nullable": True, "type": _nullable(f["type"])} for f in data_type["fields"]
        ]
        return {**data_type, "fields": fields}
    if kind == "array":
        return {
            **data_type,
            "containsNull": True,
            "elementType": _nullable(data_type["elementType"]),
        }
    if kind == "map":
        return {
            **data_type,
            "valueContainsNull": True,
            "keyType": _nullable(data_type["keyType"]),
            "valueType": _nullable(data_type["valueType"]),
        }
    return data_type  # a user-defined type stays as it is


def read_range(spark: Any, source: S.RangeSource, subtask: int, parallelism: int) -> Any:
    total = len(range(source.start, source.end, source.step))
    low, high = _slice(total, subtask, parallelism)
    start = source.start + low * source.step
    return spark.range(start, source.start + high * source.step, source.step)


def read_rows(spark: Any, source: S.RowsSource, subtask: int, parallelism: int) -> tuple[Any, int]:
    """The subtask's slice of the rows (and how many), with the schema of all rows."""
    schema = source.schema
    if schema is None or isinstance(schema, list | tuple):
        schema = spark.createDataFrame(list(source.rows), schema).schema
    low, high = _slice(len(source.rows), subtask, parallelism)
    mine = list(source.rows[low:high])
    return spark.createDataFrame(mine, schema), len(mine)
