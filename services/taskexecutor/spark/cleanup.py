"""Removing what a job leaves on disk: its exchange data and its sinks' temporary files.

Importable without PySpark (the JobMaster calls :func:`cleanup_job` when a job ends FAILED or
CANCELED; on success the job's ``commit`` vertex calls it).

Layout under ``exchange.dir``::

    {exchange_dir}/{job_id}/{dataset_id}/{producer_subtask}/{attempt_id}/   result partitions
    {exchange_dir}/{job_id}/_sinks/{digest}                                 a sink's path

A sink attempt registers its output path before it writes anything, so the temporary
directory ``{path}/_temporary/{job_id}`` is found and removed even if the job never commits.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

SINKS_DIR = "_sinks"
TEMPORARY_DIR = "_temporary"


def job_exchange_dir(exchange_dir: str, job_id: str) -> Path:
    return Path(exchange_dir) / job_id


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


def sink_temporary_dir(path: str, job_id: str) -> Path:
    return local_path(path) / TEMPORARY_DIR / job_id


def register_sink(exchange_dir: str, job_id: str, path: str) -> None:
    """Remember that the job writes under ``path`` (idempotent)."""
    registry = job_exchange_dir(exchange_dir, job_id) / SINKS_DIR
    registry.mkdir(parents=True, exist_ok=True)
    entry = registry / hashlib.sha1(path.encode()).hexdigest()[:20]
    if not entry.exists():
        scratch = entry.with_name(entry.name + f".{os.getpid()}.tmp")
        scratch.write_text(path)
        os.replace(scratch, entry)


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
    shutil.rmtree(base, ignore_errors=True)
