"""The job-master processes registered at the dispatcher, each heartbeated.

Job-master processes are the dispatcher's workers: each hosts the JobMasters of the jobs it was
given (Flink runs one ``JobManagerRunner`` per job inside the dispatcher's process; sparkmill
runs them in separate processes so that a JobMaster's crash costs neither the dispatcher nor the
other jobs). This registry holds the processes, heartbeats each one and names the least loaded
for the next job; what a registration or a loss means for the jobs is the dispatcher's part.

Each heartbeat's reply lists the jobs the process hosts (``HostedJobs``): handed to
``on_hosted`` with the time the heartbeat was sent, so that the dispatcher can tell a job it
placed there before that time and that the process no longer runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.runtime.heartbeat import HeartbeatManager
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import common_pb2, job_master_pb2
from sparkmill.common.v1.gateways import JobMasterClient
from sparkmill.services.dispatcher.job_placement import JobMasterProcessRecord


class JobMasterProcesses:
    """Registered job-master processes by process id; ``on_timeout(process_id, reason)`` is
    called when one stops answering its heartbeats, ``on_hosted(process_id, hosted, asked_at)``
    with each heartbeat's reply (``asked_at``: ``time.monotonic()`` when it was sent)."""

    def __init__(
        self,
        settings: ClusterSettings,
        clients: RpcClientPool,
        sender_id: str,
        on_timeout: Callable[[str, str], None],
        on_hosted: Callable[[str, job_master_pb2.HostedJobs, float], None] | None = None,
    ) -> None:
        self._settings = settings
        self._clients = clients
        self._sender_id = sender_id
        self._records: dict[str, JobMasterProcessRecord] = {}
        self._on_hosted = on_hosted
        self.heartbeats = HeartbeatManager(
            "dispatcher->jm",
            interval_s=settings.heartbeat_interval_s,
            timeout_s=settings.heartbeat_timeout_s,
            rpc_failure_threshold=settings.heartbeat_rpc_failure_threshold,
            on_timeout=on_timeout,
        )

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, process_id: object) -> bool:
        return process_id in self._records

    def __iter__(self) -> Iterator[JobMasterProcessRecord]:
        return iter(list(self._records.values()))

    def get(self, process_id: str) -> JobMasterProcessRecord | None:
        return self._records.get(process_id)

    def add(
        self, process_id: str, address: str, info: common_pb2.ServiceInfo, peer: str = ""
    ) -> JobMasterProcessRecord:
        """Register a process (the caller removed an earlier registration under its id)."""
        rpc = self._clients.get(address)
        record = JobMasterProcessRecord(process_id, address, JobMasterClient(rpc), info, peer=peer)
        self._records[process_id] = record
        self.heartbeats.monitor(
            process_id, lambda: self._heartbeat(process_id), watch=rpc.watch_connection
        )
        return record

    def remove(self, process_id: str) -> JobMasterProcessRecord | None:
        """Forget a process and stop heartbeating it; None if it was not registered."""
        record = self._records.pop(process_id, None)
        if record is not None:
            self.heartbeats.unmonitor(process_id)
        return record

    def clear(self) -> None:
        for process_id in list(self._records):
            self.remove(process_id)

    def least_loaded(self) -> JobMasterProcessRecord | None:
        """The process hosting the fewest jobs (ties by process id); None if none registered."""
        if not self._records:
            return None
        return min(self._records.values(), key=lambda p: (len(p.jobs), p.process_id))

    async def _heartbeat(self, process_id: str) -> None:
        record = self._records.get(process_id)
        if record is None:
            return
        asked_at = time.monotonic()
        hosted = await record.client.heartbeat_from_dispatcher(
            common_pb2.HeartbeatRequest(sender_id=self._sender_id),
            timeout=self._settings.heartbeat_interval_s,
        )
        # Only for the registration that was asked: one that replaced it meanwhile is answered
        # by its own heartbeats.
        if self._on_hosted is not None and self._records.get(process_id) is record:
            self._on_hosted(process_id, hosted, asked_at)


__all__ = ["JobMasterProcesses"]
