"""A leading Dispatcher for unit tests: in-memory stores, no job-master process to call."""

from __future__ import annotations

from collections.abc import Callable

from sparkmill.common.core.errors import NotLeaderError
from sparkmill.common.core.states import JobStatus
from sparkmill.common.ha.job_stores import InMemoryJobGraphStore, InMemoryJobResultStore
from sparkmill.common.ha.leader import StandaloneLeaderElectionService
from sparkmill.common.jobgraph.codec import job_graph_to_proto
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.server import CallContext
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, envelope_pb2
from sparkmill.services.dispatcher.dispatcher import Dispatcher
from sparkmill.services.dispatcher.job_placement import JobMasterProcessRecord, JobRecord
from sparkmill.services.dispatcher.job_reports import JobLeaderLookup
from tests.unit.execution_graph_builders import JobBuilder

LEADER_SESSION = "leader-session"


class TestingFencedElection(StandaloneLeaderElectionService):
    """Leadership fenced by a named node, as in ZooKeeper; ``session_ended`` ends it there."""

    __test__ = False  # a testing double, not a test class

    def __init__(self) -> None:
        super().__init__(LEADER_SESSION)
        self.fence = "/leader/dispatcher/latch/n_0000000001"
        self.session_ended = False

    def leadership_fence(self, session_id: str) -> str | None:
        if self.session_ended or session_id != LEADER_SESSION:
            raise NotLeaderError("the testing leader session has ended")
        return self.fence


class RecordingJobGraphStore(InMemoryJobGraphStore):
    """Records the fence of every put; ``during_put`` runs inside the write (a leader change)."""

    def __init__(self) -> None:
        super().__init__()
        self.fences: list[str | None] = []
        self.during_put: Callable[[], None] | None = None

    def put(self, graph: common_pb2.JobGraph, fence: str | None = None) -> None:
        self.fences.append(fence)
        super().put(graph, fence)
        if self.during_put is not None:
            self.during_put()

    def stored(self) -> list[str]:
        return [graph.job_id for graph in self.recover().graphs]


class RecordingStartsDispatcher(Dispatcher):
    """Records each StartJob instead of calling the process, which answers with a session
    (``starts``: (job id, process id) in order; the test sets it to a list)."""

    starts: list[tuple[str, str]]

    async def _start_job(self, job: JobRecord, process: JobMasterProcessRecord) -> None:
        self.starts.append((job.job_id, process.process_id))
        job.session_id = f"session-{len(self.starts)}"
        job.status = JobStatus.RUNNING
        self._assign(job, process.process_id, process.address)


def leading_dispatcher(
    election: TestingFencedElection | None = None,
    store: RecordingJobGraphStore | None = None,
    job_leader: JobLeaderLookup | None = None,
    dispatcher_class: type[Dispatcher] = Dispatcher,
) -> Dispatcher:
    """A Dispatcher that leads with :data:`LEADER_SESSION` (call inside a loop)."""
    dispatcher = dispatcher_class(
        ClusterSettings(),
        ServiceRuntime("dispatcher-test"),
        election or TestingFencedElection(),
        store or RecordingJobGraphStore(),
        InMemoryJobResultStore(),
        RpcClientPool("test"),
        ServiceIdentity("dispatcher", "dispatcher-1"),
        job_leader=job_leader,
    )
    dispatcher.session_id = LEADER_SESSION
    return dispatcher


def call_context(peer: str = "") -> CallContext:
    return CallContext(envelope_pb2.RequestHeader(), received_at=0.0, deadline=1.0, peer=peer)


def submission() -> dispatcher_pb2.SubmitJobRequest:
    """A two-vertex job to submit."""
    builder = JobBuilder()
    builder.vertex("src", 2)
    builder.vertex("dst", 1)
    builder.edge("src", "dst")
    return dispatcher_pb2.SubmitJobRequest(job_graph=job_graph_to_proto(builder.job()))
