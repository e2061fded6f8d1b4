"""Hand-written fakes and helpers of the RPC tests: a fake dispatcher servicer, a server on loopback
(:func:`serving`), raw frames for what no well-behaved client would send, and :func:`run`, which
gives each test its own event loop and a time limit.

Every test runs its own event loop (``asyncio.run``) and its own ZeroMQ context, binds the server
to ``tcp://127.0.0.1:0`` and talks to it through the generated typed ``DispatcherClient`` (or a
raw DEALER socket when the point is to send what no well-behaved client would).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import zmq
import zmq.asyncio

from sparkmill.common.core.errors import (
    ErrorCode,
    InvalidJobGraphError,
    NotFoundError,
    NotLeaderError,
)
from sparkmill.common.rpc import framing
from sparkmill.common.rpc.client import RpcClient
from sparkmill.common.rpc.framing import MethodSpec
from sparkmill.common.rpc.security import TransportSecurity
from sparkmill.common.rpc.server import CallContext, RpcServer
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, envelope_pb2, jobs_pb2
from sparkmill.common.v1.gateways import (
    DispatcherClient,
    DispatcherServicer,
)

T = TypeVar("T")
SERVICE = DispatcherServicer.SERVICE
TOKEN = "leader-session-0123456789abcdef"
TEST_TIMEOUT_S = 15.0  # per test: a hang must fail the test, not stall the suite


def run(test: Callable[[], Awaitable[T]]) -> T:
    """Run one async test body on a fresh event loop, bounded in time."""

    async def bounded() -> T:
        return await asyncio.wait_for(test(), TEST_TIMEOUT_S)

    return asyncio.run(bounded())


# --- the servicer under test -------------------------------------------------------------------


@dataclass
class FakeDispatcher(DispatcherServicer):
    """Implements a handful of DispatcherGateway methods; the rest stay unimplemented.

    * ``submit_job`` validates the graph (INVALID_JOB_GRAPH when it has no vertices);
    * ``list_jobs`` lists what was submitted;
    * ``get_job_status`` answers ``NotFoundError`` for unknown ids, else echoes the id after an
      optional delay encoded in the id (``"sleep:<seconds>:<anything>"``);
    * ``cancel_job`` raises a plain ``ValueError`` (a bug in the service);
    * ``register_job_master_process`` raises ``NotLeaderError``;
    * ``report_job_status`` returns the wrong response type;
    * ``get_service_info`` (unfenced) reports the session id.
    """

    # Its made-up job ids ("sleep:0.5:late") encode what it does; CheckedDispatcher below
    # shows the server's id checks.
    CHECK_REQUESTS: ClassVar[bool] = False

    token: str = TOKEN
    leading: bool = True
    jobs: dict[str, str] = field(default_factory=dict)
    contexts: list[CallContext] = field(default_factory=list)

    def expected_fencing_token(self, spec: MethodSpec, request: Any) -> str:
        if not self.leading:
            raise NotLeaderError("this dispatcher is not the leader", details="leader: elsewhere")
        return self.token

    async def submit_job(
        self, request: dispatcher_pb2.SubmitJobRequest, context: CallContext
    ) -> dispatcher_pb2.SubmitJobResponse:
        self.contexts.append(context)
        graph = request.job_graph
        if not graph.vertices:
            raise InvalidJobGraphError(
                f"job graph {graph.name!r} has no vertices", details="vertices: []"
            )
        self.jobs[graph.job_id] = graph.name
        return dispatcher_pb2.SubmitJobResponse(job_id=graph.job_id)

    async def list_jobs(
        self, request: dispatcher_pb2.ListJobsRequest, context: CallContext
    ) -> dispatcher_pb2.ListJobsResponse:
        return dispatcher_pb2.ListJobsResponse(
            jobs=[
                dispatcher_pb2.JobSummary(job_id=job_id, name=name)
                for job_id, name in sorted(self.jobs.items())
            ]
        )

    async def get_job_status(
        self, request: dispatcher_pb2.GetJobStatusRequest, context: CallContext
    ) -> jobs_pb2.JobDetails:
        job_id = request.job_id
        if job_id.startswith("sleep:"):
            await asyncio.sleep(float(job_id.split(":")[1]))
        elif job_id not in self.jobs:
            raise NotFoundError(f"job {job_id} not found", details=f"known jobs: {len(self.jobs)}")
        return jobs_pb2.JobDetails(job_id=job_id, name=self.jobs.get(job_id, ""))

    async def cancel_job(
        self, request: dispatcher_pb2.CancelJobRequest, context: CallContext
    ) -> common_pb2.Empty:
        raise ValueError(f"cannot parse job id {request.job_id!r}")

    async def get_job_result(
        self, request: dispatcher_pb2.GetJobResultRequest, context: CallContext
    ) -> jobs_pb2.JobResult:
        path = os.fsdecode(b"/results/" + request.job_id.encode() + b"-\xff.bin")  # not UTF-8
        if request.job_id == "typed":
            raise NotFoundError(f"no result file {path}", details=f"looked at {path}")
        raise FileNotFoundError(2, "No such file or directory", path)

    async def register_job_master_process(
        self, request: dispatcher_pb2.RegisterJobMasterProcessRequest, context: CallContext
    ) -> dispatcher_pb2.RegisterJobMasterProcessResponse:
        raise NotLeaderError(
            "lost leadership while registering", details="new leader: dispatcher-2"
        )

    async def report_job_status(
        self, request: dispatcher_pb2.JobStatusReport, context: CallContext
    ) -> common_pb2.Empty:
        return dispatcher_pb2.ListJobsResponse()  # type: ignore[return-value]  # a bug on purpose

    async def get_service_info(
        self, request: common_pb2.GetServiceInfoRequest, context: CallContext
    ) -> common_pb2.ServiceInfo:
        self.contexts.append(context)
        return common_pb2.ServiceInfo(
            role="dispatcher",
            id="dispatcher-1",
            is_leader=self.leading,
            leader_session_id=self.token,
        )


@dataclass
class Harness:
    ctx: zmq.asyncio.Context
    server: RpcServer
    servicer: FakeDispatcher
    rpc: RpcClient

    @property
    def address(self) -> str:
        return self.server.address

    def client(self, fencing_token: str = TOKEN) -> DispatcherClient:
        return DispatcherClient(self.rpc, fencing_token=fencing_token)

    def raw_socket(self) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.address)
        return sock


@asynccontextmanager
async def serving(**server_kwargs: Any) -> AsyncIterator[Harness]:
    ctx = zmq.asyncio.Context()
    # Raw frames are the point here, so security is off explicitly (test_security covers CURVE).
    server_kwargs.setdefault("security", TransportSecurity.disabled())
    servicer_type = server_kwargs.pop("servicer_type", FakeDispatcher)
    server = RpcServer("tcp://127.0.0.1:0", name="test-dispatcher", context=ctx, **server_kwargs)
    servicer = servicer_type()
    server.add_servicer(servicer)
    address = await server.start()
    rpc = RpcClient(address, caller="unit-test", context=ctx)
    try:
        yield Harness(ctx, server, servicer, rpc)
    finally:
        await rpc.close()
        await server.stop()
        ctx.destroy(linger=0)


def job_graph(job_id: str, name: str, vertices: int = 1) -> common_pb2.JobGraph:
    return common_pb2.JobGraph(
        job_id=job_id,
        name=name,
        vertices=[
            common_pb2.JobVertex(id=f"v{i}", name=f"vertex-{i}", parallelism=2)
            for i in range(vertices)
        ],
    )


def request_frames(
    request_id: int,
    method: str,
    payload: bytes,
    *,
    service: str = SERVICE,
    fencing_token: str = TOKEN,
    timeout_ms: int = 5000,
) -> list[bytes]:
    header = envelope_pb2.RequestHeader(
        request_id=request_id,
        service=service,
        method=method,
        timeout_ms=timeout_ms,
        fencing_token=fencing_token,
        caller="raw-socket",
    )
    return [framing.MAGIC, header.SerializeToString(), payload]


@dataclass(frozen=True)
class RawReply:
    request_id: int
    code: ErrorCode
    message: str


async def raw_reply(sock: zmq.asyncio.Socket, timeout: float = 5.0) -> RawReply:
    frames = await asyncio.wait_for(sock.recv_multipart(), timeout)
    header, _ = framing.decode_response(list(frames))
    return RawReply(header.request_id, ErrorCode(header.code), header.message)


class CheckedDispatcher(FakeDispatcher):
    CHECK_REQUESTS: ClassVar[bool] = True  # as every real service


# --- reconnects and shutdown -------------------------------------------------------------------


async def start_server_on(
    ctx: zmq.asyncio.Context, address: str, servicer: FakeDispatcher
) -> RpcServer:
    """Start a server on a fixed address, retrying while the old listener is being released."""
    deadline = time.monotonic() + 5
    while True:
        server = RpcServer(address, name="restarted", context=ctx)
        server.add_servicer(servicer)
        try:
            await server.start()
            return server
        except zmq.ZMQError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
