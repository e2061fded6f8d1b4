"""High-availability services: where each role finds its leader (Flink's
``HighAvailabilityServices``).

With ``high-availability.mode: none`` (:class:`StandaloneHaServices`) the dispatcher and the
resource manager are at the static addresses of the configuration and always lead, each with a
random session id that members ask for (``GetLeaderSession``); each JobMaster is its own job's
leader with a session id of its own.
The ZooKeeper form implements the same interface with elections and watches.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import JobID, new_leader_session_id
from sparkmill.common.ha.job_stores import (
    InMemoryJobGraphStore,
    InMemoryJobResultStore,
    JobGraphStore,
    JobResultStore,
)
from sparkmill.common.ha.leader import (
    LeaderElectionService,
    LeaderInfo,
    LeaderRetrievalService,
    StandaloneLeaderElectionService,
)
from sparkmill.common.ha.progress_log import JobProgressStore, NoJobProgressStore
from sparkmill.common.runtime.settings import ClusterSettings

if TYPE_CHECKING:
    from sparkmill.common.rpc.client import RpcClient


class HighAvailabilityServices(abc.ABC):
    @abc.abstractmethod
    def dispatcher_election(self) -> LeaderElectionService: ...

    @abc.abstractmethod
    def resource_manager_election(self) -> LeaderElectionService: ...

    @abc.abstractmethod
    def job_master_election(self, job_id: JobID) -> LeaderElectionService: ...

    @abc.abstractmethod
    def dispatcher_retrieval(self) -> LeaderRetrievalService: ...

    @abc.abstractmethod
    def resource_manager_retrieval(self) -> LeaderRetrievalService: ...

    @abc.abstractmethod
    def job_master_retrieval(self, job_id: JobID) -> LeaderRetrievalService: ...

    @abc.abstractmethod
    def job_graph_store(self, owner: str) -> JobGraphStore: ...

    @abc.abstractmethod
    def job_result_store(self) -> JobResultStore: ...

    def job_leader_retrieval_factory(self) -> Callable[[JobID], LeaderRetrievalService] | None:
        """Per-job leader retrieval for checking a JobMaster's claim to lead its job (Flink's
        JobLeaderIdService); ``None`` when jobs' leaders are not published (no HA)."""
        return None

    async def job_leader(self, job_id: JobID) -> LeaderInfo | None:
        """The JobMaster that leads ``job_id`` now as the coordination service records it
        (read afresh, not from a cache), or None when nobody does or no service records it (no
        HA: only the dispatcher that started a JobMaster knows its session). Raises
        UnavailableError when the service cannot be read right now: "nobody leads" and "cannot
        tell" must not be confused, or a leader's report would be refused for good."""
        return None

    async def job_master_contenders(self, job_id: JobID) -> int | None:
        """How many JobMasters contend for ``job_id``'s leadership right now (leader or
        standby), or ``None`` when that cannot be known (no HA, or no connection). A new
        dispatcher leader uses it to start a recovered job at once when no process hosts it."""
        return None

    def job_progress_store(self) -> JobProgressStore:
        """Where JobMasters record finished subtasks for a JobMaster that takes over (nothing
        without HA: no JobMaster ever takes a job over)."""
        return NoJobProgressStore()

    async def announce(self, role: str, member_id: str, info: bytes) -> None:  # noqa: B027
        """Make this process visible as a member of ``role`` (leader or standby)."""

    async def members(self) -> dict[str, list[bytes]]:
        """Every announced member by role (empty without HA: there are no standbys)."""
        return {}

    async def start(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Connect (ZooKeeper); never blocks on an unreachable coordination service."""

    async def verify(self) -> str | None:
        """Once connected: why this process must not use the coordination service (e.g.
        ZooKeeper nodes of the cluster that someone else owns), or None when it may. Waits for
        the connection; the caller runs it beside the service and stops on a problem."""
        return None

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release connections (ZooKeeper sessions); the standalone form has none."""


class StandaloneHaServices(HighAvailabilityServices):
    def __init__(
        self, settings: ClusterSettings, rpc: Callable[[str], RpcClient] | None = None
    ) -> None:
        self._settings = settings
        self._rpc = rpc  # how leader retrieval asks a leader for its session id

    def dispatcher_election(self) -> LeaderElectionService:
        return StandaloneLeaderElectionService(new_leader_session_id())

    def resource_manager_election(self) -> LeaderElectionService:
        return StandaloneLeaderElectionService(new_leader_session_id())

    def job_master_election(self, job_id: JobID) -> LeaderElectionService:
        # Each JobMaster gets a fresh session id, so a TaskExecutor or RM still holding the id
        # of an earlier JobMaster of the same job is refused by fencing.
        return StandaloneLeaderElectionService(new_leader_session_id())

    def job_master_retrieval(self, job_id: JobID) -> LeaderRetrievalService:
        raise NotImplementedError("standalone mode has no per-job leader retrieval")

    def job_graph_store(self, owner: str) -> JobGraphStore:
        # Without HA there is no second dispatcher to recover from: memory is enough.
        return InMemoryJobGraphStore()

    def job_result_store(self) -> JobResultStore:
        return InMemoryJobResultStore()

    def dispatcher_retrieval(self) -> LeaderRetrievalService:
        return self._retrieval(self._settings.dispatcher_address, "dispatcher")

    def resource_manager_retrieval(self) -> LeaderRetrievalService:
        return self._retrieval(self._settings.resource_manager_address, "resource-manager")

    def _retrieval(self, address: str, role: str) -> LeaderRetrievalService:
        from sparkmill.common.ha.standalone import RpcLeaderRetrievalService

        if self._rpc is None:
            raise IllegalStateBug("standalone leader retrieval was created without RPC clients")
        return RpcLeaderRetrievalService(address, role, self._rpc)
