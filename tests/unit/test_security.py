"""Transport security of the RPC layer: keys, the ZAP decision, authorization by role, and a
real CURVE server in this process (real ZeroMQ sockets; the servicer is the hand-written
``FakeDispatcher`` of test_rpc)."""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
import zmq
import zmq.asyncio
import zmq.utils.z85

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import (
    ConfigurationError,
    DeadlineExceededError,
    InvalidArgumentError,
    PermissionDeniedError,
    ResourceExhaustedError,
)
from sparkmill.common.rpc import framing
from sparkmill.common.rpc.client import RpcClient
from sparkmill.common.rpc.keys import (
    Member,
    generate_cluster_keys,
    generate_key,
    load_members,
    parse_stem,
    read_digest,
)
from sparkmill.common.rpc.security import (
    ZAP_VERSION,
    TransportSecurity,
    authorize,
    security_from_config,
    zap_reply,
)
from sparkmill.common.rpc.server import RpcServer
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, envelope_pb2
from sparkmill.common.v1.gateways import DISPATCHERGATEWAY_METHODS, DispatcherClient
from tests.unit.rpc_fakes import TOKEN, FakeDispatcher, job_graph, run

# -- keys ---------------------------------------------------------------------------------------


def test_key_file_names_give_the_role() -> None:
    assert parse_stem("task-executor-host7") == ("task-executor", "host7")
    assert parse_stem("job-master") == ("job-master", "")
    assert parse_stem("client-alice") == ("client", "alice")
    assert parse_stem("server") is None
    assert parse_stem("taskexecutor") is None
    assert parse_stem("task-executor-") is None


def test_generated_keys_are_private_and_loaded_by_role(tmp_path: Path) -> None:
    created = generate_cluster_keys(tmp_path)
    # server + 5 roles, each public + secret; the REST tokens; 4 ZK digests + their identities
    assert len(created) == 2 * 6 + 1 + 4 + 1
    assert generate_cluster_keys(tmp_path) == []  # never overwritten
    assert generate_key(tmp_path, "task-executor", "host7") is not None
    for secret in (tmp_path / "private").iterdir():
        assert secret.stat().st_mode & 0o777 == 0o600
    members = load_members(tmp_path / "public", "k")
    roles = sorted((m.role, m.name) for m in members.values())
    assert roles == [
        ("client", ""),
        ("dispatcher", ""),
        ("job-master", ""),
        ("resource-manager", ""),
        ("task-executor", ""),
        ("task-executor", "host7"),
    ]  # the server key is not a member
    user, password = read_digest(tmp_path / "private" / "zookeeper-job-master.digest", "k")
    assert user == "sparkmill-job-master" and len(password) >= 24


def test_a_public_key_file_without_a_role_is_refused(tmp_path: Path) -> None:
    generate_cluster_keys(tmp_path)
    (tmp_path / "public" / "client.key").rename(tmp_path / "public" / "alice.key")
    with pytest.raises(ConfigurationError, match=r"alice\.key names no role"):
        load_members(tmp_path / "public", "security.curve.public-keys-dir")


def cluster_config(tmp_path: Path, **extra: Any) -> Configuration:
    generate_cluster_keys(tmp_path)
    values = {
        "security.curve.public-keys-dir": str(tmp_path / "public"),
        "security.curve.secret-key-file": str(tmp_path / "private" / "{role}.key_secret"),
        "security.curve.server-secret-key-file": str(tmp_path / "private" / "server.key_secret"),
        **extra,
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(values))
    return Configuration.load(path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_secret_files_readable_by_others_are_refused(tmp_path: Path, mode: int) -> None:
    config = cluster_config(tmp_path)
    secret = tmp_path / "private" / "task-executor.key_secret"
    secret.chmod(mode)
    with pytest.raises(ConfigurationError) as caught:
        security_from_config(config, "task-executor", serves=True)
    message = str(caught.value)
    assert "security.curve.secret-key-file" in message
    assert str(secret) in message and f"chmod 600 {secret}" in message


def test_loose_server_key_and_zookeeper_digest_are_refused(tmp_path: Path) -> None:
    config = cluster_config(tmp_path)
    (tmp_path / "private" / "server.key_secret").chmod(0o644)
    with pytest.raises(ConfigurationError, match=r"server-secret-key-file.*chmod 600"):
        security_from_config(config, "dispatcher", serves=True)
    # A client needs no server secret: it still starts.
    assert security_from_config(config, "client", serves=False).enabled
    digest = tmp_path / "private" / "zookeeper-dispatcher.digest"
    digest.chmod(0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        read_digest(digest, "security.zookeeper.digest-file")


def test_security_on_without_keys_names_the_missing_setting(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("rpc.bind-host: 127.0.0.1\n")
    with pytest.raises(ConfigurationError, match=r"security\.curve\.public-keys-dir"):
        security_from_config(Configuration.load(path), "dispatcher", serves=True)
    path.write_text("security.curve.enabled: false\n")
    assert not security_from_config(Configuration.load(path), "dispatcher", serves=True).enabled


# -- authorization and ZAP (pure decisions) -----------------------------------------------------

ON = TransportSecurity(enabled=True)


def test_authorize_follows_the_callers_option() -> None:
    submit = DISPATCHERGATEWAY_METHODS["SubmitJob"]
    report = DISPATCHERGATEWAY_METHODS["ReportJobStatus"]
    info = DISPATCHERGATEWAY_METHODS["GetServiceInfo"]
    authorize(submit, "client:alice", ON)
    authorize(report, "job-master:", ON)
    authorize(info, "task-executor:host7", ON)  # "*": any admitted member
    with pytest.raises(PermissionDeniedError, match="role 'task-executor' may not call it"):
        authorize(submit, "task-executor:host7", ON)
    with pytest.raises(PermissionDeniedError, match="allowed: job-master"):
        authorize(report, "client:alice", ON)
    with pytest.raises(PermissionDeniedError, match="not authenticated"):
        authorize(info, "", ON)
    authorize(submit, "", TransportSecurity.disabled())  # a lab without security


def test_every_method_declares_its_callers() -> None:
    from sparkmill.common.v1 import gateways

    tables = [v for k, v in vars(gateways).items() if k.endswith("_METHODS")]
    assert len(tables) == 4
    for table in tables:
        for spec in table.values():
            assert spec.callers, spec.name
    assert DISPATCHERGATEWAY_METHODS["SubmitJob"].large_request
    assert not DISPATCHERGATEWAY_METHODS["ListJobs"].large_request


def zap_request(domain: bytes, mechanism: bytes, *credentials: bytes) -> list[bytes]:
    return [ZAP_VERSION, b"7", domain, b"127.0.0.1", b"", mechanism, *credentials]


def test_zap_admits_only_known_curve_keys_and_names_their_role() -> None:
    public, _ = zmq.curve_keypair()
    member = Member("task-executor", "host7", public)
    domains = {"d": {public: member}}
    raw_key = zmq.utils.z85.decode(public)
    reply = zap_reply(zap_request(b"d", b"CURVE", raw_key), domains)
    assert reply == [ZAP_VERSION, b"7", b"200", b"OK", b"task-executor:host7", b""]
    stranger = zmq.utils.z85.decode(zmq.curve_keypair()[0])
    assert zap_reply(zap_request(b"d", b"CURVE", stranger), domains)[2:4] == [
        b"400",
        b"unknown public key",
    ]
    assert zap_reply(zap_request(b"d", b"NULL"), domains)[2] == b"400"
    assert zap_reply(zap_request(b"d", b"PLAIN", b"u", b"p"), domains)[2] == b"400"
    assert zap_reply(zap_request(b"other", b"CURVE", raw_key), domains)[2] == b"400"
    assert zap_reply([b"0.9", b"7"], domains)[2] == b"500"
    assert zap_reply([], domains)[2] == b"500"


# -- a real CURVE server ------------------------------------------------------------------------


@asynccontextmanager
async def curve_server(tmp_path: Path, **kwargs: Any) -> AsyncIterator[tuple[Any, Any]]:
    config = cluster_config(tmp_path)
    ctx = zmq.asyncio.Context()
    server = RpcServer(
        "tcp://127.0.0.1:0",
        name="secure-dispatcher",
        context=ctx,
        security=security_from_config(config, "dispatcher", serves=True),
        **kwargs,
    )
    servicer = FakeDispatcher()
    server.add_servicer(servicer)
    await server.start()
    clients: list[RpcClient] = []

    def client(role: str, security: TransportSecurity | None = None) -> DispatcherClient:
        rpc = RpcClient(
            server.address,
            context=ctx,
            security=security or security_from_config(config, role, serves=False),
        )
        clients.append(rpc)
        return DispatcherClient(rpc, fencing_token=TOKEN)

    try:
        yield server, (servicer, client)
    finally:
        for rpc in clients:
            await rpc.close()
        await server.stop()
        ctx.destroy(linger=0)


def test_only_admitted_keys_get_in_and_only_their_roles_methods_run(tmp_path: Path) -> None:
    submit = dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("job-1", "x"))

    async def body() -> None:
        async with curve_server(tmp_path) as (server, (servicer, client)):
            alice = client("client")
            assert (await alice.submit_job(submit)).job_id == "job-1"
            assert [c.peer for c in servicer.contexts] == ["client:"]

            # A task executor's key is admitted, but may not submit (nor forge job statuses).
            executor = client("task-executor")
            with pytest.raises(PermissionDeniedError, match="SubmitJob refused"):
                await executor.submit_job(
                    dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("job-2", "y"))
                )
            with pytest.raises(PermissionDeniedError, match="ReportJobStatus refused"):
                await executor.report_job_status(dispatcher_pb2.JobStatusReport(job_id="job-1"))
            assert servicer.jobs == {"job-1": "x"}
            assert server.stats.errors["SubmitJob:PERMISSION_DENIED"] == 1

            # A key the cluster does not know never gets a connection, and the client hears the
            # refusal at once instead of waiting out its deadline (libzmq never retries it).
            stranger_public, stranger_secret = zmq.curve_keypair()
            own = security_from_config(cluster_config(tmp_path), "client", serves=False)
            from sparkmill.common.rpc.security import CurveKeyPair

            stranger = client(
                "client",
                TransportSecurity(
                    True, CurveKeyPair(stranger_public, stranger_secret), own.server_public
                ),
            )
            for _ in range(2):  # each call tries again (the key may be admitted meanwhile)
                started = time.monotonic()
                with pytest.raises(PermissionDeniedError, match=r"key .* is not admitted"):
                    await stranger.list_jobs(dispatcher_pb2.ListJobsRequest(), timeout=5)
                assert time.monotonic() - started < 2.5
            # ...nor does a client that speaks no CURVE at all.
            plain = client("client", TransportSecurity.disabled())
            with pytest.raises(PermissionDeniedError, match="different security mechanisms"):
                await plain.get_service_info(common_pb2.GetServiceInfoRequest(), timeout=5)
            assert servicer.jobs == {"job-1": "x"}
            assert (await alice.list_jobs(dispatcher_pb2.ListJobsRequest())).jobs

    run(body)


def test_a_refused_key_is_tried_again_once_the_server_admits_it(tmp_path: Path) -> None:
    """libzmq never reconnects after a refused handshake: without a new socket, a member whose
    key reached the servers after its first attempt would stay locked out until restarted."""
    config = cluster_config(tmp_path)
    made = generate_key(tmp_path / "late", "client", "late")
    assert made is not None
    late_path = tmp_path / "late.yaml"
    values = yaml.safe_load((tmp_path / "cluster.yaml").read_text())
    late_path.write_text(yaml.safe_dump({**values, "security.curve.secret-key-file": str(made[1])}))
    late = security_from_config(Configuration.load(late_path), "client", serves=False)

    async def body() -> None:
        ctx = zmq.asyncio.Context()

        async def server(address: str) -> RpcServer:
            rpc_server = RpcServer(
                address,
                name="secure-dispatcher",
                context=ctx,
                security=security_from_config(config, "dispatcher", serves=True),
            )
            rpc_server.add_servicer(FakeDispatcher())
            for _ in range(100):
                try:
                    await rpc_server.start()
                    return rpc_server
                except zmq.ZMQError as exc:
                    # The stopped server's listener closes in libzmq's I/O thread, a moment
                    # after stop() returns: a restart on its port waits for that.
                    if exc.errno != errno.EADDRINUSE:
                        raise
                    await asyncio.sleep(0.05)
            raise AssertionError(f"{address} stayed in use for 5 s after its server stopped")

        first = await server("tcp://127.0.0.1:0")
        rpc = RpcClient(first.address, context=ctx, security=late)
        dispatcher = DispatcherClient(rpc, fencing_token=TOKEN)
        try:
            with pytest.raises(PermissionDeniedError, match="not admitted"):
                await dispatcher.list_jobs(dispatcher_pb2.ListJobsRequest(), timeout=5)
            await first.stop()
            # The operator admits the key and restarts the service, on the same address.
            (tmp_path / "public" / made[0].name).write_bytes(made[0].read_bytes())
            second = await server(first.address)
            try:
                reply = await dispatcher.list_jobs(dispatcher_pb2.ListJobsRequest(), timeout=5)
                assert list(reply.jobs) == []
            finally:
                await second.stop()
        finally:
            await rpc.close()
            ctx.destroy(linger=0)

    run(body)


def test_in_flight_requests_per_peer_are_bounded(tmp_path: Path) -> None:
    async def body() -> None:
        async with curve_server(tmp_path, max_in_flight_per_peer=2) as (_, (_, client)):
            alice = client("client")
            slow = [
                asyncio.create_task(
                    alice.get_job_status(dispatcher_pb2.GetJobStatusRequest(job_id="sleep:0.5:x"))
                )
                for _ in range(2)
            ]
            await asyncio.sleep(0.1)
            with pytest.raises(ResourceExhaustedError, match=r"rpc\.max-in-flight-per-peer"):
                await alice.get_job_status(dispatcher_pb2.GetJobStatusRequest(job_id="sleep:0:y"))
            # Another member is not held up by alice's load.
            other = client("job-master")
            await other.get_service_info(common_pb2.GetServiceInfoRequest())
            await asyncio.gather(*slow)
            await alice.get_job_status(dispatcher_pb2.GetJobStatusRequest(job_id="sleep:0:z"))

    run(body)


def test_only_large_methods_accept_large_requests(tmp_path: Path) -> None:
    big_name = "n" * 300_000

    async def body() -> None:
        async with curve_server(tmp_path, max_control_message_bytes=100_000) as (_, (s, client)):
            alice = client("client")
            with pytest.raises(InvalidArgumentError, match="exceeds its limit of 100000 bytes"):
                await alice.get_job_status(dispatcher_pb2.GetJobStatusRequest(job_id=big_name))
            submitted = await alice.submit_job(
                dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("big", big_name))
            )
            assert submitted.job_id == "big" and s.jobs["big"] == big_name

    run(body)


def test_unknown_method_names_share_one_metrics_label_and_extra_frames_are_dropped(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, str, str]] = []

    class Observer:
        def on_request(self, service: str, method: str, code: str, seconds: float) -> None:
            seen.append((service, method, code))

        def on_malformed(self, reason: str) -> None:
            seen.append(("", "", reason.split(":")[0]))

    async def body() -> None:
        async with curve_server(tmp_path, observer=Observer()) as (server, (_, client)):
            alice = client("client")
            await alice.get_service_info(common_pb2.GetServiceInfoRequest())
            rpc = alice.rpc
            for i in range(50):
                header = envelope_pb2.RequestHeader(
                    request_id=1000 + i,
                    service=f"sparkmill.v1.Nope{i}" if i % 2 else DispatcherClient.SERVICE,
                    method=f"Method{i}",
                    timeout_ms=1000,
                )
                sock = rpc._ensure_connected()
                await sock.send_multipart(framing.encode_request(header, common_pb2.Empty()))
                await sock.send_multipart([framing.MAGIC] + [b"x"] * 16)  # 17 frames
            await asyncio.sleep(0.5)
            assert {(s, m) for s, m, _ in seen if m} == {
                (DispatcherClient.SERVICE, "GetServiceInfo"),
                (DispatcherClient.SERVICE, "unknown"),
                ("unknown", "unknown"),
            }
            assert set(server.stats.requests) == {"GetServiceInfo", "unknown"}
            assert server.stats.malformed["wrong frame count"] == 50
            await alice.get_service_info(common_pb2.GetServiceInfoRequest())  # still serving

    run(body)


def test_without_a_zap_handler_nobody_gets_in(tmp_path: Path) -> None:
    # Fail closed: libzmq would admit any CURVE client if nobody answered on the ZAP endpoint.
    from sparkmill.common.rpc.security import ZapHandler

    async def body() -> None:
        async with curve_server(tmp_path) as (server, (_, client)):
            handler = ZapHandler.for_context(server._context)
            assert handler._task is not None and handler._socket is not None
            handler._task.cancel()
            await asyncio.gather(handler._task, return_exceptions=True)
            handler._socket.close(linger=0)
            handler._socket, handler._task = None, None
            # Nobody gets in. Once libzmq has unbound the handler's endpoint the server closes
            # every connection during the handshake, and the client is told so; until then
            # (the unbinding is asynchronous) the request waits out its deadline.
            with pytest.raises((PermissionDeniedError, DeadlineExceededError)) as refused:
                await client("client").list_jobs(dispatcher_pb2.ListJobsRequest(), timeout=2)
            if isinstance(refused.value, PermissionDeniedError):
                assert "no ZAP handler runs there" in str(refused.value)

    run(body)


def test_a_peer_that_never_finishes_the_handshake_is_dropped(tmp_path: Path) -> None:
    async def body() -> tuple[bytes, float]:
        async with curve_server(tmp_path, handshake_timeout_s=0.5) as (server, _):
            host, port = server.address.removeprefix("tcp://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            started = asyncio.get_running_loop().time()
            try:
                async with asyncio.timeout(10):
                    # libzmq greets first; a silent peer then sends nothing at all.
                    received = await reader.read(1 << 16)
                    while received and not reader.at_eof():
                        more = await reader.read(1 << 16)
                        if not more:
                            break
                        received += more
            finally:
                writer.close()
            return received, asyncio.get_running_loop().time() - started

    _, waited = asyncio.run(body())
    assert waited < 5.0  # dropped after the handshake timeout, not libzmq's default 30 s


def test_a_server_that_resets_every_handshake_is_reported_as_a_refusal(tmp_path: Path) -> None:
    """A CURVE server reading a plain client's whole greeting in one read closes before its own
    greeting went out: the client sees only resets, never the mechanism mismatch. A listener
    that resets every connection after the greeting stands in for it, deterministically."""
    import socket
    import struct

    async def body() -> tuple[str, float, int]:
        accepted = 0

        async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            await reader.read(64)
            sock = writer.get_extra_info("socket")
            # SO_LINGER 0: close with a reset, as libzmq's engine does with unread input.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.close()

        listener = await asyncio.start_server(reset, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        rpc = RpcClient(f"tcp://127.0.0.1:{port}", security=TransportSecurity.disabled())
        started = asyncio.get_running_loop().time()
        try:
            with pytest.raises(PermissionDeniedError) as refused:
                await DispatcherClient(rpc).list_jobs(dispatcher_pb2.ListJobsRequest(), timeout=8)
            return str(refused.value), asyncio.get_running_loop().time() - started, accepted
        finally:
            await rpc.close()
            listener.close()

    message, waited, accepted = asyncio.run(body())
    assert "closed the connection during the security handshake 3 times" in message
    assert "different security mechanisms" in message
    assert accepted >= 3
    assert waited < 4.0  # three reconnects 100 ms apart, not the 8-s deadline
