"""What a job keeps under ``exchange.dir``, where to find it, and how it is removed.

Layout::

    {exchange_dir}/{job_id}/{dataset_id}/{producer_subtask}/{attempt_id}/   a result partition
        _schema.json                    the DataFrame schema, written last (the marker that
                                        the partition is complete)
        data/                           Parquet, split into sub-partitions when needed:
        data/__sm_part=3/               the rows for reader 3
    {exchange_dir}/{job_id}/_sinks/{digest}                                 a sink's path
    {exchange_dir}/{job_id}/_tables/{digest}                a database sink's record
    {exchange_dir}/_ended_tables/{job_id}.{digest}          ... once the job ended

Every attempt writes to its own directory, and a consumer reads exactly the attempts its input
gate names: files of failed or superseded attempts are never read.

A sink attempt registers its output path before it writes anything, so the temporary
directory ``{path}/_temporary/{job_id}`` is found and removed even if the job never commits.
A database sink attempt registers its table the same way; the JobMaster has no database
driver, so when the job ends its records move to ``_ended_tables``, where the task executors'
next commit to the same database finds them and drops the job's staging tables.

Importable without PySpark: the JobMaster checks which partitions are still readable when it
recovers a job, and calls :func:`cleanup_job` when a job ends FAILED or CANCELED (on success
the job's ``commit`` vertex calls it).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Collection, Iterable
from pathlib import Path

from sparkmill.common.core.errors import InvalidArgumentError
from sparkmill.common.core.ids import is_valid_id
from sparkmill.common.core.partitions import NO_DATA_PARTITIONER, InputGateInfo, InputPartitionInfo

log = logging.getLogger(__name__)

SINKS_DIR = "_sinks"
TABLE_SINKS_DIR = "_tables"
ENDED_TABLES_DIR = "_ended_tables"
TEMPORARY_DIR = "_temporary"
SCHEMA_FILE = "_schema.json"
DATA_DIR = "data"
SUB_PARTITION_COLUMN = "__sm_part"
"""Column by which a producer splits its result partition into one directory per reader."""


def _checked_id(job_id: str) -> str:
    # Ids become directory names that cleanup deletes: a path or '..' must never get here.
    if not is_valid_id(job_id):
        raise InvalidArgumentError(f"job id {job_id[:80]!r} is not 32 lowercase hex digits")
    return job_id


def job_exchange_dir(exchange_dir: str, job_id: str) -> Path:
    return Path(exchange_dir) / _checked_id(job_id)


def partition_dir(
    exchange_dir: str, job_id: str, dataset_id: str, producer_subtask: int, attempt_id: str
) -> Path:
    return job_exchange_dir(exchange_dir, job_id) / dataset_id / str(producer_subtask) / attempt_id


def sub_partition_dir(data: Path, reader: int) -> Path:
    """The rows of a split partition's ``data`` directory meant for its ``reader``-th reader."""
    return data / f"{SUB_PARTITION_COLUMN}={reader}"


def partition_readable(exchange_dir: str, job_id: str, part: InputPartitionInfo) -> bool:
    """Whether a finished attempt's partition is (still) on disk: its schema file is written
    only after the data."""
    base = partition_dir(
        exchange_dir, job_id, part.dataset_id, part.partition_number, part.producer_attempt_id
    )
    return (base / SCHEMA_FILE).is_file() and (base / DATA_DIR).is_dir()


def missing_partitions(
    gates: Iterable[InputGateInfo], exchange_dir: str, job_id: str
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


def local_path(path: str) -> Path:
    """A sink or exchange path on a local or shared (POSIX) file system."""
    if path.startswith("file://"):
        path = path[len("file://") :]
    elif path.startswith("file:"):
        path = path[len("file:") :]
    if "://" in path:
        raise ValueError(
            f"{path}: sinks write to local or shared (POSIX) file systems only; the commit "
            "protocol renames directories"
        )
    return Path(path)


def sink_path_problem(path: str, protected_dirs: Collection[str]) -> str | None:
    """Why a sink may not write to ``path`` (``None`` if it may).

    Publishing a sink with ``mode='overwrite'`` deletes what the directory held, and its
    temporary files live under it: so a sink must never be ``/``, nor equal, contain or lie
    inside one of ``protected_dirs`` (the exchange directory, the HA storage directory).
    Symbolic links are resolved as far as the path exists on this host.
    """
    try:
        target = os.path.realpath(local_path(path))
    except ValueError as exc:
        return str(exc)
    if target == os.path.sep:
        return f"the sink path {path!r} is the file system root"
    for directory in protected_dirs:
        try:
            protected = os.path.realpath(local_path(directory)) if directory else ""
        except ValueError:
            continue  # not on a local file system: no sink can reach it
        if not protected:
            continue
        if target == protected or _is_inside(protected, target):
            return f"the sink path {path!r} holds the cluster's directory {directory}"
        if _is_inside(target, protected):
            return f"the sink path {path!r} lies inside the cluster's directory {directory}"
    return None


def _is_inside(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip(os.path.sep) + os.path.sep)


def sink_temporary_dir(path: str, job_id: str) -> Path:
    return local_path(path) / TEMPORARY_DIR / _checked_id(job_id)


def register_sink(exchange_dir: str, job_id: str, path: str) -> None:
    """Remember that the job writes under ``path`` (idempotent)."""
    _register(job_exchange_dir(exchange_dir, job_id) / SINKS_DIR, path, path)


def register_table_sink(exchange_dir: str, job_id: str, key: str, record: str) -> None:
    """Remember that the job writes the database table ``key`` (idempotent); ``record`` is what
    a task executor needs to drop the job's staging tables once it ended (never a secret)."""
    _register(job_exchange_dir(exchange_dir, job_id) / TABLE_SINKS_DIR, key, record)


def _register(registry: Path, key: str, text: str) -> None:
    registry.mkdir(parents=True, exist_ok=True)
    entry = registry / hashlib.sha1(key.encode()).hexdigest()[:20]
    if not entry.exists():
        # A scratch name of its own per call: the slots of one task executor (one process, one
        # thread each) register the same sink at the same moment.
        scratch = entry.with_name(f"{entry.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
        scratch.write_text(text)
        os.replace(scratch, entry)


def ended_table_sinks(exchange_dir: str) -> list[tuple[Path, str]]:
    """(file, record) of every database sink whose job ended and whose staging tables nobody
    dropped yet; remove the file once they are."""
    found: list[tuple[Path, str]] = []
    if not exchange_dir:
        return found
    with contextlib.suppress(OSError):
        for entry in sorted((Path(exchange_dir) / ENDED_TABLES_DIR).iterdir()):
            if entry.name.endswith(".tmp"):
                continue
            with contextlib.suppress(OSError):
                found.append((entry, entry.read_text()))
    return found


def remove_sink_temporaries(path: str, job_id: str) -> None:
    temporary = sink_temporary_dir(path, job_id)
    shutil.rmtree(temporary, ignore_errors=True)
    with contextlib.suppress(OSError):
        temporary.parent.rmdir()  # only if no other job writes there


def cleanup_job(exchange_dir: str, job_id: str) -> None:
    """Drop the job's exchange data and every registered sink's temporary files.

    Safe to call more than once and while nothing of the job exists; call it only when no task
    of the job runs any more (a terminal job status).
    """
    if not job_id or not exchange_dir:
        return
    if not is_valid_id(job_id):
        log.warning("not cleaning up after job id %r: it is not a valid id", job_id[:80])
        return
    base = job_exchange_dir(exchange_dir, job_id)
    registry = base / SINKS_DIR
    if registry.is_dir():
        for entry in registry.iterdir():
            if entry.name.endswith(".tmp"):
                continue
            try:
                remove_sink_temporaries(entry.read_text(), job_id)
            except (OSError, ValueError) as exc:
                log.warning("job %s: could not clean the sink %s: %s", job_id, entry, exc)
    tables = base / TABLE_SINKS_DIR
    if tables.is_dir():
        # No task of the job runs any more: its staging tables may go (a task executor drops
        # them, see the module docstring).
        ended = Path(exchange_dir) / ENDED_TABLES_DIR
        for entry in tables.iterdir():
            if entry.name.endswith(".tmp"):
                continue
            try:
                ended.mkdir(exist_ok=True)
                os.replace(entry, ended / f"{job_id}.{entry.name}")
            except OSError as exc:
                log.warning("job %s: could not hand over the table sink %s: %s", job_id, entry, exc)
    shutil.rmtree(base, ignore_errors=True)
