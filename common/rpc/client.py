"""The RPC client: one ZeroMQ DEALER socket per target address, shared by every caller.

With CurveZMQ on (see :mod:`sparkmill.common.rpc.security`) the socket presents this process's
member key and accepts only a server holding the cluster's server key. A call sends
``[MAGIC, header, payload]`` and waits for the reply with the same request id, up to its
timeout; a reply that arrives later is dropped. Errors come back as the typed exceptions of
:mod:`sparkmill.common.core.errors`; a call that gets no answer in time raises
:class:`~sparkmill.common.core.errors.DeadlineExceededError`, whose message names the method and
the target.

ZeroMQ reconnects by itself, so a client outlives restarts of its target; whether a target is
*gone* is decided above this layer (heartbeats, consecutive failures), not here. What this layer
does offer is a hint: :meth:`RpcClient.watch_connection` reports when the TCP connection to the
target closes and when it is made again (a ZeroMQ socket monitor). A killed process's connections
close at once, so a heartbeat sender can probe right away instead of waiting out its interval.

One thing ZeroMQ does not reconnect after is a **refused handshake**: the server's ZAP handler
did not admit this process's key, or the two sides speak different security mechanisms (CURVE
against none). libzmq then ends the connection for good and a request would wait out its whole
deadline. The same socket monitor sees the refusal: every request waiting on it fails at once
with :class:`~sparkmill.common.core.errors.PermissionDeniedError` naming the cause, and the socket
is replaced, so that the next request tries again (the key may be admitted by then).

A mechanism mismatch is not always reported as one. The server checks the client's greeting and
closes the connection; when the client's whole greeting reaches it in one read (a busy server),
it closes before its own greeting went out, the client's socket is reset with the server's
greeting unread, and the client sees only a handshake that failed *without detail*, then
reconnects. Under load that repeats for seconds. So a server that closes the connection during
the handshake :data:`HANDSHAKE_CLOSES_BEFORE_REFUSAL` times in a row, each time well before the
handshake timeout (a slow server times out instead), counts as a refusal too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio
from google.protobuf.message import DecodeError, Message
from zmq.utils.monitor import parse_monitor_message

from sparkmill.common.core.errors import (
    DeadlineExceededError,
    ErrorCode,
    InternalError,
    PermissionDeniedError,
    UnavailableError,
    error_from_code,
)
from sparkmill.common.rpc import framing
from sparkmill.common.rpc.framing import FrameError, MethodSpec
from sparkmill.common.rpc.security import TransportSecurity
from sparkmill.common.v1 import envelope_pb2

log = logging.getLogger(__name__)

ConnectionListener = Callable[[bool], None]
"""Called with ``False`` when the connection to the target closed, ``True`` when it is up."""

_MONITORED = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
)

HANDSHAKE_CLOSES_BEFORE_REFUSAL = 3
"""Handshakes in a row that the server ended by closing the connection (no success in between)
after which waiting requests fail as refused. A server that crashes mid-handshake does it once;
libzmq reconnects every 100 ms, so three take a few tenths of a second."""


class RpcClient:
    def __init__(
        self,
        address: str,
        *,
        caller: str = "",
        max_message_bytes: int = framing.DEFAULT_MAX_MESSAGE_BYTES,
        context: zmq.asyncio.Context | None = None,
        security: TransportSecurity | None = None,
    ) -> None:
        self.address = address
        self.caller = caller
        self._max_bytes = max_message_bytes
        self._security = security if security is not None else TransportSecurity.disabled()
        self._context = context or zmq.asyncio.Context.instance()
        self._socket: zmq.asyncio.Socket | None = None
        self._receiver: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[tuple[envelope_pb2.ResponseHeader, bytes]]] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self._connection_listeners: list[ConnectionListener] = []
        self._monitor: asyncio.Task[None] | None = None

    def _ensure_connected(self) -> zmq.asyncio.Socket:
        if self._closed:
            raise UnavailableError(f"RPC client for {self.address} is closed")
        if self._socket is None:
            sock = self._context.socket(zmq.DEALER)
            self._security.apply_client(sock)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.HANDSHAKE_IVL, int(framing.HANDSHAKE_TIMEOUT_S * 1000))
            # A reply is bounded like a request: a hostile or broken server cannot make this
            # process buffer an arbitrarily large frame.
            sock.setsockopt(zmq.MAXMSGSIZE, self._max_bytes + 1024 * 1024)
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
            sock.setsockopt(zmq.SNDHWM, 100_000)
            sock.setsockopt(zmq.RCVHWM, 100_000)
            # The monitor before the connection: a refused handshake takes a millisecond.
            monitor: zmq.asyncio.Socket | None = None
            try:
                monitor = sock.get_monitor_socket(_MONITORED)
            except zmq.ZMQError as exc:
                # Only hints and faster refusals: without it the deadlines still decide.
                log.info("no connection monitor for %s: %s", self.address, exc)
            try:
                sock.connect(self.address)
            except zmq.ZMQError as exc:
                # An address that passed the format checks but libzmq cannot use (a port out
                # of range, a name it cannot parse): a typed error for the caller, not a crash.
                if monitor is not None:
                    sock.disable_monitor()
                    monitor.close(linger=0)
                sock.close(linger=0)
                raise UnavailableError(f"cannot connect to {self.address}: {exc}") from None
            self._socket = sock
            self._receiver = asyncio.create_task(self._receive_loop(sock))
            if monitor is not None:
                self._monitor = asyncio.create_task(self._monitor_loop(sock, monitor))
        return self._socket

    async def call(
        self,
        service: str,
        spec: MethodSpec,
        request: Message,
        *,
        timeout: float,
        fencing_token: str = "",
    ) -> Message:
        sock = self._ensure_connected()
        request_id = next(self._ids)
        header = envelope_pb2.RequestHeader(
            request_id=request_id,
            service=service,
            method=spec.name,
            timeout_ms=max(1, int(timeout * 1000)),
            fencing_token=fencing_token,
            caller=self.caller,
        )
        future: asyncio.Future[tuple[envelope_pb2.ResponseHeader, bytes]] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending[request_id] = future
        frames = framing.encode_request(header, request)

        async def exchange() -> tuple[envelope_pb2.ResponseHeader, bytes]:
            # The send is bounded too: a DEALER with no connection yet (or whose only peer
            # refused the handshake) has no pipe, and its send waits. A refusal seen by the
            # monitor fails ``future``: that ends the wait at once.
            # A future already (pyzmq's asyncio sockets): ensure_future only types it.
            sent = asyncio.ensure_future(sock.send_multipart(frames))
            if not sent.done():
                try:
                    await asyncio.wait((sent, future), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not sent.done():
                        sent.cancel()
                if future.done():
                    return future.result()
            await sent
            return await future

        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns a result that arrives
            # together with a cancellation and swallows the cancellation, so a cancelled task
            # (e.g. a heartbeat sender being stopped) would go on running.
            async with asyncio.timeout(timeout):
                reply_header, payload = await exchange()
        except TimeoutError:
            raise DeadlineExceededError(
                f"{spec.name} to {self.address} got no reply within {timeout:g}s"
            ) from None
        finally:
            self._pending.pop(request_id, None)
        if int(reply_header.code) != ErrorCode.OK:
            raise error_from_code(reply_header.code, reply_header.message, reply_header.details)
        response: Message = spec.response_type()
        try:
            response.ParseFromString(payload)
        except DecodeError as exc:  # a broken or mismatched peer: still a typed error here
            raise InternalError(
                f"{spec.name} to {self.address} got an undecodable "
                f"{spec.response_type.DESCRIPTOR.full_name} reply: {exc}"
            ) from None
        return response

    async def _receive_loop(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            try:
                frames = await sock.recv_multipart()
            except asyncio.CancelledError:
                raise
            except zmq.ZMQError:
                return
            try:
                header, payload = framing.decode_response(list(frames), self._max_bytes)
            except FrameError as exc:
                log.warning("dropped a malformed reply from %s: %s", self.address, exc.reason)
                continue
            future = self._pending.get(header.request_id)
            if future is not None and not future.done():
                future.set_result((header, payload))

    def watch_connection(self, listener: ConnectionListener) -> Callable[[], None]:
        """Call ``listener(False)`` whenever the TCP connection to the target closes and
        ``listener(True)`` when one is made; returns a function that stops the calls."""
        try:
            self._ensure_connected()
        except UnavailableError as exc:
            # Only a hint: without it the heartbeats still find a lost target.
            log.info("no connection watch for %s: %s", self.address, exc)
            return lambda: None
        self._connection_listeners.append(listener)

        def stop() -> None:
            if listener in self._connection_listeners:
                self._connection_listeners.remove(listener)

        return stop

    async def _monitor_loop(self, sock: zmq.asyncio.Socket, monitor: zmq.asyncio.Socket) -> None:
        loop = asyncio.get_running_loop()
        connected_at = loop.time()
        closed_in_handshake = 0
        try:
            while True:
                try:
                    frames = await monitor.recv_multipart()
                    message = parse_monitor_message(frames)
                    event, value = message["event"], message["value"]
                except zmq.ZMQError:
                    return
                except (ValueError, KeyError, IndexError):
                    continue  # not a monitor event this libzmq version speaks
                if event in (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL):
                    self._refused(sock, _refusal(self.address, event, int(value)))
                    return
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    closed_in_handshake = 0
                    continue
                if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                    # Half the handshake timeout: what ends later is a slow server, not a refusal.
                    if loop.time() - connected_at < framing.HANDSHAKE_TIMEOUT_S / 2:
                        closed_in_handshake += 1
                    if closed_in_handshake >= HANDSHAKE_CLOSES_BEFORE_REFUSAL:
                        self._refused(sock, _closed_in_handshake(self.address, closed_in_handshake))
                        return
                    continue
                if event not in (zmq.EVENT_CONNECTED, zmq.EVENT_DISCONNECTED):
                    continue
                up = event == zmq.EVENT_CONNECTED
                if up:
                    connected_at = loop.time()
                for listener in list(self._connection_listeners):
                    try:
                        listener(up)
                    except Exception:
                        log.exception("connection listener for %s failed", self.address)
        finally:
            # However this loop ends, the monitoring stops before its reader goes (see close).
            with contextlib.suppress(zmq.ZMQError):
                sock.disable_monitor()
            monitor.close(linger=0)

    def _refused(self, sock: zmq.asyncio.Socket, reason: str) -> None:
        """The handshake was refused and libzmq will not connect ``sock`` again: fail what waits
        on it and drop it (the next call makes a new one)."""
        log.warning("%s", reason)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(PermissionDeniedError(reason))
        if self._socket is not sock:
            return
        self._socket = None
        self._monitor = None  # this task, ending
        if self._receiver is not None:
            self._receiver.cancel()
            self._receiver = None
        with contextlib.suppress(zmq.ZMQError):
            sock.disable_monitor()
        sock.close(linger=0)

    async def close(self) -> None:
        self._closed = True
        self._connection_listeners.clear()
        if self._monitor is not None:
            # Stop the monitoring while its reader is still open. libzmq's I/O thread sends
            # every event to the monitor's PAIR socket with a blocking send, holding the lock
            # that stopping the monitor takes: an event after the reader closed (the peer
            # disconnecting, as when a whole cluster stops) blocked that thread for ever, and
            # ``disable_monitor`` with it (holding the GIL: the whole process hung until
            # SIGKILL).
            if self._socket is not None:
                with contextlib.suppress(zmq.ZMQError):
                    self._socket.disable_monitor()
            self._monitor.cancel()
            await asyncio.gather(self._monitor, return_exceptions=True)
        if self._receiver is not None:
            self._receiver.cancel()
            await asyncio.gather(self._receiver, return_exceptions=True)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(UnavailableError(f"RPC client for {self.address} closed"))
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None


class RpcClientPool:
    """One :class:`RpcClient` per address for a whole service process."""

    def __init__(self, caller: str, **kwargs: Any) -> None:
        self._caller = caller
        self._kwargs = kwargs
        self._clients: dict[str, RpcClient] = {}

    def get(self, address: str) -> RpcClient:
        client = self._clients.get(address)
        if client is None:
            client = RpcClient(address, caller=self._caller, **self._kwargs)
            self._clients[address] = client
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def _refusal(address: str, event: int, value: int) -> str:
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (
            f"{address} refused this process's key (ZAP status {value}): it is not admitted "
            "there. Check that the public half of this process's key file is in the public "
            "keys directory of that service's host (sparkmill keys list)"
        )
    return (
        f"the handshake with {address} failed: the two sides speak different security "
        "mechanisms (security.curve.enabled must be the same on every member and client)"
    )


def _closed_in_handshake(address: str, times: int) -> str:
    return (
        f"{address} closed the connection during the security handshake {times} times in a row: "
        "the two sides speak different security mechanisms (security.curve.enabled must be the "
        "same on every member and client), this process trusts another server key than the "
        "one that server holds, or that server cannot check keys (no ZAP handler runs there)"
    )
