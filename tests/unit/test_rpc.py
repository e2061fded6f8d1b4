"""The RPC layer end to end: a real RpcServer on loopback, real clients, real ZeroMQ sockets.

Every test runs its own event loop (``asyncio.run``) and its own ZeroMQ context, binds the server
to ``tcp://127.0.0.1:0`` and talks to it through the generated typed ``DispatcherClient`` (or a
raw DEALER socket when the point is to send what no well-behaved client would).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import pytest
import zmq
import zmq.asyncio

from sparkmill.common.core.errors import (
    DeadlineExceededError,
    ErrorCode,
    FencingMismatchError,
    InternalError,
    InvalidArgumentError,
    InvalidJobGraphError,
    NotFoundError,
    NotLeaderError,
    RpcError,
    UnavailableError,
    UnimplementedError,
)
from sparkmill.common.rpc import framing
from sparkmill.common.rpc.client import RpcClient
from sparkmill.common.rpc.framing import MethodSpec
from sparkmill.common.rpc.security import TransportSecurity
from sparkmill.common.rpc.server import CallContext, RpcServer
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, envelope_pb2, jobs_pb2
from sparkmill.common.v1.gateways import (
    DISPATCHERGATEWAY_METHODS,
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


# --- round trips -------------------------------------------------------------------------------


def test_typed_round_trip_submit_and_list_jobs() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            submitted = await client.submit_job(
                dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("job-1", "wordcount", 3))
            )
            assert isinstance(submitted, dispatcher_pb2.SubmitJobResponse)
            assert submitted.job_id == "job-1"
            await client.submit_job(
                dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("job-2", "etl"))
            )

            listed = await client.list_jobs(dispatcher_pb2.ListJobsRequest())
            assert [(j.job_id, j.name) for j in listed.jobs] == [
                ("job-1", "wordcount"),
                ("job-2", "etl"),
            ]
            details = await client.get_job_status(
                dispatcher_pb2.GetJobStatusRequest(job_id="job-1")
            )
            assert (details.job_id, details.name) == ("job-1", "wordcount")

            # The header travelled with the call: caller, token and the requested timeout.
            context = h.servicer.contexts[0]
            assert context.caller == "unit-test"
            assert context.fencing_token == TOKEN
            assert context.header.timeout_ms == 30_000  # SubmitJob's default_timeout_ms
            assert context.deadline == pytest.approx(context.received_at + 30.0)
            assert h.server.stats.requests["SubmitJob"] == 2
            assert h.server.stats.requests["ListJobs"] == 1
            assert not h.server.stats.errors
            assert not h.server.stats.malformed

    run(body)


# --- typed errors across the wire --------------------------------------------------------------


def test_not_found_crosses_the_wire_with_message_and_details() -> None:
    async def body() -> None:
        async with serving() as h:
            with pytest.raises(NotFoundError) as caught:
                await h.client().get_job_status(dispatcher_pb2.GetJobStatusRequest(job_id="nope"))
            assert type(caught.value) is NotFoundError
            assert caught.value.code == ErrorCode.NOT_FOUND
            assert caught.value.message == "job nope not found"
            assert str(caught.value) == "job nope not found"
            assert caught.value.details == "known jobs: 0"
            assert h.server.stats.errors["GetJobStatus:NOT_FOUND"] == 1

    run(body)


def test_invalid_job_graph_crosses_the_wire_as_the_subclass() -> None:
    async def body() -> None:
        async with serving() as h:
            empty = common_pb2.JobGraph(job_id="job-x", name="empty")
            with pytest.raises(InvalidJobGraphError) as caught:
                await h.client().submit_job(dispatcher_pb2.SubmitJobRequest(job_graph=empty))
            assert type(caught.value) is InvalidJobGraphError
            assert isinstance(caught.value, InvalidArgumentError)  # still catchable as the base
            assert caught.value.message == "job graph 'empty' has no vertices"
            assert caught.value.details == "vertices: []"
            assert h.servicer.jobs == {}

    run(body)


def test_not_leader_crosses_the_wire_from_handler_and_from_token_check() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            with pytest.raises(NotLeaderError) as caught:
                await client.register_job_master_process(
                    dispatcher_pb2.RegisterJobMasterProcessRequest(process_id="jm-1")
                )
            assert type(caught.value) is NotLeaderError
            assert caught.value.message == "lost leadership while registering"
            assert caught.value.details == "new leader: dispatcher-2"

            # expected_fencing_token() refusing (no longer leader) also becomes NotLeaderError.
            h.servicer.leading = False
            with pytest.raises(NotLeaderError) as caught:
                await client.list_jobs(dispatcher_pb2.ListJobsRequest())
            assert caught.value.message == "this dispatcher is not the leader"
            assert caught.value.details == "leader: elsewhere"

    run(body)


def test_unexpected_handler_exception_is_internal_and_server_keeps_serving() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            for _ in range(2):  # twice: the first failure must not have broken anything
                with pytest.raises(InternalError) as caught:
                    await client.cancel_job(dispatcher_pb2.CancelJobRequest(job_id="j#1"))
                assert type(caught.value) is InternalError
                assert "CancelJob failed inside test-dispatcher" in caught.value.message
                assert "ValueError (a bug; error id " in caught.value.message
                # The traceback and the exception's text stay in the service's log.
                assert "cannot parse" not in caught.value.message
                assert caught.value.details == ""
            assert h.server.stats.errors["CancelJob:INTERNAL"] == 2

            info = await client.get_service_info(common_pb2.GetServiceInfoRequest())
            assert info.id == "dispatcher-1"

    run(body)


class CheckedDispatcher(FakeDispatcher):
    CHECK_REQUESTS: ClassVar[bool] = True  # as every real service


def test_bad_ids_and_enums_are_refused_before_the_handler_runs() -> None:
    async def body() -> None:
        async with serving(servicer_type=CheckedDispatcher) as h:
            client = h.client()
            with pytest.raises(InvalidArgumentError) as caught:
                await client.cancel_job(dispatcher_pb2.CancelJobRequest(job_id="../../etc"))
            assert "CancelJobRequest.job_id '../../etc' is not valid" in caught.value.message
            report = dispatcher_pb2.JobStatusReport(job_id="0" * 32, status=77)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError) as caught:
                await client.report_job_status(report)
            assert "JobStatusReport.status is 77, not a JobStatus value" in caught.value.message
            assert h.servicer.contexts == []  # no handler ran
            assert h.server.stats.errors == {
                "CancelJob:INVALID_ARGUMENT": 1,
                "ReportJobStatus:INVALID_ARGUMENT": 1,
            }
            # A valid id reaches the handler (which, in this fake, is a bug: INTERNAL).
            with pytest.raises(InternalError):
                await client.cancel_job(dispatcher_pb2.CancelJobRequest(job_id="0" * 32))

    run(body)


def test_error_text_that_is_not_utf8_still_crosses_the_wire() -> None:
    """A surrogate-escaped file name in an error must not cost the caller its answer."""

    async def body() -> None:
        async with serving() as h:
            client = h.client()
            with pytest.raises(NotFoundError) as caught:
                await client.get_job_result(
                    dispatcher_pb2.GetJobResultRequest(job_id="typed"), timeout=5
                )
            assert caught.value.message == "no result file /results/typed-\\udcff.bin"
            assert caught.value.details == "looked at /results/typed-\\udcff.bin"

            with pytest.raises(InternalError) as internal:
                await client.get_job_result(
                    dispatcher_pb2.GetJobResultRequest(job_id="j1"), timeout=5
                )
            assert "FileNotFoundError" in internal.value.message
            assert "/results/" not in internal.value.message  # only in the service log
            assert h.server.stats.errors == {
                "GetJobResult:NOT_FOUND": 1,
                "GetJobResult:INTERNAL": 1,
            }

    run(body)


def test_handler_returning_the_wrong_type_is_internal() -> None:
    async def body() -> None:
        async with serving() as h:
            with pytest.raises(InternalError) as caught:
                await h.client().report_job_status(dispatcher_pb2.JobStatusReport(job_id="j"))
            assert "ReportJobStatus returned ListJobsResponse" in caught.value.message
            assert "sparkmill.v1.Empty" in caught.value.message

    run(body)


# --- unimplemented -----------------------------------------------------------------------------


def test_method_not_overridden_is_unimplemented() -> None:
    async def body() -> None:
        async with serving() as h:
            with pytest.raises(UnimplementedError) as caught:
                await h.client().get_cluster_services(dispatcher_pb2.GetClusterServicesRequest())
            assert caught.value.message == (
                "sparkmill.v1.DispatcherGateway.GetClusterServices is not implemented "
                "by this service"
            )
            assert h.server.stats.errors["GetClusterServices:UNIMPLEMENTED"] == 1

    run(body)


def test_unknown_service_and_unknown_method_are_unimplemented() -> None:
    async def body() -> None:
        async with serving() as h:
            list_jobs = DISPATCHERGATEWAY_METHODS["ListJobs"]
            with pytest.raises(UnimplementedError, match=r"does not serve sparkmill\.v1\.Nope"):
                await h.rpc.call(
                    "sparkmill.v1.Nope", list_jobs, dispatcher_pb2.ListJobsRequest(), timeout=5
                )
            bogus = MethodSpec(
                "Frobnicate",
                "frobnicate",
                dispatcher_pb2.ListJobsRequest,
                dispatcher_pb2.ListJobsResponse,
                fenced=False,
                default_timeout_s=5.0,
            )
            with pytest.raises(UnimplementedError, match="has no method 'Frobnicate'"):
                await h.rpc.call(SERVICE, bogus, dispatcher_pb2.ListJobsRequest(), timeout=5)

            # The same with hand-built headers from a raw socket: the reply echoes the id.
            sock = h.raw_socket()
            try:
                await sock.send_multipart(
                    request_frames(77, "ListJobs", b"", service="sparkmill.v1.Nope")
                )
                reply = await raw_reply(sock)
                assert (reply.request_id, reply.code) == (77, ErrorCode.UNIMPLEMENTED)
                assert "sparkmill.v1.Nope" in reply.message
                # Not even a method the servicer base knows as a handler attribute name.
                await sock.send_multipart(request_frames(78, "__init__", b""))
                reply = await raw_reply(sock)
                assert (reply.request_id, reply.code) == (78, ErrorCode.UNIMPLEMENTED)
                await sock.send_multipart(request_frames(79, "list_jobs", b""))
                reply = await raw_reply(sock)
                assert (reply.request_id, reply.code) == (79, ErrorCode.UNIMPLEMENTED)
            finally:
                sock.close(linger=0)
            assert not h.server.stats.malformed  # well-formed, merely unknown

    run(body)


# --- fencing -----------------------------------------------------------------------------------


def test_fenced_method_with_wrong_token_is_refused_naming_only_the_callers_prefix() -> None:
    async def body() -> None:
        async with serving() as h:
            stale = DispatcherClient(h.rpc, fencing_token="stale-session-fedcba9876")
            with pytest.raises(FencingMismatchError) as caught:
                await stale.submit_job(
                    dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("job-1", "x"))
                )
            message = caught.value.message
            assert "SubmitJob refused" in message
            assert "stale-se" in message  # the caller's token, abbreviated
            # The leader's token is a secret a forger would need: not even a prefix is echoed.
            assert TOKEN[:8] not in message
            assert "fedcba9876" not in message
            assert "caller: unit-test" in message
            assert h.servicer.jobs == {}  # the stale leader's request was not obeyed
            assert h.server.stats.errors["SubmitJob:FENCING_MISMATCH"] == 1

    run(body)


def test_fenced_method_without_token_is_refused() -> None:
    async def body() -> None:
        async with serving() as h:
            with pytest.raises(FencingMismatchError) as caught:
                await h.client(fencing_token="").list_jobs(dispatcher_pb2.ListJobsRequest())
            assert "fencing token (none)" in caught.value.message
            assert TOKEN[:8] not in caught.value.message

            # The per-call token overrides the client's default (here: a correct one).
            listed = await h.client(fencing_token="").list_jobs(
                dispatcher_pb2.ListJobsRequest(), fencing_token=TOKEN
            )
            assert list(listed.jobs) == []

    run(body)


def test_correct_token_passes_and_follows_a_new_leader_session() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            await client.submit_job(
                dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("job-1", "a"))
            )
            assert h.servicer.jobs == {"job-1": "a"}

            h.servicer.token = "next-session-42"  # a new leadership term
            with pytest.raises(FencingMismatchError):
                await client.list_jobs(dispatcher_pb2.ListJobsRequest())
            client.fencing_token = "next-session-42"
            listed = await client.list_jobs(dispatcher_pb2.ListJobsRequest())
            assert [j.job_id for j in listed.jobs] == ["job-1"]

    run(body)


def test_unfenced_get_service_info_needs_no_token() -> None:
    async def body() -> None:
        async with serving() as h:
            for token in ("", "garbage"):
                info = await h.client(fencing_token=token).get_service_info(
                    common_pb2.GetServiceInfoRequest()
                )
                assert (info.role, info.leader_session_id) == ("dispatcher", TOKEN)
            h.servicer.leading = False  # not even asked for a token: works on a follower too
            info = await h.client(fencing_token="").get_service_info(
                common_pb2.GetServiceInfoRequest()
            )
            assert info.is_leader is False

    run(body)


# --- deadlines ---------------------------------------------------------------------------------


def test_slow_handler_exceeds_the_deadline_and_the_late_reply_is_ignored() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            started = time.monotonic()
            with pytest.raises(DeadlineExceededError) as caught:
                await client.get_job_status(
                    dispatcher_pb2.GetJobStatusRequest(job_id="sleep:0.5:late"), timeout=0.15
                )
            assert time.monotonic() - started >= 0.14  # it waited out its timeout
            assert "GetJobStatus" in caught.value.message
            assert h.address in caught.value.message
            assert "0.15s" in caught.value.message

            # A second call in flight while the first call's reply arrives late: it must get
            # its own answer, not the stale one.
            second = await client.get_job_status(
                dispatcher_pb2.GetJobStatusRequest(job_id="sleep:0.6:second"), timeout=5
            )
            assert second.job_id == "sleep:0.6:second"
            assert h.server.stats.requests["GetJobStatus"] == 2  # the late one was answered too
            assert h.rpc._pending == {}

            third = await client.get_service_info(common_pb2.GetServiceInfoRequest(), timeout=2)
            assert third.id == "dispatcher-1"

    run(body)


def test_request_queued_past_its_deadline_is_dropped_by_the_server() -> None:
    async def body() -> None:
        async with serving() as h:
            sock = h.raw_socket()
            try:
                # Three requests reach the server in one burst (the test blocks the shared event
                # loop while ZeroMQ queues them). The first handler then blocks the loop, which a
                # handler must never do, for longer than the second request's 1 ms budget: when
                # the second is dispatched, its caller has given up already, so it is dropped.
                async def blocking_info(
                    request: common_pb2.GetServiceInfoRequest, context: CallContext
                ) -> common_pb2.ServiceInfo:
                    if context.header.request_id == 1:
                        time.sleep(0.05)  # noqa: ASYNC251 - blocking on purpose
                    return common_pb2.ServiceInfo(id=str(context.header.request_id))

                h.servicer.get_service_info = blocking_info  # type: ignore[method-assign]
                await sock.send_multipart(request_frames(1, "GetServiceInfo", b""))
                await sock.send_multipart(request_frames(2, "GetServiceInfo", b"", timeout_ms=1))
                await sock.send_multipart(request_frames(3, "GetServiceInfo", b""))
                time.sleep(0.1)  # noqa: ASYNC251 - let ZeroMQ queue all three
                assert [(await raw_reply(sock)).request_id for _ in range(2)] == [1, 3]
                # Request 2 was never answered: the next reply on this socket is request 4's.
                await sock.send_multipart(request_frames(4, "GetServiceInfo", b""))
                assert (await raw_reply(sock)).request_id == 4

                assert h.server.stats.expired == 1
                assert h.server.stats.requests["GetServiceInfo"] == 4
                assert h.server.stats.errors == {"GetServiceInfo:TIMEOUT": 1}
            finally:
                sock.close(linger=0)

    run(body)


# --- malformed input ---------------------------------------------------------------------------


def test_malformed_messages_never_crash_the_server() -> None:
    async def body() -> None:
        async with serving(max_message_bytes=4096) as h:
            sock = h.raw_socket()
            rng = random.Random(1234)
            try:
                garbage: list[list[bytes]] = [
                    [rng.randbytes(64)],  # one random frame
                    [rng.randbytes(5), rng.randbytes(40), rng.randbytes(300)],  # three
                    [rng.randbytes(7) for _ in range(7)],  # seven
                    [b"SM2", b"", b""],  # wrong magic (an incompatible version)
                    [b"GET / HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"],  # a confused web client
                    [framing.MAGIC, b"\x08", b""],  # undecodable header (truncated varint)
                    [framing.MAGIC, b"\x0a\xff\xff", b""],  # undecodable header (bad length)
                    # A header without a request id: nothing to answer, only counted.
                    [
                        framing.MAGIC,
                        envelope_pb2.RequestHeader(
                            service=SERVICE, method="ListJobs", fencing_token=TOKEN
                        ).SerializeToString(),
                        b"",
                    ],
                    [framing.MAGIC],  # magic only
                ]
                expected_malformed = 0
                for frames in garbage:
                    await sock.send_multipart(frames)
                    expected_malformed += 1

                # None of the above is answered: the next reply on this socket is the ping's.
                await sock.send_multipart(request_frames(1000, "GetServiceInfo", b""))
                reply = await raw_reply(sock)
                assert (reply.request_id, reply.code) == (1000, ErrorCode.OK)

                # A truncated payload for a known method: the request id is known, so the
                # caller is told INVALID_ARGUMENT instead of waiting for its timeout.
                graph = dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("j", "n", 3))
                truncated = graph.SerializeToString()[:-5]
                await sock.send_multipart(request_frames(1001, "SubmitJob", truncated))
                reply = await raw_reply(sock)
                assert (reply.request_id, reply.code) == (1001, ErrorCode.INVALID_ARGUMENT)
                assert "sparkmill.v1.SubmitJobRequest" in reply.message
                expected_malformed += 1

                # A header with a request id but no method: answered INVALID_ARGUMENT as well.
                header = envelope_pb2.RequestHeader(request_id=1002, service=SERVICE)
                await sock.send_multipart([framing.MAGIC, header.SerializeToString(), b""])
                reply = await raw_reply(sock)
                assert (reply.request_id, reply.code) == (1002, ErrorCode.INVALID_ARGUMENT)
                assert "lacks request_id, service or method" in reply.message
                expected_malformed += 1

                # Oversized (over max_message_bytes, under libzmq's hard cap).
                big = dispatcher_pb2.SubmitJobRequest(
                    job_graph=common_pb2.JobGraph(job_id="big", name="x" * 10_000)
                )
                await sock.send_multipart(
                    request_frames(1003, "SubmitJob", big.SerializeToString())
                )
                reply = await raw_reply(sock)
                assert (reply.request_id, reply.code) == (1003, ErrorCode.INVALID_ARGUMENT)
                assert "exceed the limit of 4096 bytes" in reply.message
                expected_malformed += 1
                assert "big" not in h.servicer.jobs

                assert sum(h.server.stats.malformed.values()) == expected_malformed
                assert h.server.stats.malformed == {
                    "wrong frame count": 3,  # 1, 7 and 1 frames
                    "bad magic": 3,
                    "undecodable request header": 2,
                    "request header lacks request_id, service or method": 2,
                    "undecodable sparkmill.v1.SubmitJobRequest payload": 1,
                    "message too large": 1,
                }
            finally:
                sock.close(linger=0)

            # The server still serves a normal client, and nothing above reached a handler.
            client = h.client()
            submitted = await client.submit_job(
                dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("ok", "fine"))
            )
            assert submitted.job_id == "ok"
            assert h.servicer.jobs == {"ok": "fine"}
            assert set(h.server.stats.requests) == {"GetServiceInfo", "SubmitJob"}

    run(body)


def test_malformed_stats_are_keyed_by_kind_not_by_content() -> None:
    """Garbage must not grow the stats without bound: one key per kind of problem."""

    async def body() -> None:
        async with serving(max_message_bytes=1024) as h:
            sock = h.raw_socket()
            rng = random.Random(99)
            try:
                for n in range(1, 41):
                    await sock.send_multipart([rng.randbytes(8 + n)] * (1 + n % 5))  # bad magic
                    await sock.send_multipart(
                        request_frames(0, "GetServiceInfo", rng.randbytes(1025 + n))
                    )
                await sock.send_multipart(request_frames(1, "GetServiceInfo", b""))
                reply = await raw_reply(sock)
                assert reply.code == ErrorCode.OK
            finally:
                sock.close(linger=0)
            assert h.server.stats.malformed == {
                "wrong frame count": 32,
                "bad magic": 8,
                "message too large": 40,
            }

    run(body)


def test_oversized_request_from_a_typed_client_fails_fast() -> None:
    async def body() -> None:
        async with serving(max_message_bytes=2048) as h:
            big = job_graph("big", "y" * 5000)
            started = time.monotonic()
            with pytest.raises(InvalidArgumentError, match="exceed the limit of 2048 bytes"):
                await h.client().submit_job(
                    dispatcher_pb2.SubmitJobRequest(job_graph=big), timeout=5
                )
            assert time.monotonic() - started < 2.0  # answered, not timed out
            small = await h.client().submit_job(
                dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("small", "z"))
            )
            assert small.job_id == "small"

    run(body)


def test_malformed_reply_is_dropped_by_the_client() -> None:
    """A peer answering garbage (or a reply for an unknown id) does not break the client."""

    async def body() -> None:
        ctx = zmq.asyncio.Context()
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        rpc = RpcClient(f"tcp://127.0.0.1:{port}", context=ctx)
        try:
            call = asyncio.create_task(
                DispatcherClient(rpc).get_service_info(common_pb2.GetServiceInfoRequest())
            )
            identity, *frames = await router.recv_multipart()
            header, _ = framing.decode_request(frames)
            await router.send_multipart([identity, b"junk"])
            await router.send_multipart([identity, framing.MAGIC, b"\x08", b""])
            unknown = framing.encode_response(header.request_id + 1000, common_pb2.ServiceInfo())
            await router.send_multipart([identity, *unknown])
            reply = framing.encode_response(header.request_id, common_pb2.ServiceInfo(id="ok"))
            await router.send_multipart([identity, *reply])
            info = await asyncio.wait_for(call, 5)
            assert info.id == "ok"
            assert rpc._pending == {}
        finally:
            await rpc.close()
            router.close(linger=0)
            ctx.destroy(linger=0)

    run(body)


def test_undecodable_ok_reply_is_a_typed_error_at_the_caller() -> None:
    """A peer that answers OK with a payload that is not the response type breaks no caller."""

    async def body() -> None:
        ctx = zmq.asyncio.Context()
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        rpc = RpcClient(f"tcp://127.0.0.1:{port}", context=ctx)
        client = DispatcherClient(rpc)
        try:
            for _ in range(2):
                call = asyncio.create_task(
                    client.list_jobs(dispatcher_pb2.ListJobsRequest(), timeout=5)
                )
                identity, *frames = await router.recv_multipart()
                header, _ = framing.decode_request(frames)
                ok = envelope_pb2.ResponseHeader(request_id=header.request_id)
                await router.send_multipart(
                    [identity, framing.MAGIC, ok.SerializeToString(), b"\x0a\xff\xff"]
                )
                with pytest.raises(InternalError, match="undecodable") as caught:
                    await call
                assert "ListJobs" in caught.value.message
                assert f"127.0.0.1:{port}" in caught.value.message
        finally:
            await rpc.close()
            router.close(linger=0)
            ctx.destroy(linger=0)

    run(body)


# --- concurrency -------------------------------------------------------------------------------


def test_many_concurrent_calls_are_matched_by_request_id() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            rng = random.Random(7)
            h.servicer.jobs.update({f"job-{i}": f"name-{i}" for i in range(0, 500, 2)})

            async def one(i: int) -> str:
                if i % 2 == 0:  # known job, answered at once
                    details = await client.get_job_status(
                        dispatcher_pb2.GetJobStatusRequest(job_id=f"job-{i}")
                    )
                    assert details.name == f"name-{i}"
                    return details.job_id
                if i % 3 == 0:  # an error reply, interleaved with the successes
                    with pytest.raises(NotFoundError, match=f"job missing-{i} not found"):
                        await client.get_job_status(
                            dispatcher_pb2.GetJobStatusRequest(job_id=f"missing-{i}")
                        )
                    return f"missing-{i}"
                # answered after a random delay, so replies come back out of order
                job_id = f"sleep:{rng.uniform(0, 0.2):.3f}:{i}"
                details = await client.get_job_status(
                    dispatcher_pb2.GetJobStatusRequest(job_id=job_id)
                )
                return details.job_id

            results = await asyncio.gather(*(one(i) for i in range(500)))
            for i, result in enumerate(results):
                if i % 2 == 0:
                    assert result == f"job-{i}"
                elif i % 3 == 0:
                    assert result == f"missing-{i}"
                else:
                    assert result.endswith(f":{i}")
            assert h.server.stats.requests["GetJobStatus"] == 500
            assert h.rpc._pending == {}

    run(body)


def test_two_clients_share_one_server() -> None:
    async def body() -> None:
        async with serving() as h:
            other = RpcClient(h.address, caller="other", context=h.ctx)
            try:
                a, b = h.client(), DispatcherClient(other, fencing_token=TOKEN)
                # Both clients number their requests from 1: the server must route by peer.
                replies = await asyncio.gather(
                    *(
                        c.get_job_status(
                            dispatcher_pb2.GetJobStatusRequest(job_id=f"sleep:0.0{i % 5}:{n}{i}")
                        )
                        for i in range(50)
                        for n, c in (("a", a), ("b", b))
                    )
                )
                assert [r.job_id.split(":")[2] for r in replies] == [
                    f"{n}{i}" for i in range(50) for n in ("a", "b")
                ]
            finally:
                await other.close()

    run(body)


# --- reconnects and shutdown -------------------------------------------------------------------


async def _start_on(ctx: zmq.asyncio.Context, address: str, servicer: FakeDispatcher) -> RpcServer:
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


def test_client_survives_a_server_restart_on_the_same_port() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            address = h.address
            assert (await client.get_service_info(common_pb2.GetServiceInfoRequest())).id
            await h.server.stop()

            # While the server is down, a call times out (it is not refused: ZeroMQ queues).
            with pytest.raises(DeadlineExceededError):
                await client.get_service_info(common_pb2.GetServiceInfoRequest(), timeout=0.2)

            restarted_servicer = FakeDispatcher(token="after-restart")
            restarted = await _start_on(h.ctx, address, restarted_servicer)
            try:
                assert restarted.address == address
                info = await client.get_service_info(common_pb2.GetServiceInfoRequest(), timeout=5)
                assert info.leader_session_id == "after-restart"
                client.fencing_token = "after-restart"
                listed = await client.list_jobs(dispatcher_pb2.ListJobsRequest(), timeout=5)
                assert list(listed.jobs) == []
            finally:
                await restarted.stop()

    run(body)


def test_close_fails_in_flight_calls_with_unavailable() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            in_flight = [
                asyncio.create_task(
                    client.get_job_status(
                        dispatcher_pb2.GetJobStatusRequest(job_id=f"sleep:5:{i}"), timeout=10
                    )
                )
                for i in range(3)
            ]
            await asyncio.sleep(0.1)  # sent and being handled
            assert len(h.rpc._pending) == 3
            started = time.monotonic()
            await h.rpc.close()
            results = await asyncio.gather(*in_flight, return_exceptions=True)
            assert time.monotonic() - started < 1.0
            for result in results:
                assert type(result) is UnavailableError
                assert h.address in result.message
            assert h.rpc._pending == {}

            # A closed client refuses new calls the same way, at once.
            with pytest.raises(UnavailableError, match="is closed"):
                await client.get_service_info(common_pb2.GetServiceInfoRequest())
            await h.rpc.close()  # idempotent

    run(body)


def test_server_stop_cancels_running_handlers() -> None:
    async def body() -> None:
        async with serving() as h:
            slow = asyncio.create_task(
                h.client().get_job_status(
                    dispatcher_pb2.GetJobStatusRequest(job_id="sleep:30:x"), timeout=0.3
                )
            )
            await asyncio.sleep(0.05)
            started = time.monotonic()
            await h.server.stop()
            assert time.monotonic() - started < 1.0  # did not wait for the 30 s handler
            with pytest.raises(DeadlineExceededError):
                await slow

    run(body)


def test_rpc_error_codes_round_trip_through_error_headers() -> None:
    """Every typed error class survives encode_error -> decode_response -> error_from_code."""
    from sparkmill.common.core.errors import _BY_CODE, error_from_code

    for code, cls in _BY_CODE.items():
        frames = framing.encode_error(42, cls(f"{code.name} happened", details="d"))
        header, payload = framing.decode_response(frames)
        assert (header.request_id, payload) == (42, b"")
        rebuilt = error_from_code(header.code, header.message, header.details)
        assert type(rebuilt) is cls
        assert (rebuilt.message, rebuilt.details) == (f"{code.name} happened", "d")
        assert isinstance(rebuilt, RpcError)
