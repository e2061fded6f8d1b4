"""The sink commit protocol: retries and restarts never duplicate nor leave partial output.

1. **Write** - each attempt writes to its own directory,
   ``{path}/_temporary/{job_id}/attempt-{subtask}-{attempt_id}/``.
2. **Task commit** - only when the attempt's whole chain succeeded (and it was not cancelled):
   rename that directory to ``{path}/_temporary/{job_id}/committed/part-{subtask}``, replacing
   a previous commit of the same subtask (a restarted region). A rename is atomic: a subtask's
   committed output is always exactly one attempt's.
3. **Job commit** - the job's final ``commit`` vertex (parallelism 1) runs once every sink
   subtask has finished: it writes a plan (source → ``{path}/part-{subtask}-{k}.{ext}``),
   clears the old content (``mode="overwrite"``) or checks there is none (``"error"``), moves
   the files into place, writes ``_SUCCESS`` and removes ``_temporary/{job_id}``. Each step is
   idempotent, so a retried commit finishes the job of a failed one.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from sparkmill.common import plan as S
from sparkmill.common.errors import CommitError
from sparkmill.common.exchange.layout import (
    TEMPORARY_DIR,
    local_path,
    register_sink,
    remove_sink_temporaries,
    sink_temporary_dir,
)

SUCCESS_MARKER = "_SUCCESS"
PLAN_FILE = "_plan.json"
COMMITTED_DIR = "committed"


def attempt_dir(path: str, job_id: str, subtask: int, attempt_id: str) -> Path:
    return sink_temporary_dir(path, job_id) / f"attempt-{subtask:05d}-{attempt_id}"


def committed_dir(path: str, job_id: str, subtask: int) -> Path:
    return sink_temporary_dir(path, job_id) / COMMITTED_DIR / f"part-{subtask:05d}"


def write_attempt(
    df: Any, output: S.SinkOutput, exchange_dir: str, job_id: str, subtask: int, attempt_id: str
) -> Path:
    """Step 1: the attempt's files, in its own directory."""
    register_sink(exchange_dir, job_id, output.path)
    target = attempt_dir(output.path, job_id, subtask, attempt_id)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    df.write.format(output.format).options(**output.options).mode("errorifexists").save(str(target))
    return target


ATTEMPT_MARKER = "_ATTEMPT"


def _attempt_of(directory: Path) -> tuple[int, int]:
    """(JobMaster epoch, attempt number) of a committed attempt; attempts of a later JobMaster
    are newer whatever their numbers (those start at 0 again after a takeover)."""
    try:
        epoch, _, number = (directory / ATTEMPT_MARKER).read_text().rpartition(":")
        return int(epoch or 0), int(number)
    except (OSError, ValueError):
        return -1, -1


def commit_task(
    output: S.SinkOutput,
    job_id: str,
    subtask: int,
    written: Path,
    attempt_number: int = 0,
    job_master_epoch: int = 0,
) -> bool:
    """Step 2: publish the attempt's directory as the subtask's committed output.

    A later attempt replaces an earlier one's publication; an *older* attempt that commits
    late (a task executor that hung while its subtask was restarted elsewhere) never replaces
    a newer one: its output is discarded and ``False`` returned. Attempts are ordered by the
    epoch of the JobMaster that deployed them, then by attempt number.
    """
    order = (job_master_epoch, attempt_number)
    (written / ATTEMPT_MARKER).write_text(f"{job_master_epoch}:{attempt_number}")
    target = committed_dir(output.path, job_id, subtask)
    target.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(10):
        if target.exists():
            if _attempt_of(target) > order:
                shutil.rmtree(written, ignore_errors=True)
                return False
            superseded = target.with_name(f"superseded-{subtask:05d}-{uuid.uuid4().hex[:8]}")
            try:
                os.rename(target, superseded)
            except FileNotFoundError:
                continue  # another attempt moved it meanwhile
            shutil.rmtree(superseded, ignore_errors=True)
        try:
            os.rename(written, target)
            return True
        except OSError:
            if not written.exists():
                raise
            continue  # another attempt committed in between: replace it again
    raise CommitError(f"could not commit subtask {subtask} of {output.path}")


def _plan(sink: S.SinkCommit, job_id: str) -> list[tuple[str, str]]:
    root = local_path(sink.path)
    temporary = sink_temporary_dir(sink.path, job_id)
    plan_file = temporary / PLAN_FILE
    if plan_file.exists():
        return [(src, dst) for src, dst in json.loads(plan_file.read_text())]
    missing = [
        i for i in range(sink.parallelism) if not committed_dir(sink.path, job_id, i).is_dir()
    ]
    if missing:
        raise CommitError(f"{sink.path}: subtasks {missing} of the sink have no committed output")
    if sink.mode == "error":
        existing = sorted(p.name for p in root.iterdir() if p.name != TEMPORARY_DIR)
        if existing:
            raise CommitError(
                f"{sink.path} already has content ({', '.join(existing[:5])}); write with "
                "mode='overwrite' to replace it"
            )
    plan: list[tuple[str, str]] = []
    for subtask in range(sink.parallelism):
        files = sorted(
            f
            for f in committed_dir(sink.path, job_id, subtask).iterdir()
            if f.is_file() and not f.name.startswith(("_", "."))
        )
        for k, f in enumerate(files):
            extension = f.name[f.name.index(".") :] if "." in f.name else ""
            plan.append((str(f), str(root / f"part-{subtask:05d}-{k:03d}{extension}")))
    scratch = temporary / (PLAN_FILE + ".tmp")
    scratch.write_text(json.dumps(plan))
    os.replace(scratch, plan_file)
    return plan


def commit_job(sink: S.SinkCommit, job_id: str) -> int:
    """Step 3: move every committed file into place and mark the output complete."""
    root = local_path(sink.path)
    root.mkdir(parents=True, exist_ok=True)
    if (root / SUCCESS_MARKER).exists() and not sink_temporary_dir(sink.path, job_id).exists():
        return 0  # committed already (the report of a finished commit got lost)
    plan = _plan(sink, job_id)
    keep = {Path(dst).name for _, dst in plan} | {TEMPORARY_DIR}
    for entry in list(root.iterdir()):
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)
    for src, dst in plan:
        if os.path.exists(src):
            os.replace(src, dst)
        elif not os.path.exists(dst):
            # Neither moved by an earlier try of this commit nor still there: never report
            # success for output that is not all in place.
            raise CommitError(f"{sink.path}: planned output {src} vanished before publication")
    (root / SUCCESS_MARKER).touch()
    remove_sink_temporaries(sink.path, job_id)
    return len(plan)
