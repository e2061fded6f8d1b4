"""The RPC layer end to end, what goes wrong on the wire: deadlines (late replies, requests queued
past their deadline) and malformed or oversized messages in either direction."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
import zmq
import zmq.asyncio

from sparkmill.common.core.errors import (
    DeadlineExceededError,
    ErrorCode,
    InternalError,
    InvalidArgumentError,
)
from sparkmill.common.rpc import framing
from sparkmill.common.rpc.client import RpcClient
from sparkmill.common.rpc.server import CallContext
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, envelope_pb2
from sparkmill.common.v1.gateways import (
    DispatcherClient,
)
from tests.unit.rpc_fakes import (
    SERVICE,
    TOKEN,
    job_graph,
    raw_reply,
    request_frames,
    run,
    serving,
)

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
