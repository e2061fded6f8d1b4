"""The HA job graph store (Flink's ``JobGraphStore``) and job result store (FLIP-194).

Job graphs: the serialized graph is written to ``high-availability.storageDir`` (atomically:
temporary file, fsync, rename) and a znode ``<root>/jobgraphs/<job id>`` holds its path (the
*state handle*), so ZooKeeper only ever holds small values. A dispatcher that uses a graph
holds an ephemeral lock child ``locks/<owner>``; a graph is removed only when no *other* owner
holds a lock, so a standby cannot remove a graph the leader still uses.

Job results: ``<storageDir>/job-results/<job id>_DIRTY.pb`` is written when a job reached a
globally terminal state, *before* its graph is removed; once the clean-up is done it is renamed
to ``<job id>.pb`` (clean). A new leader that finds a result for a recovered graph knows the job
is done and never runs it again; a dirty entry means only the clean-up is left.

All methods block (ZooKeeper and disk I/O): services call them through ``run_blocking``.
Each is idempotent and retried whole when a request is lost with its connection
(``ConnectionLoss``: the client was moving to another server of the ensemble), so a server
switch fails no submission, clean-up or recovery.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from google.protobuf.message import DecodeError
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.retry import KazooRetry
from kazoo.security import ACL

from sparkmill.common.core.errors import NotLeaderError
from sparkmill.common.core.ids import JobID, is_valid_id
from sparkmill.common.ha.job_stores import (
    JobGraphStore,
    JobResultStore,
    RecoveredJobGraphs,
    UnrecoverableJobGraph,
)
from sparkmill.common.v1 import common_pb2, jobs_pb2

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def _retried(
    method: Callable[Concatenate[ZooKeeperJobGraphStore, P], R],
) -> Callable[Concatenate[ZooKeeperJobGraphStore, P], R]:
    def retrying(self: ZooKeeperJobGraphStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        # A copy per call: KazooRetry counts its attempts, and calls run on several threads.
        result: R = self.retry.copy()(method, self, *args, **kwargs)
        return result

    return retrying


class ZooKeeperJobGraphStore(JobGraphStore):
    """Job graphs on the storage directory, their handles and owners' locks in ZooKeeper.

    Like Flink's ``DefaultJobGraphStore`` on a ``ZooKeeperStateHandleStore``: the job node, its
    ``locks`` container and this owner's ephemeral lock are created in one transaction, so no
    other dispatcher can ever see (and remove) a job node without a lock; removal deletes this
    owner's lock, the ``locks`` container and the job node in one transaction, which ZooKeeper
    refuses while any other lock exists, so it cannot race an owner that locks the graph at
    the same moment.
    """

    def __init__(
        self,
        client: KazooClient,
        zk_path: str,
        storage_dir: Path,
        owner: str,
        *,
        retry_deadline_s: float = 30.0,
        acl_of: Callable[[str], list[ACL]] | None = None,
        ensure_path: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        # The ACL of a node by its path (per-role ACLs); None: the client's default ACL.
        self._acl_of = acl_of
        self._ensure_path = ensure_path
        # ConnectionLoss only: an expired session (SessionExpiredError) is not retried here.
        self.retry = KazooRetry(
            max_tries=-1, delay=0.1, max_delay=1.0, deadline=retry_deadline_s, ignore_expire=False
        )
        self.zk_path = zk_path
        self.storage_dir = storage_dir / "job-graphs"
        self.quarantine_dir = self.storage_dir / "quarantine"
        self.owner = owner
        # Whether the ``jobgraphs`` node is known to exist: walking its ancestors costs a round
        # trip each, on every submission's way to its acknowledgement. Nothing of sparkmill
        # deletes it; if someone does, the put's transaction fails and creates it again.
        self._parent_exists = False

    def _node(self, job_id: str) -> str:
        return f"{self.zk_path}/{job_id}"

    def _handle(self, job_id: str) -> Path:
        return self.storage_dir / f"{job_id}.pb"

    def _acl(self, path: str) -> list[ACL] | None:
        return None if self._acl_of is None else self._acl_of(path)

    def _lock(self, job_id: str) -> None:
        lock = f"{self._node(job_id)}/locks/{self.owner}"
        with contextlib.suppress(NodeExistsError):
            self.client.create(lock, b"", ephemeral=True, acl=self._acl(lock))

    @_retried
    def put(self, graph: common_pb2.JobGraph, fence: str | None = None) -> None:
        if not is_valid_id(graph.job_id):
            raise ValueError(f"not a job id: {graph.job_id!r}")
        handle = self._handle(graph.job_id)
        _atomic_write(handle, graph.SerializeToString())
        node = self._node(graph.job_id)
        locks, lock = f"{node}/locks", f"{node}/locks/{self.owner}"
        walked = False
        while True:
            if not self._parent_exists:
                (self._ensure_path or self.client.ensure_path)(self.zk_path)
                self._parent_exists = walked = True
            transaction = self.client.transaction()
            if fence is not None:
                # In the same transaction: a leader whose session already ended (a successor
                # may have recovered the store without this job) stores nothing.
                transaction.check(fence, 0)
            transaction.create(node, str(handle).encode(), acl=self._acl(node))
            transaction.create(locks, b"", acl=self._acl(locks))
            transaction.create(lock, b"", ephemeral=True, acl=self._acl(lock))
            results = transaction.commit()
            if not any(isinstance(result, Exception) for result in results):
                return
            if fence is not None:
                fenced, results = results[0], results[1:]
                if isinstance(fenced, (NoNodeError, BadVersionError)):
                    # The graph file may stay behind: it is the same path a successor writes
                    # for this job id, so it is not ours to delete.
                    raise NotLeaderError(
                        f"job {graph.job_id} was not stored: this leader's ZooKeeper session "
                        "ended before the write (its latch node is gone); submit to the new "
                        "leader"
                    )
            if isinstance(results[0], NoNodeError) and not walked:
                self._parent_exists = False  # ``jobgraphs`` is gone: create it, then again
                continue
            break
        if not isinstance(results[0], NodeExistsError):
            raise next(r for r in results if isinstance(r, Exception))
        # Put again (a job re-submitted by its own leader after a failed acknowledgement): the
        # node is there, the handle is the same path; make sure this owner holds its lock.
        self.client.set(node, str(handle).encode())
        self._lock(graph.job_id)

    @_retried
    def remove(self, job_id: JobID) -> None:
        node = self._node(job_id)
        # The usual case, one transaction (the next submission's transaction waits behind
        # this one's on the dispatcher's session): our lock, ``locks`` and the node.
        transaction = self.client.transaction()
        transaction.delete(f"{node}/locks/{self.owner}")
        transaction.delete(f"{node}/locks")
        transaction.delete(node)
        results = transaction.commit()
        if not any(isinstance(result, Exception) for result in results):
            self._handle(job_id).unlink(missing_ok=True)
            return
        if isinstance(results[1], NotEmptyError):
            # Another owner holds a lock: only ours goes, the graph stays for that owner.
            with contextlib.suppress(NoNodeError):
                self.client.delete(f"{node}/locks/{self.owner}")
            log.info("job graph %s is still locked by another owner; not removing it", job_id)
            return
        self._remove_in_steps(job_id)

    def _remove_in_steps(self, job_id: JobID) -> None:
        """``remove`` when we hold no lock (or the node is gone already)."""
        node = self._node(job_id)
        with contextlib.suppress(NoNodeError):
            self.client.delete(f"{node}/locks/{self.owner}")
        try:
            handle_bytes, _ = self.client.get(node)
        except NoNodeError:
            return
        transaction = self.client.transaction()
        transaction.delete(f"{node}/locks")
        transaction.delete(node)
        results = transaction.commit()
        failure = next((r for r in results if isinstance(r, Exception)), None)
        if isinstance(failure, NotEmptyError):
            log.info("job graph %s is still locked by another owner; not removing it", job_id)
            return
        if isinstance(failure, NoNodeError):
            return
        if failure is not None:
            raise failure
        handle = self._trusted_handle(job_id, handle_bytes)
        if handle is not None:
            handle.unlink(missing_ok=True)

    def _trusted_handle(self, job_id: str, raw: bytes) -> Path | None:
        """The handle a znode holds, if it is the one this store would have written.

        ZooKeeper's content is treated as untrusted: a handle is only ever the file named after
        the job inside the storage directory, so a rewritten znode cannot make the dispatcher
        read or delete any other file.
        """
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            return None
        expected = self._handle(job_id)
        return expected if is_valid_id(job_id) and text == str(expected) else None

    def _read(self, job_id: str) -> common_pb2.JobGraph:
        if not is_valid_id(job_id):
            raise _Unreadable(f"the job node name {job_id!r} is not a job id")
        raw, _ = self.client.get(self._node(job_id))
        handle = self._trusted_handle(job_id, raw)
        if handle is None:
            raise _Unreadable(
                f"its handle {raw[:200]!r} is not {str(self._handle(job_id))!r} "
                "(the znode was changed outside sparkmill)"
            )
        try:
            blob = handle.read_bytes()
        except OSError as exc:
            raise _Unreadable(f"{handle} cannot be read: {exc.strerror or exc}") from None
        graph = common_pb2.JobGraph()
        try:
            graph.ParseFromString(blob)
        except DecodeError as exc:
            self._quarantine(handle)
            raise _Unreadable(f"{handle} is not a job graph ({exc}); moved it aside") from None
        if graph.job_id != job_id:
            self._quarantine(handle)
            raise _Unreadable(f"{handle} holds job {graph.job_id!r}; moved it aside")
        return graph

    def _quarantine(self, handle: Path) -> None:
        """Keep a corrupt graph file for an operator to look at, out of the store's way."""
        with contextlib.suppress(OSError):
            self.quarantine_dir.mkdir(parents=True, exist_ok=True)
            os.replace(handle, self.quarantine_dir / handle.name)

    @_retried
    def recover(self) -> RecoveredJobGraphs:
        recovered = RecoveredJobGraphs()
        try:
            job_ids = self.client.get_children(self.zk_path)
        except NoNodeError:
            return recovered
        for job_id in sorted(job_ids):
            try:
                graph = self._read(job_id)
            except NoNodeError:
                continue  # removed while we listed: the job is done
            except _Unreadable as exc:
                log.error("job graph %s cannot be recovered: %s", job_id, exc)
                recovered.unrecoverable.append(UnrecoverableJobGraph(job_id, str(exc)))
                continue
            try:
                self._lock(job_id)
            except NoNodeError:
                continue  # removed since we read it: the job is done
            recovered.graphs.append(graph)
        return recovered

    @_retried
    def release_all(self) -> None:
        try:
            job_ids = self.client.get_children(self.zk_path)
        except NoNodeError:
            return
        for job_id in job_ids:
            with contextlib.suppress(NoNodeError):
                self.client.delete(f"{self._node(job_id)}/locks/{self.owner}")


class _Unreadable(Exception):
    """A stored job graph that cannot be turned back into a JobGraph (the message says why)."""


class FileSystemJobResultStore(JobResultStore):
    def __init__(self, storage_dir: Path) -> None:
        self.directory = storage_dir / "job-results"

    def _dirty(self, job_id: str) -> Path:
        return self.directory / f"{job_id}_DIRTY.pb"

    def _clean(self, job_id: str) -> Path:
        return self.directory / f"{job_id}.pb"

    def create_dirty(self, result: jobs_pb2.JobResult) -> None:
        _atomic_write(self._dirty(result.job_id), result.SerializeToString())

    def mark_clean(self, job_id: JobID) -> None:
        dirty = self._dirty(job_id)
        if dirty.exists():
            os.replace(dirty, self._clean(job_id))

    def has_result(self, job_id: JobID) -> bool:
        return self._dirty(job_id).exists() or self._clean(job_id).exists()

    def results(self) -> list[tuple[jobs_pb2.JobResult, bool]]:
        out: list[tuple[jobs_pb2.JobResult, bool]] = []
        if not self.directory.exists():
            return out
        for path in sorted(self.directory.glob("*.pb")):
            result = jobs_pb2.JobResult()
            try:
                result.ParseFromString(path.read_bytes())
            except Exception as exc:
                log.error("unreadable job result %s: %s", path, exc)
                continue
            out.append((result, path.name.endswith("_DIRTY.pb")))
        return out
