"""The sink commit protocol: retries and restarts never duplicate nor leave partial output.

1. **Write** - each attempt writes to its own directory,
   ``{path}/_temporary/{job_id}/attempt-{subtask}-{attempt_id}/``.
2. **Task commit** - only when the attempt's whole chain succeeded (and it was not cancelled):
   rename that directory to ``{path}/_temporary/{job_id}/committed/part-{subtask}.{epoch}.{n}``
   (the deploying JobMaster's epoch and the attempt number). A subtask's committed output is
   its highest-ordered such directory, so a restarted region's newer attempt supersedes the
   older one and a late older attempt never does. A rename is atomic: a subtask's committed
   output is always exactly one attempt's. A superseded directory is renamed away before it is
   deleted, so it is either whole or gone.
3. **Job commit** - the job's final ``commit`` vertex (parallelism 1) runs once every sink
   subtask has finished: it *claims* each subtask's newest committed directory by renaming it
   to ``planned/part-{subtask}`` (from then on no task commit can touch it: attempts racing
   each other under speculative execution, or a late one, may still commit, but only beside
   it), writes a plan (source → ``{path}/part-{subtask}-{k}.{ext}``; the first plan written
   is kept, so concurrent commits carry out the same one),
   clears the old content (``mode="overwrite"``: everything, or with ``partition_by`` only the
   partition directories the job writes) or checks there is none (``"error"``; ``"append"``
   keeps it), moves the files into place, records the job in ``_SUCCESS`` and removes
   ``_temporary/{job_id}``. Each step is idempotent, so a retried commit finishes the job of a
   failed one. Files published next to other jobs' (append, partitions) carry the job id in
   their names, ``{path}[/k=v...]/part-{subtask}-{k}-{job_id}.{ext}``.

``_SUCCESS`` names the jobs that committed the output, one id per line (the newest
:data:`COMMIT_HISTORY` of them; like the manifest Hadoop's S3A committers write there, readers
ignore it). A job whose id is in it has committed: a JobMaster that took the job over after
the commit finished, but before the report of it reached the progress log, runs the commit
again - often after sink attempts have written new temporaries - and that commit removes them
and publishes nothing, instead of appending the rows a second time or refusing its own output
as "already has content".
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from sparkmill.common.core.errors import CommitError
from sparkmill.common.exchange.layout import (
    TEMPORARY_DIR,
    local_path,
    register_sink,
    remove_sink_temporaries,
    sink_temporary_dir,
)
from sparkmill.common.pipeline import plan as S

SUCCESS_MARKER = "_SUCCESS"
PLAN_FILE = "_plan.json"
COMMITTED_DIR = "committed"
PLANNED_DIR = "planned"
COMMIT_HISTORY = 1000


def attempt_dir(path: str, job_id: str, subtask: int, attempt_id: str) -> Path:
    return sink_temporary_dir(path, job_id) / f"attempt-{subtask:05d}-{attempt_id}"


def committed_root(path: str, job_id: str) -> Path:
    return sink_temporary_dir(path, job_id) / COMMITTED_DIR


def _candidate_name(subtask: int, order: tuple[int, int]) -> str:
    return f"part-{subtask:05d}.{order[0]:020d}.{order[1]:010d}"


def _candidates(root: Path, subtask: int) -> list[tuple[tuple[int, int], Path]]:
    """The committed attempts of ``subtask`` under ``root``, oldest first, by their order."""
    found: list[tuple[tuple[int, int], Path]] = []
    prefix = f"part-{subtask:05d}."
    try:
        entries = list(root.iterdir())
    except FileNotFoundError:
        return found
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        epoch, _, number = entry.name[len(prefix) :].partition(".")
        if epoch.isdigit() and number.isdigit():
            found.append(((int(epoch), int(number)), entry))
    return sorted(found)


def write_attempt(
    df: Any, output: S.SinkOutput, exchange_dir: str, job_id: str, subtask: int, attempt_id: str
) -> Path:
    """Step 1: the attempt's files, in its own directory."""
    register_sink(exchange_dir, job_id, output.path)
    target = attempt_dir(output.path, job_id, subtask, attempt_id)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    writer = df.write.format(output.format).options(**output.options)
    if output.partition_by:
        writer = writer.partitionBy(*output.partition_by)
    writer.mode("errorifexists").save(str(target))
    return target


def commit_task(
    output: S.SinkOutput,
    job_id: str,
    subtask: int,
    written: Path,
    attempt_number: int = 0,
    job_master_epoch: int = 0,
) -> bool:
    """Step 2: publish the attempt's directory as a committed output of its subtask.

    Each attempt is renamed to a name of its own that carries its order - the epoch of the
    JobMaster that deployed it (from ZooKeeper: greater for every JobMaster that takes the job
    over), then its attempt number (which starts again at 0 under a new JobMaster) - and the
    subtask's output is always its *highest-ordered* committed attempt. So the outcome never
    depends on timing: an older attempt that commits late (a task executor that hung, or one
    still running for a deposed JobMaster) can never replace a newer one; its output is
    discarded and ``False`` returned. An attempt of the same order (a retried commit of one
    attempt) replaces its earlier publication.
    """
    order = (job_master_epoch, attempt_number)
    root = committed_root(output.path, job_id)
    root.mkdir(parents=True, exist_ok=True)
    if any(other > order for other, _ in _candidates(root, subtask)):
        shutil.rmtree(written, ignore_errors=True)
        return False
    target = root / _candidate_name(subtask, order)
    if target.exists():
        _discard(target, root, subtask)  # an earlier try of this attempt's commit
    try:
        os.rename(written, target)
    except OSError as exc:
        if not written.exists():
            raise
        raise CommitError(f"could not commit subtask {subtask} of {output.path}: {exc}") from exc
    # Older publications are no longer the subtask's output; a newer one may have appeared
    # meanwhile, and then ours is the one that does not count.
    newest = True
    for other, directory in _candidates(root, subtask):
        if other < order:
            _discard(directory, root, subtask)
        elif other > order:
            newest = False
    return newest


def _discard(directory: Path, root: Path, subtask: int) -> None:
    """Delete a superseded committed directory, renaming it away first: the job commit may be
    claiming it at the same moment, and exactly one of the two renames succeeds."""
    doomed = root / f"superseded-{subtask:05d}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(directory, doomed)
    except FileNotFoundError:
        return  # claimed by the job commit, or discarded by another attempt or try
    shutil.rmtree(doomed, ignore_errors=True)


def _claim(sink: S.SinkCommit, job_id: str, subtask: int) -> Path | None:
    """The committed directory the job commit publishes for ``subtask``: the newest one,
    renamed out of the task commits' reach (an earlier try's claim stands); None if none."""
    claimed = sink_temporary_dir(sink.path, job_id) / PLANNED_DIR / f"part-{subtask:05d}"
    root = committed_root(sink.path, job_id)
    for _ in range(100):  # each retry means another attempt committed or discarded meanwhile
        if claimed.exists():
            return claimed
        found = _candidates(root, subtask)
        if not found:
            return None
        claimed.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(found[-1][1], claimed)
        except FileNotFoundError:
            continue  # superseded by a newer attempt while we chose it
        except OSError:
            if not claimed.exists():  # not a concurrent claim of ours: a real error
                raise
        return claimed
    raise CommitError(f"{sink.path}: could not claim the output of subtask {subtask}")


def _published_name(sink: S.SinkCommit, job_id: str, subtask: int, k: int, extension: str) -> str:
    # Files that stay next to other jobs' files (append, partitions) carry the job id, so two
    # jobs never pick the same name; each name is fixed by the plan, so a repeated commit moves
    # every file to the place an earlier try did.
    if sink.mode == "append" or sink.partition_by:
        return f"part-{subtask:05d}-{k:03d}-{job_id}{extension}"
    return f"part-{subtask:05d}-{k:03d}{extension}"


def _attempt_files(directory: Path) -> list[Path]:
    """The data files of a committed attempt, relative to it (partition directories included;
    Spark's ``_SUCCESS``, ``.crc`` and other hidden entries left out)."""
    found: list[Path] = []
    for current, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        base = Path(current).relative_to(directory)
        found.extend(base / f for f in sorted(files) if not f.startswith(("_", ".")))
    return found


def _plan(sink: S.SinkCommit, job_id: str) -> list[tuple[str, str]]:
    root = local_path(sink.path)
    temporary = sink_temporary_dir(sink.path, job_id)
    plan_file = temporary / PLAN_FILE
    if plan_file.exists():
        return [(src, dst) for src, dst in json.loads(plan_file.read_text())]
    committed = [_claim(sink, job_id, i) for i in range(sink.parallelism)]
    missing = [i for i, directory in enumerate(committed) if directory is None]
    if missing:
        raise CommitError(f"{sink.path}: subtasks {missing} of the sink have no committed output")
    if sink.mode == "error":
        existing = sorted(p.name for p in root.iterdir() if p.name != TEMPORARY_DIR)
        if existing:
            raise CommitError(
                f"{sink.path} already has content ({', '.join(existing[:5])}); write with "
                "mode='overwrite' to replace it or mode='append' to add to it"
            )
    plan: list[tuple[str, str]] = []
    for subtask, directory in enumerate(committed):
        assert directory is not None
        for k, relative in enumerate(_attempt_files(directory)):
            name = relative.name
            extension = name[name.index(".") :] if "." in name else ""
            published = _published_name(sink, job_id, subtask, k, extension)
            plan.append((str(directory / relative), str(root / relative.parent / published)))
    # The first plan written is the plan: a commit vertex still running for a deposed JobMaster
    # and its successor's may plan at the same time, from different committed attempts, and
    # two plans carried out together could leave both attempts' files in place.
    scratch = temporary / f"{PLAN_FILE}.{uuid.uuid4().hex}.tmp"
    scratch.write_text(json.dumps(plan))
    try:
        os.link(scratch, plan_file)  # atomic and exclusive, also on NFS
    except FileExistsError:
        plan = [(src, dst) for src, dst in json.loads(plan_file.read_text())]
    except OSError:  # a file system without hard links: last writer wins, as before
        os.replace(scratch, plan_file)
    finally:
        scratch.unlink(missing_ok=True)
    return plan


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink(missing_ok=True)


def _clear_old_content(sink: S.SinkCommit, root: Path, plan: list[tuple[str, str]]) -> None:
    """What ``overwrite`` replaces: the whole directory, or with ``partition_by`` only the
    partitions the job writes (Spark's dynamic partition overwrite). Files the plan put in
    place already (an earlier try of this commit) stay."""
    if sink.mode != "overwrite":
        return  # "error" found nothing when planning; "append" keeps everything
    keep = {dst for _, dst in plan}
    if not sink.partition_by:
        for entry in list(root.iterdir()):
            if entry.name != TEMPORARY_DIR and str(entry) not in keep:
                _remove(entry)
        return
    for partition in sorted({os.path.dirname(dst) for _, dst in plan}):
        try:
            entries = list(Path(partition).iterdir())
        except FileNotFoundError:
            continue
        for entry in entries:
            if str(entry) not in keep:
                _remove(entry)


def committed_jobs(path: str) -> list[str]:
    """The ids of the jobs that committed the output at ``path``, oldest first (an empty
    ``_SUCCESS``, as Spark writes, names none)."""
    try:
        text = (local_path(path) / SUCCESS_MARKER).read_text(errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def _record_commit(sink: S.SinkCommit, root: Path, job_id: str) -> None:
    """Name ``job_id`` in ``_SUCCESS``: alone where the job replaced the whole output, after
    the jobs before it where their output stays (append, partitions)."""
    marker = root / SUCCESS_MARKER
    if sink.mode != "append" and not sink.partition_by:
        _replace_text(marker, f"{job_id}\n")
        return
    # Jobs appending to one path may commit at the same moment: each adds its line under an
    # exclusive lock. The lock is on the file, and trimming replaces the file, so a writer
    # that got the lock on a replaced file tries again on the new one.
    while True:
        fd = os.open(marker, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(marker).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if not current:
                continue
            jobs = committed_jobs(sink.path)
            if job_id in jobs:
                return
            if len(jobs) < COMMIT_HISTORY:
                os.write(fd, f"{job_id}\n".encode())
            else:
                kept = [*jobs[len(jobs) - COMMIT_HISTORY + 1 :], job_id]
                _replace_text(marker, "".join(f"{j}\n" for j in kept))
            return
        finally:
            os.close(fd)  # releases the lock


def _replace_text(target: Path, text: str) -> None:
    scratch = target.with_name(f"{target.name}.{uuid.uuid4().hex}.tmp")
    scratch.write_text(text)
    os.replace(scratch, target)


def commit_job(sink: S.SinkCommit, job_id: str) -> int:
    """Step 3: move every committed file into place and mark the output complete."""
    root = local_path(sink.path)
    root.mkdir(parents=True, exist_ok=True)
    if job_id in committed_jobs(sink.path) or (
        (root / SUCCESS_MARKER).exists() and not sink_temporary_dir(sink.path, job_id).exists()
    ):
        # Committed already; the report of it got lost. Attempts run since then (by a
        # JobMaster that took the job over, or ones that outlived their cancellation) left
        # temporaries that must not be published a second time.
        remove_sink_temporaries(sink.path, job_id)
        return 0
    plan = _plan(sink, job_id)
    _clear_old_content(sink, root, plan)
    for src, dst in plan:
        if os.path.exists(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(src, dst)
        elif not os.path.exists(dst):
            # Neither moved by an earlier try of this commit nor still there: never report
            # success for output that is not all in place.
            raise CommitError(f"{sink.path}: planned output {src} vanished before publication")
    _record_commit(sink, root, job_id)
    remove_sink_temporaries(sink.path, job_id)
    return len(plan)
