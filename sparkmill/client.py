"""The Python client of a sparkmill cluster (what the CLI uses).

:class:`ClusterClient` finds the dispatcher and resource manager leaders through the cluster
configuration's HA services and talks to them over the same RPC layer the services use. It
offers a blocking API (it runs its own private event loop), because its callers are scripts and
the CLI; every method has a timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from sparkmill.client_leaders import WatchedLeader
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
    FencingMismatchError,
    NotLeaderError,
    UnavailableError,
)
from sparkmill.common.core.states import job_status_name, job_status_of
from sparkmill.common.ha.leader import LeaderInfo
from sparkmill.common.jobgraph.codec import job_graph_to_proto
from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.common.rpc.addresses import split_tcp
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.security import TransportSecurity, security_from_config
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, jobs_pb2, resource_manager_pb2
from sparkmill.common.v1.gateways import DispatcherClient, ResourceManagerClient

T = TypeVar("T")
G = TypeVar("G", DispatcherClient, ResourceManagerClient)

ATTEMPT_TIMEOUT_S = 2.0
# A first contact gives up at once when every contact point has refused TCP connections for
# this long: nothing listens there (a service restarting by systemd listens again within it).
REFUSED_FOR_S = 1.0
# While waiting for a job, one status query may ride out a leader failover.
STATUS_TIMEOUT_S = 90.0
# How long one GetJobResult long poll of ``wait`` may wait at the dispatcher.
LONG_POLL_S = 30.0


@dataclass
class ClusterView:
    dispatcher: common_pb2.ServiceInfo
    job_master_process_infos: list[common_pb2.ServiceInfo]
    resource_manager: resource_manager_pb2.ClusterStatus
    # Dispatchers and resource managers that do not lead (HA standbys).
    standbys: list[common_pb2.ServiceInfo] = field(default_factory=list)

    @property
    def job_master_processes(self) -> int:
        return len(self.job_master_process_infos)


HA_CONTACT_TIMEOUT_S = 30.0
"""The first-contact bound with ZooKeeper HA: longer than a leader (or ZooKeeper) failover."""


class ClusterClient:
    """``contact_timeout``: until the cluster has answered once, no call waits longer than
    this (a command line must say at once that nothing runs at the configured addresses);
    once it has answered, each call's own timeout applies, long enough to ride out a leader
    failover."""

    def __init__(
        self,
        settings: ClusterSettings,
        ha_config: Any = None,
        *,
        contact_timeout: float | None = None,
    ) -> None:
        from sparkmill.common.ha.factory import create_ha_services

        self.settings = settings
        if contact_timeout is not None and settings.ha_mode == "zookeeper":
            # With ZooKeeper a running cluster can be between leaders (or its ensemble between
            # leaders) for a while: wait out such a failover before saying nothing answers.
            contact_timeout = max(contact_timeout, HA_CONTACT_TIMEOUT_S)
        self._contact_timeout = contact_timeout
        self._answered = False
        self._ha_config = ha_config
        self.security = (
            security_from_config(ha_config, "client", serves=False)
            if isinstance(ha_config, Configuration)
            else TransportSecurity.disabled()
        )
        self._loop = asyncio.new_event_loop()
        self._clients = RpcClientPool(
            "sparkmill-client",
            max_message_bytes=settings.rpc_max_message_bytes,
            security=self.security,
        )
        self._ha = create_ha_services(settings, ha_config, self._clients.get)
        # With ZooKeeper: each leader this client talks to, watched from its first use on.
        self._watched: dict[str, WatchedLeader] = {}

    @classmethod
    def from_config_file(
        cls,
        path: str | Path,
        *,
        overrides: Mapping[str, str] | None = None,
        contact_timeout: float | None = None,
    ) -> ClusterClient:
        """A client of the cluster ``path`` configures; ``overrides`` (``-D key=value``)
        replace keys of the file and are validated like it."""
        from sparkmill.common.runtime.settings import settings_from_config

        config = Configuration.load(Path(path))
        if overrides:
            config = config.with_overrides(overrides, source="-D")
        return cls(settings_from_config(config), config, contact_timeout=contact_timeout)

    def contact_points(self) -> str:
        """Where this client looks for the cluster (for messages)."""
        from sparkmill.common.config import options as opt

        config = self._ha_config
        if isinstance(config, Configuration) and config.get(opt.HA_MODE) == "zookeeper":
            return f"ZooKeeper at {config.get(opt.HA_ZOOKEEPER_QUORUM)}"
        return (
            f"dispatcher at {self.settings.dispatcher_address}, resource manager at "
            f"{self.settings.resource_manager_address}"
        )

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        for watched in self._watched.values():
            self._loop.run_until_complete(watched.close())
        self._loop.run_until_complete(self._clients.close())
        self._loop.run_until_complete(self._ha.close())
        self._loop.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def _watched_leader(self, which: str) -> WatchedLeader:
        watched = self._watched.get(which)
        if watched is None:
            retrieval = (
                self._ha.dispatcher_retrieval()
                if which == "dispatcher"
                else self._ha.resource_manager_retrieval()
            )
            watched = self._watched[which] = WatchedLeader(retrieval)
        return watched

    async def _leader(self, which: str, timeout: float) -> LeaderInfo:
        if self.settings.ha_mode == "zookeeper":
            try:
                async with asyncio.timeout(timeout):
                    return await self._watched_leader(which).leader()
            except TimeoutError:
                raise UnavailableError(f"no {which} leader found within {timeout:g}s") from None
        retrieval = (
            self._ha.dispatcher_retrieval()
            if which == "dispatcher"
            else self._ha.resource_manager_retrieval()
        )
        found: asyncio.Future[LeaderInfo] = asyncio.get_running_loop().create_future()

        def listener(info: LeaderInfo | None) -> None:
            if info is not None and not found.done():
                found.set_result(info)

        await retrieval.start(listener)
        try:
            async with asyncio.timeout(timeout):
                return await found
        except TimeoutError:
            raise UnavailableError(f"no {which} leader found within {timeout:g}s") from None
        finally:
            await retrieval.stop()

    async def _dispatcher(self, timeout: float) -> DispatcherClient:
        leader = await self._leader("dispatcher", timeout)
        return DispatcherClient(self._clients.get(leader.address), fencing_token=leader.session_id)

    async def _resource_manager(self, timeout: float) -> ResourceManagerClient:
        leader = await self._leader("resource manager", timeout)
        return ResourceManagerClient(
            self._clients.get(leader.address), fencing_token=leader.session_id
        )

    async def _with_dispatcher(
        self, call: Callable[[DispatcherClient, float], Coroutine[Any, Any, T]], timeout: float
    ) -> T:
        return await self._with_leader(self._dispatcher, call, timeout)

    async def _with_resource_manager(
        self,
        call: Callable[[ResourceManagerClient, float], Coroutine[Any, Any, T]],
        timeout: float,
    ) -> T:
        return await self._with_leader(self._resource_manager, call, timeout)

    async def _with_leader(
        self,
        connect: Callable[[float], Coroutine[Any, Any, G]],
        call: Callable[[G, float], Coroutine[Any, Any, T]],
        timeout: float,
    ) -> T:
        """Call a leader, following leader changes until ``timeout`` runs out.

        Each attempt gets a short deadline of its own: after a failover the old leader's
        address may stay published until its ZooKeeper session expires, and an attempt against
        a dead (or frozen) process must not eat the whole budget.
        """
        first_contact = not self._answered and self._contact_timeout is not None
        if first_contact and self._contact_timeout is not None:
            timeout = min(timeout, self._contact_timeout)
            if self.settings.ha_mode != "zookeeper":
                await self._refuse_when_nothing_listens()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            attempt = max(0.5, min(ATTEMPT_TIMEOUT_S, remaining))
            try:
                gateway = await connect(attempt)
                answer = await call(gateway, attempt)
                self._answered = True
                return answer
            except (NotLeaderError, FencingMismatchError, DeadlineExceededError, UnavailableError):
                if time.monotonic() + 0.2 >= deadline:
                    if first_contact:
                        raise UnavailableError(
                            f"nothing answered within {timeout:g}s (tried the "
                            f"{self.contact_points()}); is the cluster running? Start one "
                            "with `sparkmill local-cluster up --dir DIR`, or give the "
                            "configuration of a running cluster with --config or "
                            "SPARKMILL_CONFIG"
                        ) from None
                    raise
                await asyncio.sleep(0.2)

    async def _refuse_when_nothing_listens(self) -> None:
        """Raise :class:`UnavailableError` when the configured addresses refuse every TCP
        connection for :data:`REFUSED_FOR_S`.

        ZeroMQ reconnects quietly to a port nobody listens on, so without this a command line
        pointed at no cluster would wait out its whole contact timeout. A probe that does not
        end in a refusal (a firewall that drops, a slow network) proves nothing: the RPC
        attempt and its timeout decide then."""
        addresses = [self.settings.dispatcher_address, self.settings.resource_manager_address]
        deadline = time.monotonic() + REFUSED_FOR_S
        while True:
            answers = await asyncio.gather(*(_tcp_refused(a) for a in addresses))
            if not all(answers):
                return
            if time.monotonic() >= deadline:
                raise UnavailableError(
                    f"nothing listens at the {self.contact_points()} (connection refused for "
                    f"{REFUSED_FOR_S:g}s); is the cluster running? Start one with `sparkmill "
                    "local-cluster up --dir DIR`, or give the configuration of a running "
                    "cluster with --config or SPARKMILL_CONFIG"
                )
            await asyncio.sleep(0.2)

    # -- jobs ----------------------------------------------------------------------------------

    def submit(self, graph: JobGraph, *, timeout: float = 60.0) -> str:
        request = dispatcher_pb2.SubmitJobRequest(job_graph=job_graph_to_proto(graph))

        tries = 0

        async def call(d: DispatcherClient, attempt: float) -> str:
            nonlocal tries
            tries += 1
            try:
                # Submission stores the graph before answering: allow it more than a query.
                return (await d.submit_job(request, timeout=max(attempt, 15.0))).job_id
            except AlreadyExistsError:
                if tries == 1:
                    raise
                # An earlier attempt reached a leader that stored the job before it died.
                return graph.job_id

        return self._run(self._with_dispatcher(call, timeout))

    def list_jobs(self, *, timeout: float = 10.0) -> list[dispatcher_pb2.JobSummary]:
        """Every job the dispatcher knows, in submission order (walking the pages)."""
        jobs: list[dispatcher_pb2.JobSummary] = []
        token = ""
        while True:
            page = self.list_jobs_page(token, timeout=timeout)
            jobs.extend(page.jobs)
            token = page.next_page_token
            if not token:
                return jobs

    def list_jobs_page(
        self, page_token: str = "", *, page_size: int = 0, timeout: float = 10.0
    ) -> dispatcher_pb2.ListJobsResponse:
        """One page of the job list (``page_size`` 0: the dispatcher's default)."""
        request = dispatcher_pb2.ListJobsRequest(page_size=page_size, page_token=page_token)

        async def call(d: DispatcherClient, attempt: float) -> dispatcher_pb2.ListJobsResponse:
            return await d.list_jobs(request, timeout=attempt)

        return self._run(self._with_dispatcher(call, timeout))

    def status(self, job_id: str, *, timeout: float = 10.0) -> jobs_pb2.JobDetails:
        async def call(d: DispatcherClient, attempt: float) -> jobs_pb2.JobDetails:
            return await d.get_job_status(
                dispatcher_pb2.GetJobStatusRequest(job_id=job_id), timeout=attempt
            )

        return self._run(self._with_dispatcher(call, timeout))

    def attempt_logs(self, job_id: str, *, timeout: float = 15.0) -> jobs_pb2.AttemptLogIndex:
        """The job's attempts whose logs the task executors keep (or the archived index)."""

        async def call(d: DispatcherClient, attempt: float) -> jobs_pb2.AttemptLogIndex:
            return await d.list_attempt_logs(
                jobs_pb2.ListAttemptLogsRequest(job_id=job_id), timeout=attempt
            )

        return self._run(self._with_dispatcher(call, timeout))

    def attempt_log(
        self, request: jobs_pb2.GetAttemptLogRequest, *, timeout: float = 15.0
    ) -> jobs_pb2.AttemptLogChunk:
        """A piece of one attempt's log (see ``GetAttemptLogRequest``)."""

        async def call(d: DispatcherClient, attempt: float) -> jobs_pb2.AttemptLogChunk:
            return await d.get_attempt_log(request, timeout=attempt)

        return self._run(self._with_dispatcher(call, timeout))

    def cancel(self, job_id: str, *, timeout: float = 10.0) -> None:
        async def call(d: DispatcherClient, attempt: float) -> None:
            await d.cancel_job(dispatcher_pb2.CancelJobRequest(job_id=job_id), timeout=attempt)

        self._run(self._with_dispatcher(call, timeout))

    def result(self, job_id: str, *, timeout: float = 10.0) -> jobs_pb2.JobResult:
        async def call(d: DispatcherClient, attempt: float) -> jobs_pb2.JobResult:
            return await d.get_job_result(
                dispatcher_pb2.GetJobResultRequest(job_id=job_id), timeout=attempt
            )

        return self._run(self._with_dispatcher(call, timeout))

    def result_within(self, job_id: str, wait_s: float) -> jobs_pb2.JobResult | None:
        """The job's result if it ends within ``wait_s`` (a long poll at the dispatcher), else
        ``None``."""
        wait_ms = max(1, int(wait_s * 1000))

        async def call(d: DispatcherClient, attempt: float) -> jobs_pb2.JobResult | None:
            poll = d.get_job_result(
                dispatcher_pb2.GetJobResultRequest(job_id=job_id, wait_ms=wait_ms),
                timeout=wait_s + attempt,
            )
            try:
                return await self._unless_dispatcher_moves(poll, d.fencing_token)
            except FailedPreconditionError:
                return None  # not ended yet

        return self._run(self._with_dispatcher(call, STATUS_TIMEOUT_S + wait_s))

    async def _unless_dispatcher_moves(self, call: Coroutine[Any, Any, T], session: str) -> T:
        """``call`` (a long poll), given up when the dispatcher leader it was sent to stops
        leading: a dead leader never answers, and waiting out the poll's whole deadline would
        hold a finished job's result back for half a minute after a failover. With ZooKeeper
        only: there the leader is watched for free; a standalone leader cannot move."""
        if self.settings.ha_mode != "zookeeper":
            return await call
        moved = asyncio.Event()

        def listener(info: LeaderInfo | None) -> None:
            if info is None or info.session_id != session:
                moved.set()

        watched = self._watched_leader("dispatcher")
        await watched.start()  # started already by the call's leader lookup, as a rule
        answer = asyncio.ensure_future(call)
        unsubscribe = watched.subscribe(listener)
        if watched.reported:
            listener(watched.current)  # it may have moved before we subscribed
        watch = asyncio.ensure_future(moved.wait())
        try:
            await asyncio.wait({answer, watch}, return_when=asyncio.FIRST_COMPLETED)
            if answer.done():
                return answer.result()
            raise UnavailableError("the dispatcher leader changed during the call; asking again")
        finally:
            for task in (answer, watch):
                task.cancel()
            await asyncio.gather(answer, watch, return_exceptions=True)
            unsubscribe()

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        poll_s: float = 0.25,
        progress: Callable[[jobs_pb2.JobDetails], None] | None = None,
    ) -> jobs_pb2.JobResult:
        """Block until the job is terminal; returns its result (whatever the outcome).

        The result is long-polled, so it arrives the moment the job ends; with ``progress`` the
        job's details are fetched for it every ``poll_s`` in between.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if progress is not None:
                progress(self.status(job_id, timeout=STATUS_TIMEOUT_S))
            wait_s = poll_s if progress is not None else LONG_POLL_S
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    number = self.status(job_id, timeout=STATUS_TIMEOUT_S).status
                    status = job_status_of(number)
                    if status is not None and status.is_globally_terminal:  # it ended just now
                        return self.result(job_id, timeout=STATUS_TIMEOUT_S)
                    raise DeadlineExceededError(
                        f"job {job_id} still {job_status_name(number)} after {timeout:g}s"
                    )
                wait_s = min(wait_s, remaining)
            began = time.monotonic()
            result = self.result_within(job_id, wait_s)
            if result is not None:
                return result
            if time.monotonic() - began < wait_s / 2:
                time.sleep(poll_s)  # a dispatcher that answers at once (no long poll)

    # -- cluster -------------------------------------------------------------------------------

    def cluster_status(self, *, timeout: float = 10.0) -> ClusterView:
        async def services(d: DispatcherClient, attempt: float) -> dispatcher_pb2.ClusterServices:
            return await d.get_cluster_services(
                dispatcher_pb2.GetClusterServicesRequest(), timeout=attempt
            )

        async def slots(
            rm: ResourceManagerClient, attempt: float
        ) -> resource_manager_pb2.ClusterStatus:
            return await rm.get_cluster_status(
                resource_manager_pb2.GetClusterStatusRequest(), timeout=attempt
            )

        async def query() -> ClusterView:
            found = await self._with_dispatcher(services, timeout)
            status = await self._with_resource_manager(slots, timeout)
            leaders = {found.dispatcher.id, status.resource_manager.id}
            standbys = []
            members = await self._ha.members()
            for role in ("dispatcher", "resource-manager"):
                for blob in members.get(role, []):
                    info = common_pb2.ServiceInfo()
                    info.ParseFromString(blob)
                    if info.id not in leaders:
                        info.is_leader = False
                        standbys.append(info)
            return ClusterView(found.dispatcher, list(found.job_master_processes), status, standbys)

        return self._run(query())


async def _tcp_refused(address: str, timeout: float = 0.5) -> bool:
    """Whether a TCP connection to ``tcp://host:port`` is refused (closed at once if not)."""
    host, port = split_tcp(address)
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, int(port))
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError, ValueError):
        return False  # unreachable, filtered or slow: not proof that nothing listens
    writer.close()
    return False
