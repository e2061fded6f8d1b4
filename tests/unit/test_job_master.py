"""Unit tests: a JobMaster hosted by a hand-written :class:`TestingJobMasterHost`.

The JobMaster reaches its process only through the ``JobMasterHost`` protocol, so these tests
host it without a job-master process, a dispatcher or ZooKeeper: the host records the status
reports and the "done" notices, and its stores are the in-memory ones.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    UnavailableError,
)
from sparkmill.common.core.ids import JobID
from sparkmill.common.core.states import JobStatus
from sparkmill.common.ha.job_stores import InMemoryJobResultStore
from sparkmill.common.ha.leader import LeaderInfo, StandaloneLeaderElectionService
from sparkmill.common.ha.progress_log import InMemoryJobProgressStore
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.runtime.settings import settings_from_config
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, jobs_pb2, resource_manager_pb2
from sparkmill.services.jobmaster.host import HostedJobMaster
from sparkmill.services.jobmaster.job_master import JobMaster
from sparkmill.testing import noop_pipeline


class TestingJobMasterHost:
    """A JobMasterHost that records what its JobMasters tell it; reports are accepted unless
    ``accept_reports`` is False."""

    __test__ = False

    def __init__(self) -> None:
        self.identity = ServiceIdentity("job-master", "jm-process-1", address="tcp://jm:1")
        self.result_store = InMemoryJobResultStore()
        self.progress_store = InMemoryJobProgressStore()
        self.rm_leader: LeaderInfo | None = None
        self.accept_reports = True
        self.reports: list[dispatcher_pb2.JobStatusReport] = []
        self.done: list[HostedJobMaster] = []

    async def report_job_status(self, report: dispatcher_pb2.JobStatusReport) -> bool:
        self.reports.append(report)
        return self.accept_reports

    def job_master_done(self, job_master: HostedJobMaster) -> None:
        self.done.append(job_master)

    def reported_statuses(self) -> list[str]:
        return [JobStatus(r.status).name for r in self.reports]


def _job_master(host: TestingJobMasterHost, runtime: ServiceRuntime) -> JobMaster:
    config = Configuration()
    return JobMaster(
        noop_pipeline("hosted", parallelism=2).build_job_graph(),
        settings=settings_from_config(config),
        config=config,
        runtime=runtime,
        host=host,
        election=StandaloneLeaderElectionService("session-1"),
        clients=RpcClientPool("test"),
        submitted_at=1.0,
    )


def _run(scenario: Any) -> None:
    async def main() -> None:
        runtime = ServiceRuntime("jm-test")
        try:
            await scenario(runtime)
        finally:
            await runtime.close()

    asyncio.run(main())


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_a_leading_job_master_reports_to_its_host_under_the_host_identity() -> None:
    host = TestingJobMasterHost()

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master(host, runtime)
        await jm.start()  # standalone: leadership is granted at once
        await _settle()
        assert jm.session_id == "session-1"
        assert jm.status is not JobStatus.INITIALIZING
        assert host.reported_statuses()[0] == "CREATED"
        first = host.reports[0]
        assert (first.job_master_process_id, first.job_master_address) == (
            "jm-process-1",
            "tcp://jm:1",
        )
        assert first.job_master_session_id == "session-1"
        assert host.done == []
        await jm.suspend("test over", tell_dispatcher=False)
        assert jm.status is JobStatus.SUSPENDED

    _run(scenario)


def test_a_job_master_stands_down_when_its_host_has_the_job_result_already() -> None:
    host = TestingJobMasterHost()

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master(host, runtime)
        host.result_store.create_dirty(jobs_pb2.JobResult(job_id=jm.job_id))
        await jm.start()
        await _settle()
        assert jm.status is JobStatus.SUSPENDED
        assert jm.session_id == ""
        assert host.done == [jm]
        assert host.reports == []  # it never led the job: nothing to tell the dispatcher

    _run(scenario)


def test_the_host_forgets_only_the_job_master_it_hosts_for_that_job() -> None:
    # The process side of job_master_done: a late notice from a replaced JobMaster of the same
    # job must not drop its successor.
    from sparkmill.services.jobmaster.service import JobMasterProcess

    class _Old:
        job_id = JobID("job-1")

    current: Any = _Old()
    process = JobMasterProcess.__new__(JobMasterProcess)
    process.job_masters = {JobID("job-1"): current}
    process.runtime = ServiceRuntime("job-master")
    process.runtime.heap.hold(current)  # its graph was large: frozen while it ran
    process.job_master_done(_Old())
    assert process.job_masters == {JobID("job-1"): current}
    assert process.runtime.heap.holders == 1
    process.job_master_done(current)
    assert process.job_masters == {}
    assert process.runtime.heap.holders == 0  # released: its graph's cycles can be collected


class TestingLeaderElection(StandaloneLeaderElectionService):
    """Grants at once, like the standalone election, but confirms with the epoch the test
    chooses (what ZooKeeper would hand out), or refuses (``None``: deposed meanwhile)."""

    __test__ = False

    def __init__(self, session_id: str, epoch: int | None) -> None:
        super().__init__(session_id)
        self.epoch = epoch

    async def confirm_leadership(self, session_id: str, address: str) -> int | None:
        await super().confirm_leadership(session_id, address)
        return self.epoch


def _job_master_with(
    host: TestingJobMasterHost, runtime: ServiceRuntime, election: TestingLeaderElection
) -> JobMaster:
    jm = _job_master(host, runtime)
    jm.election = election
    return jm


def test_the_epoch_is_the_one_the_election_confirms_not_a_clock() -> None:
    host = TestingJobMasterHost()

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master_with(host, runtime, TestingLeaderElection("session-1", 7))
        await jm.start()
        await _settle()
        assert jm.epoch == 7
        await jm.progress.flush()
        # Its progress log is named by that epoch, so successors read the logs in order.
        assert [log.id.epoch for log in host.progress_store.load(jm.job_id)] == [7]
        await jm.suspend("test over", tell_dispatcher=False)

    _run(scenario)


def test_a_job_master_deposed_before_it_confirmed_never_starts_the_job() -> None:
    host = TestingJobMasterHost()

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master_with(host, runtime, TestingLeaderElection("session-1", None))
        await jm.start()
        await _settle()
        assert jm.status is JobStatus.SUSPENDED and jm.epoch == 0
        assert "CREATED" not in host.reported_statuses()
        assert host.progress_store.load(jm.job_id) == []  # nothing recorded under it

    _run(scenario)


def test_standalone_epochs_increase_within_a_process() -> None:
    async def confirm() -> list[int | None]:
        first = StandaloneLeaderElectionService("a")
        second = StandaloneLeaderElectionService("b")
        return [
            await first.confirm_leadership("a", "tcp://x:1"),
            await second.confirm_leadership("b", "tcp://x:2"),
            await second.confirm_leadership("stale", "tcp://x:2"),
        ]

    one, two, stale = asyncio.run(confirm())
    assert one is not None and two is not None and two > one > 0
    assert stale is None


class RemovalRecordingElection(StandaloneLeaderElectionService):
    """The standalone election, recording stops and removals in order."""

    __test__ = False

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.calls: list[str] = []

    async def stop(self) -> None:
        self.calls.append("stop")
        await super().stop()

    async def remove_election(self) -> None:
        self.calls.append("remove")


def test_a_standby_that_finds_the_result_stands_down_and_removes_the_election() -> None:
    host = TestingJobMasterHost()
    election = RemovalRecordingElection("session-2")

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master(host, runtime)
        jm.election = election
        host.result_store.create_dirty(
            jobs_pb2.JobResult(job_id=jm.job_id, status=common_pb2.FINISHED)
        )
        await jm.start()  # granted at once, like a standby that wins the latch
        await _settle()
        assert jm.status is JobStatus.SUSPENDED and jm.session_id == ""
        assert election.calls == ["stop", "remove"]  # only once out of the latch
        assert host.done == [jm] and host.reports == []

    _run(scenario)


def test_a_suspended_job_master_leaves_the_election_for_its_successor() -> None:
    host = TestingJobMasterHost()
    election = RemovalRecordingElection("session-1")

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master(host, runtime)
        jm.election = election
        await jm.start()
        await _settle()
        await jm.suspend("the JobMaster lost leadership", tell_dispatcher=False)
        assert election.calls == ["stop"]

    _run(scenario)


# -- the execution graph is built in slices, before the JobMaster runs for leadership ----------


class RecordingElection(StandaloneLeaderElectionService):
    """The standalone election, remembering whether the JobMaster ever ran for leadership."""

    __test__ = False

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.started = False

    async def start(self, contender: Any) -> None:
        self.started = True
        await super().start(contender)


def _wide_job_master(
    host: TestingJobMasterHost, runtime: ServiceRuntime, election: RecordingElection
) -> JobMaster:
    config = Configuration()
    return JobMaster(
        # 2 x 4,000 subtasks: many slices of the builder (BUILD_SLICE_S each).
        noop_pipeline("wide", parallelism=4000, vertices=2).build_job_graph(),
        settings=settings_from_config(config),
        config=config,
        runtime=runtime,
        host=host,
        election=election,
        clients=RpcClientPool("test"),
        submitted_at=1.0,
    )


def test_the_graph_is_built_before_leadership_and_published_whole() -> None:
    host = TestingJobMasterHost()
    election = RecordingElection("session-1")
    seen: list[int] = []

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _wide_job_master(host, runtime, election)
        start = asyncio.create_task(jm.start())
        while not start.done():  # the loop gets turns while the graph is built
            seen.append(jm.graph.num_execution_vertices)
            await asyncio.sleep(0)
        await start
        assert jm.graph.num_execution_vertices == 8000
        assert jm.session_id == "session-1" and election.started
        await jm.suspend("test over", tell_dispatcher=False)

    _run(scenario)
    assert seen.count(0) > 2  # the loop had turns while the graph was built
    assert set(seen) == {0, 8000}  # never half a graph: empty until it is complete


def test_a_job_cancelled_while_its_graph_is_built_ends_canceled_and_holds_nothing() -> None:
    host = TestingJobMasterHost()
    election = RecordingElection("session-1")

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _wide_job_master(host, runtime, election)
        start = asyncio.create_task(jm.start())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not start.done()
        jm.cancel()
        with pytest.raises(UnavailableError, match="CANCELED"):
            await start
        assert jm.status is JobStatus.CANCELED and jm.ended_at > 0
        assert jm.graph.num_execution_vertices == 0  # the half-built graph was dropped
        assert not election.started and jm.session_id == ""
        assert host.done == [jm] and host.reports == []
        assert jm.heartbeats._checker is None  # heartbeats never started
        jm.cancel()  # again: nothing to do
        await jm.suspend("later", tell_dispatcher=False)
        assert jm.status is JobStatus.CANCELED

    _run(scenario)


def test_a_job_master_suspended_while_its_graph_is_built_lets_go_of_the_job() -> None:
    host = TestingJobMasterHost()
    election = RecordingElection("session-1")

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _wide_job_master(host, runtime, election)
        start = asyncio.create_task(jm.start())
        await asyncio.sleep(0)
        await jm.suspend("the job-master process is shutting down", tell_dispatcher=False)
        with pytest.raises(UnavailableError, match="SUSPENDED"):
            await start
        assert jm.status is JobStatus.SUSPENDED
        assert not election.started and host.done == [jm] and host.reports == []

    _run(scenario)


def test_a_job_graph_that_cannot_be_expanded_is_refused_as_invalid() -> None:
    host = TestingJobMasterHost()

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master(host, runtime)
        jm.job_graph.vertices[0].parallelism = 0  # past the validation somehow
        with pytest.raises(InvalidArgumentError, match="parallelism 0"):
            await jm.start()
        assert jm.status is JobStatus.FAILED and host.done == [jm]

    _run(scenario)


def test_a_need_the_resource_manager_gave_up_on_fails_the_oldest_request_and_leaves_the_count() -> (
    None
):
    """The resource manager reports a declared need it could not serve under an allocation id
    of its own: the JobMaster's oldest waiting request fails with that diagnosis and its
    declared count drops by one."""
    host = TestingJobMasterHost()

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master(host, runtime)
        await jm.start()
        await _settle()
        jm.slot_pool.connect_to_resource_manager()  # counted, nothing sent: no client
        assert jm.slot_requests.waiting() == 2
        oldest = jm.slot_pool.pending_requests()[0]
        jm.slot_allocation_failed(
            "f" * 32,
            common_pb2.ErrorInfo(code=common_pb2.RESOURCE_EXHAUSTED, message="no slot: 0 free"),
        )
        assert "no slot: 0 free" in str(oldest.future.exception())
        assert jm.slot_requests.waiting() == 1
        assert len(jm.slot_pool.pending_requests()) == 1
        await jm.suspend("test over", tell_dispatcher=False)

    _run(scenario)


class TestingResourceManagerClient:
    """Answers registrations (failing the first ``fail_first`` with no answer) and records
    them and the declarations sent on their own; ``reads_declarations`` False plays a resource
    manager of an older version."""

    __test__ = False

    def __init__(self, *, fail_first: int = 0, reads_declarations: bool = True) -> None:
        self.registrations: list[Any] = []
        self.declarations: list[Any] = []
        self.fail_first = fail_first
        self.reads_declarations = reads_declarations

    async def register_job_master(self, request: Any, timeout: float) -> Any:
        self.registrations.append(request)
        if len(self.registrations) <= self.fail_first:
            raise DeadlineExceededError("RegisterJobMaster got no reply")
        reply = resource_manager_pb2.RegisterJobMasterResponse(resource_manager_id="rm")
        if self.reads_declarations and request.HasField("declaration"):
            reply.declaration.SetInParent()
        return reply

    async def declare_required_resources(self, request: Any) -> Any:
        self.declarations.append(request)
        return resource_manager_pb2.DeclareRequiredResourcesResponse()

    async def disconnect_job_master(self, request: Any, timeout: float) -> Any:
        return common_pb2.Empty()


@pytest.mark.parametrize(
    ("fail_first", "reads_declarations", "declared_alone"),
    [(0, True, 0), (1, True, 0), (0, False, 1)],
    ids=["first-attempt", "after-a-lost-attempt", "older-resource-manager"],
)
def test_the_first_slot_needs_ride_on_the_registration_at_the_resource_manager(
    fail_first: int, reads_declarations: bool, declared_alone: int
) -> None:
    host = TestingJobMasterHost()  # no resource manager leader: registration is driven here
    rm = TestingResourceManagerClient(fail_first=fail_first, reads_declarations=reads_declarations)

    async def scenario(runtime: ServiceRuntime) -> None:
        jm = _job_master(host, runtime)
        await jm.start()
        await _settle()
        assert len(jm.slot_pool.pending_requests()) == 2  # scheduled before registering
        await jm._register_at_rm(rm)  # type: ignore[arg-type]
        await _settle()
        assert len(rm.registrations) == fail_first + 1
        for attempt in rm.registrations:  # every attempt carries the whole picture
            assert [r.count for r in attempt.declaration.requirements] == [2]
        versions = [a.declaration.version for a in rm.registrations]
        assert versions == sorted(set(versions))  # a new version per attempt
        # An older resource manager did not read it: declared again, on its own.
        assert len(rm.declarations) == declared_alone
        if declared_alone:
            assert [r.count for r in rm.declarations[0].requirements] == [2]
        assert jm.rm_client is cast(Any, rm)
        await jm.suspend("test over", tell_dispatcher=False)

    _run(scenario)
