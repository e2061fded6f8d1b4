"""Database sources and sinks through Spark's JDBC data source, the sink exactly once.

**Credentials** come from a file (``user=`` and ``password=`` lines, mode 0600, checked like
every other secret of the cluster) that the task executor reads when a task needs it; only its
path is in the job graph. Messages that leave this module have the password scrubbed.

**Reading**: with a partition column, subtask *i* of *n* reads the rows of its stride of
``[lower, upper)`` (the first subtask also NULLs and values below, the last values above) as a
Spark JDBC predicate; without one, subtask 0 reads everything.

**Writing** follows the file sinks' commit protocol (``sinks.py``), with tables for directories:

1. Each attempt writes its rows into a staging table of its own,
   ``{table}__sm_{job}_{subtask}_{epoch}_{attempt}`` (the attempt's order is in the name).
2. When the attempt's whole chain succeeded, it records that table in ``sparkmill_staged``.
3. The job's ``commit`` vertex, in **one transaction**: inserts a row per subtask into
   ``sparkmill_commits`` (primary key job id, target, subtask) - first, so that a concurrent
   commit of the same job waits for this one and then fails on the key - creates the target if
   it does not exist, deletes its rows (``overwrite``), and copies each subtask's
   highest-ordered staged table into it. A commit that finds the job's rows in
   ``sparkmill_commits`` does nothing: a repeated or concurrent commit never adds a row twice.
   Afterwards the job's staging tables are dropped.

**An attempt that fails or is cancelled after writing its staging table and before recording
it** drops that table itself (``discard_attempt``): it may be a late attempt whose job has
committed and been cleaned up already, so no one else would.

**No drop waits for long**: a staging table may still be locked by an attempt's transaction
that nobody will end (its host powered off in the middle of the write: the database finds the
session dead only after its keepalive probes, see ``jdbc_access.SERVER_KEEPALIVES``). Every
``DROP`` gives up after :data:`DROP_LOCK_WAIT_S`; the table is then dropped by a later commit to
the same database, like those of ended jobs below. The commit never hangs on it.

**Jobs that fail or are cancelled** leave staging tables behind, and the JobMaster that ends
them has no database driver. So every attempt first registers its table in the job's exchange
directory; when the job ends the JobMaster's clean-up moves that record to the exchange
directory's ``_ended_tables`` (``sparkmill.common.exchange.layout``), and the next job's commit
to the same database URL drops the staging tables of every ended job it finds there.

The transactions run through the JVM's JDBC driver (py4j, the Spark session's gateway): the same
URL, driver and connection options as Spark's own reads and writes, and no second database
client library to install and keep in step.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

from sparkmill.common.core.errors import (
    CommitError,
)
from sparkmill.common.exchange.layout import ended_table_sinks, register_table_sink
from sparkmill.common.pipeline import plan as S
from sparkmill.services.taskexecutor.spark.errors import summarize
from sparkmill.services.taskexecutor.spark.jdbc_access import (
    UNIQUE_VIOLATION,
    Credentials,
    failure,
    load_credentials,
    properties,
    sql_state,
)

log = logging.getLogger(__name__)

COMMITS_TABLE = "sparkmill_commits"
STAGED_TABLE = "sparkmill_staged"
DROP_LOCK_WAIT_S = 3
"""How long a ``DROP TABLE`` of a staging table may wait for its lock (whole seconds: JDBC's
query timeout)."""
# -- reading --------------------------------------------------------------------------------------


def stride_predicates(column: str, lower: int, upper: int, parallelism: int) -> list[str]:
    """One WHERE clause per subtask: disjoint, and together every row (NULLs included)."""
    if parallelism == 1:
        return ["1=1"]
    bounds = [lower + i * (upper - lower) // parallelism for i in range(1, parallelism)]
    predicates = [f"{column} < {bounds[0]} OR {column} IS NULL"]
    predicates += [
        f"{column} >= {low} AND {column} < {high}" for low, high in itertools.pairwise(bounds)
    ]
    predicates.append(f"{column} >= {bounds[-1]}")
    return predicates


def read(spark: Any, source: S.JdbcSource, subtask: int, parallelism: int) -> Any:
    what = f"reading {source.description} from {source.url}"
    credentials = load_credentials(source.credentials_file, what)
    if source.partition_column:
        predicate = stride_predicates(
            source.partition_column, source.lower_bound, source.upper_bound, parallelism
        )[subtask]
    else:
        predicate = "1=1" if subtask == 0 else "1=0"
    relation = source.table or f"({source.query}) sm_query"
    props = properties(source.url, credentials, source.options)
    try:
        # Spark asks the database for the schema here: a missing table or a refused login
        # fails now, with the table's name, instead of deep inside a later write.
        return spark.read.jdbc(source.url, relation, predicates=[predicate], properties=props)
    except Exception as exc:
        raise failure(what, exc, credentials) from None


# -- writing: staging tables ----------------------------------------------------------------------


def _split(table: str) -> tuple[str, str]:
    schema, _, name = table.rpartition(".")
    return schema, name


def _qualified(schema: str, name: str) -> str:
    return f"{schema}.{name}" if schema else name


def staging_prefix(table: str, job_id: str) -> str:
    """The start of the name of every staging table of ``job_id`` for ``table`` (schema left
    out); short enough for PostgreSQL's 63-character names whatever the table's name."""
    base = re.sub(r"[^a-z0-9_]", "", _split(table)[1].lower())[:20] or "t"
    return f"{base}__sm_{job_id[:12]}_"


def staging_table(table: str, job_id: str, subtask: int, epoch: int, attempt: int) -> str:
    schema = _split(table)[0]
    return _qualified(schema, f"{staging_prefix(table, job_id)}{subtask}_{epoch}_{attempt}")


def bookkeeping_table(table: str, name: str) -> str:
    return _qualified(_split(table)[0], name)


def write_attempt(
    df: Any,
    output: S.JdbcSinkOutput,
    exchange_dir: str,
    job_id: str,
    subtask: int,
    epoch: int,
    attempt: int,
) -> str:
    """Step 1: the attempt's rows into its own staging table (replaced if it exists), once the
    table is registered for the clean-up after the job (the module docstring)."""
    if exchange_dir:
        record = {"url": output.url, "table": output.table, "job_id": job_id}
        register_table_sink(
            exchange_dir, job_id, f"{output.url} {output.table}", json.dumps(record)
        )
    staging = staging_table(output.table, job_id, subtask, epoch, attempt)
    what = f"writing table {output.table} (staging table {staging}) of {output.url}"
    credentials = load_credentials(output.credentials_file, what)
    props = properties(output.url, credentials, output.options)
    try:
        df.write.jdbc(output.url, staging, mode="overwrite", properties=props)
    except Exception as exc:
        with (
            contextlib.suppress(Exception),
            connect(df.sparkSession, output.url, credentials) as conn,
        ):
            _drop(conn, staging)
        raise failure(what, exc, credentials) from None
    return staging


def discard_attempt(spark: Any, output: S.JdbcSinkOutput, staging: str) -> None:
    """Drop the staging table of an attempt that wrote it but will not record it (cancelled or
    failed in between). Nothing else names that table, and the job's commit may have come and
    gone already (an attempt that outlived its JobMaster's session): left here, nothing would
    ever drop it. Best effort - a failure is logged, never raised."""
    try:
        credentials = load_credentials(output.credentials_file, f"dropping {staging}")
        with connect(spark, output.url, credentials) as conn:
            _drop(conn, staging)
    except Exception as exc:
        log.warning(
            "could not drop the staging table %s of an attempt that will not commit: %s",
            staging,
            summarize(exc).splitlines()[0],
        )


@contextlib.contextmanager
def connect(spark: Any, url: str, credentials: Credentials) -> Iterator[Any]:
    """A JDBC connection of the session's JVM (auto-commit on), closed afterwards."""
    jvm = spark.sparkContext._jvm
    props = jvm.java.util.Properties()
    for key, value in properties(url, credentials).items():
        props.setProperty(key, value)
    driver = properties(url, Credentials()).get("driver")
    try:
        conn = jvm.java.sql.DriverManager.getConnection(url, props)
    except Exception as exc:
        if not driver or "No suitable driver" not in str(exc):
            raise
        # The driver's jar came through spark.jars only (not on the JVM's class path), where
        # DriverManager does not look: ask the driver class itself.
        gateway = spark.sparkContext._gateway
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        constructor = loader.loadClass(driver).getDeclaredConstructor(
            gateway.new_array(jvm.java.lang.Class, 0)
        )
        conn = constructor.newInstance(gateway.new_array(jvm.java.lang.Object, 0)).connect(
            url, props
        )
        if conn is None:
            raise
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def _execute(conn: Any, sql: str, *params: Any, timeout_s: int = 0) -> int:
    """``timeout_s``: the statement is cancelled after that long (0: no limit)."""
    statement = conn.prepareStatement(sql)
    try:
        if timeout_s:
            # A driver without query timeouts runs the statement unbounded rather than not at all.
            with contextlib.suppress(Exception):
                statement.setQueryTimeout(timeout_s)
        for i, value in enumerate(params, 1):
            if isinstance(value, int):
                statement.setLong(i, value)
            else:
                statement.setString(i, str(value))
        return int(statement.executeUpdate())
    finally:
        statement.close()


def _drop(conn: Any, table: str) -> None:
    """Drop ``table`` if it exists, waiting at most :data:`DROP_LOCK_WAIT_S` for its lock (a
    timeout raises, like any database error)."""
    _execute(conn, f"DROP TABLE IF EXISTS {table}", timeout_s=DROP_LOCK_WAIT_S)


def _query(conn: Any, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    statement = conn.prepareStatement(sql)
    try:
        for i, value in enumerate(params, 1):
            if isinstance(value, int):
                statement.setLong(i, value)
            else:
                statement.setString(i, str(value))
        results = statement.executeQuery()
        width = results.getMetaData().getColumnCount()
        rows = []
        while results.next():
            rows.append(tuple(results.getObject(i) for i in range(1, width + 1)))
        return rows
    finally:
        statement.close()


def _ensure_bookkeeping(conn: Any, table: str) -> None:
    ddl = {
        STAGED_TABLE: (
            "job_id VARCHAR(64) NOT NULL, target VARCHAR(512) NOT NULL, subtask INTEGER NOT NULL,"
            " epoch BIGINT NOT NULL, attempt INTEGER NOT NULL, staging VARCHAR(512) NOT NULL,"
            " columns_json TEXT NOT NULL, PRIMARY KEY (job_id, target, subtask, epoch, attempt)"
        ),
        COMMITS_TABLE: (
            "job_id VARCHAR(64) NOT NULL, target VARCHAR(512) NOT NULL, subtask INTEGER NOT NULL,"
            " staging VARCHAR(512) NOT NULL, rows_committed BIGINT NOT NULL,"
            " committed_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,"
            " PRIMARY KEY (job_id, target, subtask)"
        ),
    }
    for name, columns in ddl.items():
        try:
            _execute(
                conn, f"CREATE TABLE IF NOT EXISTS {bookkeeping_table(table, name)} ({columns})"
            )
        except Exception as exc:
            # Two sessions creating the same table at once: one of them loses on the catalog's
            # unique key; the table exists either way.
            if sql_state(exc) != UNIQUE_VIOLATION:
                raise


def _committed_subtasks(conn: Any, output: S.JdbcSinkOutput, job_id: str) -> int:
    commits = bookkeeping_table(output.table, COMMITS_TABLE)
    rows = _query(
        conn,
        f"SELECT COUNT(*) FROM {commits} WHERE job_id = ? AND target = ?",
        job_id,
        output.table,
    )
    return int(rows[0][0])


def commit_attempt(
    spark: Any,
    output: S.JdbcSinkOutput,
    job_id: str,
    subtask: int,
    epoch: int,
    attempt: int,
    staging: str,
    columns: list[str],
) -> bool:
    """Step 2: record the attempt's staging table as a candidate output of its subtask.

    ``False`` (and the table dropped) when the job has committed already: an attempt of a
    deposed JobMaster that finishes late adds nothing.
    """
    what = f"recording the staged rows of table {output.table} (subtask {subtask})"
    credentials = load_credentials(output.credentials_file, what)
    staged = bookkeeping_table(output.table, STAGED_TABLE)
    try:
        with connect(spark, output.url, credentials) as conn:
            _ensure_bookkeeping(conn, output.table)
            if _committed_subtasks(conn, output, job_id):
                _drop(conn, staging)
                return False
            conn.setAutoCommit(False)
            key = (job_id, output.table, subtask, epoch, attempt)
            _execute(
                conn,
                f"DELETE FROM {staged} WHERE job_id = ? AND target = ? AND subtask = ?"
                " AND epoch = ? AND attempt = ?",
                *key,
            )
            _execute(
                conn,
                f"INSERT INTO {staged} (job_id, target, subtask, epoch, attempt, staging,"
                " columns_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
                *key,
                staging,
                json.dumps(columns),
            )
            conn.commit()
            return True
    except Exception as exc:
        raise failure(what, exc, credentials) from None


# -- the job's commit -----------------------------------------------------------------------------


def _quoted(column: str) -> str:
    # Spark's JDBC writer creates the staging table with quoted column names.
    return '"' + column.replace('"', '""') + '"'


def _winners(
    conn: Any, output: S.JdbcSinkOutput, job_id: str, parallelism: int
) -> list[tuple[str, list[str]]]:
    staged = bookkeeping_table(output.table, STAGED_TABLE)
    winners: list[tuple[str, list[str]]] = []
    missing: list[int] = []
    for subtask in range(parallelism):
        rows = _query(
            conn,
            f"SELECT staging, columns_json FROM {staged} WHERE job_id = ? AND target = ?"
            " AND subtask = ? ORDER BY epoch DESC, attempt DESC",
            job_id,
            output.table,
            subtask,
        )
        if not rows:
            missing.append(subtask)
            continue
        winners.append((str(rows[0][0]), list(json.loads(str(rows[0][1])))))
    if missing:
        raise CommitError(
            f"table {output.table}: subtasks {missing} of the sink have no staged rows"
        )
    return winners


def _target_exists(conn: Any, table: str) -> bool:
    savepoint = conn.setSavepoint()
    try:
        _query(conn, f"SELECT 1 FROM {table} WHERE 1 = 0")
    except Exception as exc:
        if sql_state(exc) != "42P01":
            raise
        conn.rollback(savepoint)
        return False
    conn.releaseSavepoint(savepoint)
    return True


def commit_job(spark: Any, commit: S.JdbcCommit, job_id: str, exchange_dir: str = "") -> int:
    """Step 3: the winning attempts' rows into the target in one transaction (see the module
    docstring); the number of rows it added, 0 when the job had committed already. Then the
    staging tables of ended jobs that wrote the same database go."""
    output = commit.output
    what = f"committing table {output.table} of {output.url}"
    credentials = load_credentials(output.credentials_file, what)
    commits = bookkeeping_table(output.table, COMMITS_TABLE)
    try:
        with connect(spark, output.url, credentials) as conn:
            _ensure_bookkeeping(conn, output.table)
            done = _committed_subtasks(conn, output, job_id)
            if done == commit.parallelism:
                _drop_staging(conn, output.table, job_id)
                sweep_ended_jobs(conn, output.url, exchange_dir)
                return 0
            if done:
                raise CommitError(
                    f"table {output.table}: {done} of {commit.parallelism} subtasks of job "
                    f"{job_id} are recorded as committed; a commit is all or nothing, so this "
                    f"is a bug or {commits} was edited by hand"
                )
            winners = _winners(conn, output, job_id, commit.parallelism)
            conn.setAutoCommit(False)
            try:
                added = _move_rows(conn, output, job_id, winners)
            except Exception as exc:
                conn.rollback()
                if sql_state(exc) == UNIQUE_VIOLATION:
                    return 0  # a concurrent commit of this job won; it moved the rows
                raise
            conn.setAutoCommit(True)
            _drop_staging(conn, output.table, job_id)
            sweep_ended_jobs(conn, output.url, exchange_dir)
            return added
    except CommitError:
        raise
    except Exception as exc:
        raise failure(what, exc, credentials) from None


def _move_rows(
    conn: Any, output: S.JdbcSinkOutput, job_id: str, winners: list[tuple[str, list[str]]]
) -> int:
    commits = bookkeeping_table(output.table, COMMITS_TABLE)
    # The keys first: a concurrent commit of the same job blocks on them until this
    # transaction ends, then fails on the primary key (and does nothing).
    for subtask, (staging, _) in enumerate(winners):
        _execute(
            conn,
            f"INSERT INTO {commits} (job_id, target, subtask, staging, rows_committed)"
            " VALUES (?, ?, ?, ?, 0)",
            job_id,
            output.table,
            subtask,
            staging,
        )
    if not _target_exists(conn, output.table):
        _execute(conn, f"CREATE TABLE {output.table} AS SELECT * FROM {winners[0][0]} WHERE 1 = 0")
    if output.mode == "overwrite":
        _execute(conn, f"DELETE FROM {output.table}")
    added = 0
    for subtask, (staging, columns) in enumerate(winners):
        names = ", ".join(_quoted(c) for c in columns)
        rows = _execute(conn, f"INSERT INTO {output.table} ({names}) SELECT {names} FROM {staging}")
        _execute(
            conn,
            f"UPDATE {commits} SET rows_committed = ? WHERE job_id = ? AND target = ?"
            " AND subtask = ?",
            rows,
            job_id,
            output.table,
            subtask,
        )
        added += rows
    conn.commit()
    return added


def _drop_staging(conn: Any, table: str, job_id: str) -> bool:
    """Drop every staging table of the job (recorded ones, and those of attempts that died
    before recording theirs), then their records; False (and a warning) when a table could not
    be dropped: that only costs a leftover table until the next commit to the database, found by
    its name's prefix."""
    schema, _ = _split(table)
    left: list[str] = []
    try:
        metadata = conn.getMetaData()
        names = set()
        if _exists(metadata, schema, STAGED_TABLE):
            staged = bookkeeping_table(table, STAGED_TABLE)
            names = {
                str(row[0])
                for row in _query(
                    conn,
                    f"SELECT staging FROM {staged} WHERE job_id = ? AND target = ?",
                    job_id,
                    table,
                )
            }
        escape = str(metadata.getSearchStringEscape() or "")
        pattern = staging_prefix(table, job_id).replace("_", escape + "_") + "%"
        results = metadata.getTables(None, schema or None, pattern, None)
        while results.next():
            names.add(_qualified(schema, str(results.getString("TABLE_NAME"))))
        for name in sorted(names):
            try:
                _drop(conn, name)
            except Exception as exc:
                # Most likely locked by the open transaction of an attempt whose host is gone.
                left.append(f"{name} ({summarize(exc).splitlines()[0]})")
        if _exists(metadata, schema, STAGED_TABLE):
            _execute(
                conn,
                f"DELETE FROM {bookkeeping_table(table, STAGED_TABLE)}"
                " WHERE job_id = ? AND target = ?",
                job_id,
                table,
            )
    except Exception as exc:
        left.append(summarize(exc).splitlines()[0])
    if left:
        log.warning(
            "job %s: could not drop every staging table of %s, a later commit to the database"
            " will: %s",
            job_id,
            table,
            "; ".join(left),
        )
        return False
    return True


def _exists(metadata: Any, schema: str, name: str) -> bool:
    results = metadata.getTables(None, schema or None, name, None)
    return bool(results.next())


def sweep_ended_jobs(conn: Any, url: str, exchange_dir: str) -> int:
    """Drop the staging tables of the ended jobs recorded under ``exchange_dir`` that wrote
    ``url`` (the database ``conn`` is connected to; others wait for a commit there); the number
    of jobs swept. Never fails: what it cannot drop waits for the next commit."""
    swept = 0
    for path, text in ended_table_sinks(exchange_dir):
        try:
            record = json.loads(text)
            if record["url"] != url:
                continue
            table, job_id = str(record["table"]), str(record["job_id"])
        except (ValueError, KeyError, TypeError):
            log.warning("removing the unreadable record %s of an ended job's table", path)
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        if _drop_staging(conn, table, job_id):
            log.info("job %s ended: dropped its staging tables of %s", job_id, table)
            swept += 1
            with contextlib.suppress(OSError):
                path.unlink()
    return swept
