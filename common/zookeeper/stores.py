"""The submitted-job-graph store (seed 003) and the job result store (Flink's FLIP-194), HA form.

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
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from sparkmill.common.ids import JobID
from sparkmill.common.job_stores import JobGraphStore, JobResultStore
from sparkmill.common.v1 import common_pb2, jobs_pb2

log = logging.getLogger(__name__)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


class ZooKeeperJobGraphStore(JobGraphStore):
    def __init__(self, client: KazooClient, zk_path: str, storage_dir: Path, owner: str) -> None:
        self.client = client
        self.zk_path = zk_path
        self.storage_dir = storage_dir / "job-graphs"
        self.owner = owner

    def _node(self, job_id: str) -> str:
        return f"{self.zk_path}/{job_id}"

    def _lock(self, job_id: str) -> None:
        with contextlib.suppress(NodeExistsError):
            self.client.create(
                f"{self._node(job_id)}/locks/{self.owner}", b"", ephemeral=True, makepath=True
            )

    def put(self, graph: common_pb2.JobGraph) -> None:
        handle = self.storage_dir / f"{graph.job_id}.pb"
        _atomic_write(handle, graph.SerializeToString())
        node = self._node(graph.job_id)
        try:
            self.client.create(node, str(handle).encode(), makepath=True)
        except NodeExistsError:
            self.client.set(node, str(handle).encode())
        self._lock(graph.job_id)

    def remove(self, job_id: JobID) -> None:
        node = self._node(job_id)
        with contextlib.suppress(NoNodeError):
            self.client.delete(f"{node}/locks/{self.owner}")
        try:
            others = self.client.get_children(f"{node}/locks")
        except NoNodeError:
            others = []
        if others:
            log.info("job graph %s is still locked by %s; not removing it", job_id, others)
            return
        try:
            handle, _ = self.client.get(node)
            self.client.delete(node, recursive=True)
        except (NoNodeError, NotEmptyError):
            return
        Path(handle.decode()).unlink(missing_ok=True)

    def recover_all(self) -> list[common_pb2.JobGraph]:
        try:
            job_ids = self.client.get_children(self.zk_path)
        except NoNodeError:
            return []
        graphs = []
        for job_id in sorted(job_ids):
            try:
                handle, _ = self.client.get(self._node(job_id))
                blob = Path(handle.decode()).read_bytes()
            except (NoNodeError, OSError) as exc:
                log.error("job graph %s cannot be recovered: %s", job_id, exc)
                continue
            graph = common_pb2.JobGraph()
            graph.ParseFromString(blob)
            self._lock(job_id)
            graphs.append(graph)
        return graphs

    def release_all(self) -> None:
        try:
            job_ids = self.client.get_children(self.zk_path)
        except NoNodeError:
            return
        for job_id in job_ids:
            with contextlib.suppress(NoNodeError):
                self.client.delete(f"{self._node(job_id)}/locks/{self.owner}")


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
