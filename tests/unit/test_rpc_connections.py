"""The RPC layer end to end, connections: concurrent calls and clients, a server restarting on the
same port, closing and stopping with calls in flight, and error codes in error headers."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from sparkmill.common.core.errors import (
    DeadlineExceededError,
    NotFoundError,
    RpcError,
    UnavailableError,
)
from sparkmill.common.rpc import framing
from sparkmill.common.rpc.client import RpcClient
from sparkmill.common.v1 import common_pb2, dispatcher_pb2
from sparkmill.common.v1.gateways import (
    DispatcherClient,
)
from tests.unit.rpc_fakes import (
    TOKEN,
    FakeDispatcher,
    run,
    serving,
    start_server_on,
)

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
            restarted = await start_server_on(h.ctx, address, restarted_servicer)
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
