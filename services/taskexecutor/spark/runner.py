"""Run one subtask of a chain: build its DataFrame, write every output, count what it did.

Building the DataFrame runs the user's code (``transform`` functions, recorded expressions) on
the task thread; Spark only computes when the outputs are written. Only when *every* output
was written (and the task was not cancelled) are the sinks' attempt directories committed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from dataclasses import dataclass
from typing import Any

from sparkmill.common.core.errors import (
    CommitError,
    DatabaseAccessError,
    DatabaseError,
    OperatorError,
    PartitionNotFoundError,
    SparkJobError,
    TaskCancelledError,
)
from sparkmill.common.core.ids import short
from sparkmill.common.core.io_counters import NO_IO, IOCounters
from sparkmill.common.core.partitions import InputGateInfo
from sparkmill.common.exchange.layout import (
    cleanup_job,
    missing_partitions,
    partition_dir,
    sink_path_problem,
)
from sparkmill.common.pipeline import plan as S
from sparkmill.common.pipeline.collect import encode_rows
from sparkmill.common.pipeline.expressions import resolve
from sparkmill.services.taskexecutor.context import TaskContext, TaskOutcome
from sparkmill.services.taskexecutor.spark import exchange, jdbc, sinks, sources
from sparkmill.services.taskexecutor.spark.errors import summarize
from sparkmill.services.taskexecutor.spark.metrics import SparkIOMetrics

log = logging.getLogger(__name__)

MAX_COLLECT_BYTES = 8 * 1024 * 1024


@dataclass
class _Built:
    frames: list[Any]
    rows_in: int  # records of in-memory sources (Spark counts no input for them)


def check_cancelled(cancelled: threading.Event) -> None:
    if cancelled.is_set():
        raise TaskCancelledError("the task was cancelled")


def build(spark: Any, spec: S.ChainSpec, context: TaskContext) -> _Built:
    frames: list[Any] = []
    rows_in = 0
    gates = {gate.dataset_id: gate for gate in context.inputs}
    for node in spec.nodes:
        check_cancelled(context.cancelled)
        inputs = [frames[i] for i in node.inputs]
        try:
            op = node.op
            if isinstance(op, S.RowsSource):
                df, count = sources.read_rows(spark, op, context.subtask_index, context.parallelism)
                rows_in += count
            elif isinstance(op, S.GateInput):
                gate = gates.get(op.dataset_id)
                if gate is None:
                    raise OperatorError(f"no input gate for data set {op.dataset_id}")
                df = exchange.read_gate(
                    spark,
                    gate,
                    context.exchange_dir,
                    context.job_id,
                    context.subtask_index,
                    context.parallelism,
                )
            elif isinstance(op, S.FinalAgg) and of_one_producer(
                spec, node, gates, context.subtask_index
            ):
                df = _unique_partials(op, inputs[0])
            else:
                df = _evaluate(spark, op, inputs, context)
        except (TaskCancelledError, OperatorError, DatabaseError, DatabaseAccessError):
            raise
        except Exception as exc:
            raise OperatorError(f"operator '{node.label}' failed: {summarize(exc)}") from exc
        frames.append(df)
    return _Built(frames, rows_in)


def of_one_producer(
    spec: S.ChainSpec, node: S.NodeSpec, gates: dict[str, InputGateInfo], subtask: int
) -> bool:
    """Whether the partial aggregates a final aggregation merges come straight from one
    producer subtask's input gate. That producer grouped its rows by the same keys, so each key
    has one row of partials here: nothing to merge."""
    if len(node.inputs) != 1:
        return False
    source = spec.nodes[node.inputs[0]].op
    if not isinstance(source, S.GateInput) or source.dataset_id not in gates:
        return False
    producers = exchange.hash_gate_producers(gates[source.dataset_id], subtask)
    return producers is not None and producers <= 1


def _unique_partials(op: S.FinalAgg, df: Any) -> Any:
    """A final aggregation over one row per key: each merge (a sum, min or max of one value)
    is that value, so a projection gives the result without the shuffle a grouping costs."""
    from pyspark.sql import functions as F

    types = {f.name: f.dataType for f in df.schema.fields}
    return df.select(
        *op.keys,
        *(F.col(partial).cast(types[partial]).alias(name) for _, partial, name in op.merges),
    )


def _evaluate(spark: Any, op: S.Operation, inputs: list[Any], context: TaskContext) -> Any:
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    subtask, parallelism = context.subtask_index, context.parallelism
    if isinstance(op, S.FileSource):
        return sources.read_files(spark, op, subtask, parallelism)
    if isinstance(op, S.RangeSource):
        return sources.read_range(spark, op, subtask, parallelism)
    if isinstance(op, S.JdbcSource):
        return jdbc.read(spark, op, subtask, parallelism)
    df = inputs[0]
    if isinstance(op, S.Apply):
        return getattr(df, op.method)(*resolve(op.args), **resolve(op.kwargs))
    if isinstance(op, S.Transform):
        result = op.fn(df)
        if not isinstance(result, DataFrame):
            raise TypeError(f"the function returned a {type(result).__name__}, not a DataFrame")
        return result
    if isinstance(op, S.Aggregate | S.PartialAgg):
        return df.groupBy(*op.keys).agg(*resolve(op.aggs))
    if isinstance(op, S.FinalAgg):
        types = {f.name: f.dataType for f in df.schema.fields}
        merged = [
            getattr(F, function)(F.col(partial)).cast(types[partial]).alias(name)
            for function, partial, name in op.merges
        ]
        return df.groupBy(*op.keys).agg(*merged)
    if isinstance(op, S.Join):
        return df.join(inputs[1], on=list(op.on), how=op.how)
    if isinstance(op, S.Union):
        if op.by_name:
            return functools.reduce(
                lambda a, b: a.unionByName(b, allowMissingColumns=op.allow_missing_columns),
                inputs,
            )
        return functools.reduce(lambda a, b: a.union(b), inputs)
    raise OperatorError(f"unknown operation {type(op).__name__}")


def run_chain(spark: Any, spec: S.ChainSpec, context: TaskContext, tag: str) -> TaskOutcome:
    try:
        return _run_chain(spark, spec, context, tag)
    except TaskCancelledError:
        raise
    except Exception as exc:
        # Whatever Spark said (a missing file, a corrupt footer, ...): if inputs are gone, that
        # is the cause, and only running their producers again can fix it.
        lost = missing_partitions(context.inputs, context.exchange_dir, context.job_id)
        if not lost:
            raise
        names = ", ".join(
            f"{short(p.dataset_id)}[{p.partition_number}] of attempt {short(p.producer_attempt_id)}"
            for p in lost[:5]
        )
        more = f" and {len(lost) - 5} more" if len(lost) > 5 else ""
        raise PartitionNotFoundError(
            f"vertex '{spec.vertex_name}' cannot read {len(lost)} input partition(s): "
            f"{names}{more} (missing under {context.exchange_dir}); their producers must run "
            f"again. Cause: {summarize(exc).splitlines()[0]}",
            lost,
        ) from exc


@dataclass(frozen=True)
class OutputOrder:
    """How a subtask writes its outputs: in this order, and from what."""

    outputs: list[S.Output]
    # The outputs after the first are written from the first's files (an exchange output).
    read_back: bool = False
    # They are written from a cached copy of the result (persisted for the subtask).
    persist: bool = False


def output_order(outputs: list[S.Output], ordered: bool) -> OutputOrder:
    """One output is written straight from the result. Several are written without computing
    the result twice: from the files of an exchange output written first (its Parquet, read
    back with the result's schema: one Spark job per further output, nothing cached), or, where
    reading back would change what an output gets, from a persisted result (adaptive execution
    fills the cache with a Spark job of its own before the first write, and the cache holds the
    result in memory):

    * no exchange output: nothing to read back that keeps every type exactly;
    * a result with an order (a sort, a sort and a limit): files read back come in no order;
    * a database sink: Spark creates its staging table from the schema, and files read back
      make every column nullable (its NOT NULL columns would be lost).
    """
    if len(outputs) <= 1:
        return OutputOrder(list(outputs))
    primary = next((o for o in outputs if isinstance(o, S.ExchangeOutput)), None)
    if primary is None or ordered or any(isinstance(o, S.JdbcSinkOutput) for o in outputs):
        return OutputOrder(list(outputs), persist=True)
    return OutputOrder([primary, *(o for o in outputs if o is not primary)], read_back=True)


# Logical plan nodes whose rows come in an order (a sort), or whose order cannot be seen (a
# cached plan): a result over any of them keeps its order through every output.
_ORDERED_NODES = frozenset({"Sort", "InMemoryRelation"})


def has_order(df: Any) -> bool:
    """Whether the rows of ``df`` may come in an order its outputs must keep: its optimized
    logical plan has a sort anywhere (``outputOrdering`` is not enough: a projection that
    drops the sort key forgets the order, yet the rows still come sorted). No Spark job runs;
    a sort the optimizer found useless (under an aggregation) is gone already."""
    try:
        todo = [df._jdf.queryExecution().optimizedPlan()]
        while todo:
            node = todo.pop()
            if str(node.nodeName()) in _ORDERED_NODES:
                return True
            children = node.children()
            todo.extend(children.apply(i) for i in range(int(children.size())))
        return False
    except Exception:  # cannot tell (another kind of DataFrame): keep the order
        log.debug("could not read the plan of a result", exc_info=True)
        return True


def with_decided_splits(spec: S.ChainSpec, consumers: dict[str, int]) -> S.ChainSpec:
    """``spec`` with each exchange split for as many readers as the JobMaster decided (the
    plan was compiled before an automatic parallelism was known)."""
    outputs = tuple(
        dataclasses.replace(o, consumer_parallelism=consumers[o.dataset_id])
        if isinstance(o, S.ExchangeOutput) and consumers.get(o.dataset_id, 0) > 0
        else o
        for o in spec.outputs
    )
    return dataclasses.replace(spec, outputs=outputs) if outputs != spec.outputs else spec


def _run_chain(spark: Any, spec: S.ChainSpec, context: TaskContext, tag: str) -> TaskOutcome:
    staged: list[tuple[S.JdbcSinkOutput, str, list[str]]] = []
    try:
        return _write_and_commit(spark, spec, context, tag, staged)
    except BaseException:
        # A staging table this attempt wrote but did not record (cancelled or failed in
        # between) is named nowhere else: dropped here, or by no one (see jdbc.py).
        for output, staging, _ in staged:
            jdbc.discard_attempt(spark, output, staging)
        raise


def _write_and_commit(
    spark: Any,
    spec: S.ChainSpec,
    context: TaskContext,
    tag: str,
    staged: list[tuple[S.JdbcSinkOutput, str, list[str]]],
) -> TaskOutcome:
    """The chain's outputs written, then its sinks' attempts committed; ``staged`` holds the
    staging tables written and not recorded yet."""
    built = build(spark, spec, context)
    root = built.frames[spec.root]
    spec = with_decided_splits(spec, context.consumer_parallelism)
    metrics = SparkIOMetrics(spark.sparkContext, tag)
    order = output_order(list(spec.outputs), len(spec.outputs) > 1 and has_order(root))
    if order.persist:
        from pyspark import StorageLevel

        root = root.persist(StorageLevel.MEMORY_AND_DISK)
    source = root  # what the next output is written from
    written: list[tuple[S.SinkOutput, Any]] = []
    sizes: list[tuple[str, tuple[int, ...]]] = []
    accumulator = b""
    collected = 0
    try:
        for output in order.outputs:
            check_cancelled(context.cancelled)
            try:
                if isinstance(output, S.ExchangeOutput):
                    target = partition_dir(
                        context.exchange_dir,
                        context.job_id,
                        output.dataset_id,
                        context.subtask_index,
                        context.attempt_id,
                    )
                    exchange.write_partition(
                        source,
                        output,
                        target,
                        context.subtask_index,
                        context.parallelism,
                        schema=root.schema if source is not root else None,
                    )
                    if output.partitioner in (S.HASH, S.REBALANCE):
                        # What a consumer decided from these bytes balances its ranges by.
                        count = output.consumer_parallelism
                        sizes.append(
                            (output.dataset_id, exchange.subpartition_sizes(target, count))
                        )
                    if order.read_back and source is root:
                        source = exchange.read_back(spark, target, root.schema)
                elif isinstance(output, S.SinkOutput):
                    _check_sink_path(output.path, context)
                    path = sinks.write_attempt(
                        source,
                        output,
                        context.exchange_dir,
                        context.job_id,
                        context.subtask_index,
                        context.attempt_id,
                    )
                    written.append((output, path))
                elif isinstance(output, S.JdbcSinkOutput):
                    staging = jdbc.write_attempt(
                        source,
                        output,
                        context.exchange_dir,
                        context.job_id,
                        context.subtask_index,
                        context.job_master_epoch,
                        context.attempt_number,
                    )
                    staged.append((output, staging, list(root.columns)))
                else:
                    accumulator, collected = _collect(source, output, context.subtask_index)
                # Later outputs read the cache or the files just written: Spark counts that as
                # input again, but the subtask read its input once.
                metrics.mark_inputs_read()
            except (
                TaskCancelledError,
                OperatorError,
                CommitError,
                DatabaseError,
                DatabaseAccessError,
            ):
                raise
            except Exception as exc:
                check_cancelled(context.cancelled)
                raise SparkJobError(
                    f"vertex '{spec.vertex_name}' failed writing {_describe(output)}: "
                    f"{summarize(exc)}"
                ) from exc
    finally:
        if order.persist:
            root.unpersist(blocking=False)
    try:
        counts = metrics.totals()
    except Exception:  # counting must never fail a task that did its work
        log.warning("%s: could not read Spark's task metrics", spec.vertex_name, exc_info=True)
        counts = NO_IO
    check_cancelled(context.cancelled)
    for output, path in written:
        sinks.commit_task(
            output,
            context.job_id,
            context.subtask_index,
            path,
            context.attempt_number,
            context.job_master_epoch,
        )
    while staged:
        jdbc_output, staging, columns = staged[0]
        jdbc.commit_attempt(
            spark,
            jdbc_output,
            context.job_id,
            context.subtask_index,
            context.job_master_epoch,
            context.attempt_number,
            staging,
            columns,
        )
        staged.pop(0)  # recorded: the job's commit or clean-up owns it now
    own = IOCounters(records_in=built.rows_in, records_out=collected, bytes_out=len(accumulator))
    return TaskOutcome(io=counts + own, accumulator=accumulator, written=tuple(sizes))


def _describe(output: S.Output) -> str:
    if isinstance(output, S.ExchangeOutput):
        return f"its {output.partitioner} exchange to {output.consumer_parallelism} subtasks"
    if isinstance(output, S.SinkOutput):
        return f"{output.format} output {output.path}"
    if isinstance(output, S.JdbcSinkOutput):
        return f"table {output.table} of {output.url}"
    return f"collect '{output.name}'"


def _collect(df: Any, output: S.CollectOutput, subtask: int) -> tuple[bytes, int]:
    rows = df.limit(output.limit + 1).collect()
    truncated = len(rows) > output.limit
    rows = rows[: output.limit]
    blob = encode_rows(df.columns, [tuple(r) for r in rows], truncated)
    if len(blob) > MAX_COLLECT_BYTES:
        raise OperatorError(
            f"collect '{output.name}': subtask {subtask} returned {len(blob) >> 20} MiB, more "
            f"than {MAX_COLLECT_BYTES >> 20} MiB; collect() is for small results, write large "
            "ones to a sink"
        )
    return blob, len(rows)


def _check_sink_path(path: str, context: TaskContext) -> None:
    # The submission checked the sink paths the graph declares; the payload is what runs, so
    # its paths are checked again here, before anything is written or deleted.
    problem = sink_path_problem(path, context.protected_dirs)
    if problem:
        raise CommitError(f"refusing to write this sink: {problem}")


def run_commit(spec: S.CommitSpec, context: TaskContext, spark: Any = None) -> TaskOutcome:
    """The final vertex: publish every sink, then drop the job's exchange data. ``spark`` (a
    session, for its JVM's JDBC drivers) is needed only when the job writes a database."""
    spec = with_decided_writers(spec, context)
    files = 0
    for sink in spec.sinks:
        check_cancelled(context.cancelled)
        _check_sink_path(sink.path, context)
        files += sinks.commit_job(sink, context.job_id)
        log.info("job %s: committed %s (%d files)", context.job_id, sink.path, files)
    rows = 0
    for table in spec.jdbc:
        check_cancelled(context.cancelled)
        if spark is None:
            raise CommitError("committing a database sink needs the task executor's Spark session")
        added = jdbc.commit_job(spark, table, context.job_id, context.exchange_dir)
        rows += added
        log.info(
            "job %s: committed table %s (%d rows added)", context.job_id, table.output.table, added
        )
    cleanup_job(context.exchange_dir, context.job_id)
    return TaskOutcome(io=IOCounters(records_out=files + rows))


def with_decided_writers(spec: S.CommitSpec, context: TaskContext) -> S.CommitSpec:
    """``spec`` with each sink's number of writing subtasks taken from its done gate: the
    JobMaster decided it after the plan was compiled (the plan then holds -1)."""
    writers = {gate.dataset_id: gate.producer_parallelism for gate in context.inputs}

    def decided(number: int, dataset_id: str) -> int:
        found = writers.get(dataset_id, 0)
        if found > 0:
            return found
        if number < 1:
            raise CommitError(
                f"the commit has no input gate for data set {dataset_id}, so it cannot tell "
                "how many subtasks wrote its sink"
            )
        return number

    return S.CommitSpec(
        tuple(
            dataclasses.replace(s, parallelism=decided(s.parallelism, s.done_dataset_id))
            for s in spec.sinks
        ),
        tuple(
            dataclasses.replace(j, parallelism=decided(j.parallelism, j.done_dataset_id))
            for j in spec.jdbc
        ),
    )
