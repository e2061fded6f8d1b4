"""The RPC server: a ZeroMQ ROUTER socket served by the owning service's asyncio event loop.

Each request is dispatched to the :class:`Servicer` registered for its service, by method name,
using the :class:`~sparkmill.common.rpc.framing.MethodSpec` table generated from the proto
descriptors. Before the handler runs, the server

1. drops requests whose deadline already passed while they were queued (the caller gave up);
2. checks that the caller's authenticated role (the ZeroMQ User-Id set by the ZAP handler, see
   :mod:`sparkmill.common.rpc.security`) may call the method (its ``callers`` option): others get
   ``PERMISSION_DENIED`` and nothing happens;
3. refuses a request larger than its method's limit and a peer with too many requests in
   progress (``RESOURCE_EXHAUSTED``), so one peer cannot fill the server's memory;
4. for methods declared ``fenced`` checks the request's fencing token against the one the
   servicer expects (its leader session id): a stale leader's message is refused with
   ``FENCING_MISMATCH``, never obeyed.

Between decoding and the fencing check, every id and enum field of the request is checked
(:mod:`sparkmill.common.rpc.request_checks`): a bad one is answered ``INVALID_ARGUMENT`` naming the
field, before any state is touched.

Handlers run as tasks on the event loop, so a slow handler does not stop others; they must not
block (blocking work goes to an executor, see :mod:`sparkmill.common.runtime.actor`). A handler's
:class:`~sparkmill.common.core.errors.RpcError` crosses the wire as its code; any other exception
is a bug in the service and is answered with ``INTERNAL``: a short message with an error id for the
caller, the traceback only in the service log.

Malformed input never stops the server: it is counted, logged (rate-limited) and answered with
``INVALID_ARGUMENT`` when a request id can be recovered, dropped otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn, Protocol

import zmq
import zmq.asyncio
from google.protobuf.message import Message

from sparkmill.common.core.errors import (
    FencingMismatchError,
    InternalError,
    InvalidArgumentError,
    ResourceExhaustedError,
    RpcError,
    UnimplementedError,
)
from sparkmill.common.rpc import framing
from sparkmill.common.rpc.addresses import with_bound_port
from sparkmill.common.rpc.framing import FrameError, MethodSpec
from sparkmill.common.rpc.request_checks import check_request
from sparkmill.common.rpc.security import INSECURE_WARNING, TransportSecurity, ZapHandler, authorize
from sparkmill.common.v1 import envelope_pb2

__all__ = ["CallContext", "MethodSpec", "RpcObserver", "RpcServer", "Servicer"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class CallContext:
    """What a handler may want to know about the call besides the request itself."""

    header: envelope_pb2.RequestHeader
    received_at: float  # loop time
    deadline: float  # loop time
    # The authenticated caller, ``role:name`` of its key ("" when security is off): unlike
    # ``caller`` (free text the caller wrote) it cannot be forged.
    peer: str = ""

    @property
    def caller(self) -> str:
        return self.header.caller

    @property
    def fencing_token(self) -> str:
        return self.header.fencing_token


class RpcObserver(Protocol):
    """Hook for metrics: called once per finished request and per malformed message."""

    def on_request(self, service: str, method: str, code: str, seconds: float) -> None: ...

    def on_malformed(self, reason: str) -> None: ...


class _NullObserver:
    def on_request(self, service: str, method: str, code: str, seconds: float) -> None:
        pass

    def on_malformed(self, reason: str) -> None:
        pass


class Servicer:
    """Base of every generated ``XxxServicer``; services override the RPC methods."""

    SERVICE: ClassVar[str] = ""
    METHODS: ClassVar[dict[str, MethodSpec]] = {}
    # Every service keeps this on; only the RPC layer's own tests turn it off, for a fake whose
    # made-up ids encode what it should do.
    CHECK_REQUESTS: ClassVar[bool] = True

    def expected_fencing_token(self, spec: MethodSpec, request: Any) -> str:
        """The token a fenced request must carry (normally this leader's session id).

        Raise :class:`~sparkmill.common.core.errors.NotLeaderError` when this process does not lead
        now.
        """
        raise InternalError(f"{type(self).__name__} serves fenced methods but defines no token")

    async def _unimplemented(self, method: str) -> NoReturn:
        raise UnimplementedError(f"{self.SERVICE}.{method} is not implemented by this service")


@dataclass
class ServerStats:
    requests: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    malformed: Counter[str] = field(default_factory=Counter)
    expired: int = 0


DEFAULT_MAX_IN_FLIGHT_PER_PEER = 1000
# A request is [identity, MAGIC, header, payload]; anything with more frames is not ours.
_MAX_FRAMES = 4


class RpcServer:
    def __init__(
        self,
        bind_address: str,
        *,
        advertised_address: str = "",
        name: str = "rpc",
        max_message_bytes: int = framing.DEFAULT_MAX_MESSAGE_BYTES,
        max_control_message_bytes: int = framing.DEFAULT_MAX_CONTROL_MESSAGE_BYTES,
        max_in_flight_per_peer: int = DEFAULT_MAX_IN_FLIGHT_PER_PEER,
        observer: RpcObserver | None = None,
        context: zmq.asyncio.Context | None = None,
        security: TransportSecurity | None = None,
        handshake_timeout_s: float = framing.HANDSHAKE_TIMEOUT_S,
    ) -> None:
        self._bind_address = bind_address
        self._handshake_timeout_s = handshake_timeout_s
        # What others are told (``address``); empty: the bound address itself.
        self._advertised_address = advertised_address
        self._name = name
        self._max_bytes = max_message_bytes
        self._max_control_bytes = min(max_control_message_bytes, max_message_bytes)
        self._max_in_flight = max_in_flight_per_peer
        self._in_flight: Counter[bytes] = Counter()
        # Explicit: a server that should be open must say so (tests of raw frames, labs).
        self._security = security if security is not None else TransportSecurity.disabled()
        self._zap_domain = f"sparkmill-{name}-{id(self):x}"
        self._last_denied_log = 0.0
        self._observer: RpcObserver = observer or _NullObserver()
        self._context = context or zmq.asyncio.Context.instance()
        self._servicers: dict[str, Servicer] = {}
        self._socket: zmq.asyncio.Socket | None = None
        self._receiver: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._last_malformed_log = 0.0
        self.address = ""
        self.bound_address = ""
        self.stats = ServerStats()

    def add_servicer(self, servicer: Servicer) -> None:
        if servicer.SERVICE in self._servicers:
            raise ValueError(f"a servicer for {servicer.SERVICE} is already registered")
        self._servicers[servicer.SERVICE] = servicer

    async def start(self) -> str:
        """Bind and start serving; returns the address to advertise (the advertised address
        if one was given, else the bound one; port 0 resolved to the bound port)."""
        sock = self._context.socket(zmq.ROUTER)
        if self._security.enabled:
            ZapHandler.for_context(self._context).add_domain(
                self._zap_domain, self._security.members
            )
            self._security.apply_server(sock, self._zap_domain)
        else:
            log.warning("%s: %s", self._name, INSECURE_WARNING)
        sock.setsockopt(zmq.LINGER, 0)
        # A connection that has not finished the ZMTP (and CURVE) handshake in time is dropped:
        # silent peers must not hold sockets open for libzmq's default of 30 s each.
        sock.setsockopt(zmq.HANDSHAKE_IVL, int(self._handshake_timeout_s * 1000))
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # replies to vanished peers are dropped
        # A hard cap in libzmq as well, so a huge frame cannot exhaust memory before we look.
        sock.setsockopt(zmq.MAXMSGSIZE, self._max_bytes + 1024 * 1024)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        host, _, port = self._bind_address.rpartition(":")
        if "[" in host:  # an IPv6 address or "::" (all interfaces, both families)
            sock.setsockopt(zmq.IPV6, 1)
        try:
            if port in ("0", "*"):
                bound = sock.bind_to_random_port(host)
                self.bound_address = f"{host}:{bound}"
            else:
                sock.bind(self._bind_address)
                self.bound_address = self._bind_address
        except zmq.ZMQError:
            sock.close(linger=0)  # e.g. the port is in use: a retry starts with a new socket
            raise
        self.address = (
            with_bound_port(self._advertised_address, self.bound_address)
            if self._advertised_address
            else self.bound_address
        )
        self._socket = sock
        self._receiver = asyncio.create_task(self._receive_loop(), name=f"{self._name}-rpc-recv")
        log.info(
            "%s serving %s on %s%s",
            self._name,
            sorted(self._servicers),
            self.bound_address,
            f" as {self.address}" if self.address != self.bound_address else "",
        )
        return self.address

    async def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.cancel()
            await asyncio.gather(self._receiver, return_exceptions=True)
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        if self._security.enabled:
            await ZapHandler.for_context(self._context).remove_domain(self._zap_domain)

    async def _receive_loop(self) -> None:
        assert self._socket is not None
        while True:
            try:
                # copy=False: frames stay in libzmq's buffers (no copy of a large payload) and
                # carry the User-Id the ZAP handler gave the peer.
                raw = await self._socket.recv_multipart(copy=False)
            except asyncio.CancelledError:
                raise
            except zmq.ZMQError as exc:  # e.g. the socket was closed under us
                log.warning("%s: receive failed: %s", self._name, exc)
                await asyncio.sleep(0.01)
                continue
            if len(raw) < 2:
                self._malformed("message without a peer identity")
                continue
            if len(raw) > _MAX_FRAMES:
                # Counted before anything is decoded; the frames are released right away.
                self._malformed(f"wrong frame count: expected 3 frames, got {len(raw) - 1}")
                del raw
                continue
            peer = self._peer(raw[1])
            identity, body = raw[0].bytes, [frame.bytes for frame in raw[1:]]
            del raw
            try:
                header, payload = framing.decode_request(body, self._max_bytes)
            except FrameError as exc:
                self._malformed(exc.reason)
                if exc.request_id:
                    await self._send(
                        identity,
                        framing.encode_error(exc.request_id, InvalidArgumentError(exc.reason)),
                    )
                continue
            self._start_handler(identity, peer, header, payload)

    def _peer(self, frame: zmq.Frame) -> str:
        """The authenticated ``role:name`` of the sender ("" when security is off)."""
        if not self._security.enabled:
            return ""
        try:
            return str(frame.get("User-Id"))
        except (zmq.ZMQError, UnicodeDecodeError):
            return ""

    def _start_handler(
        self, identity: bytes, peer: str, header: envelope_pb2.RequestHeader, payload: bytes
    ) -> None:
        # Per peer: its key when authenticated (all its connections together), else its socket.
        key = peer.encode() if peer else identity
        if self._in_flight[key] >= self._max_in_flight:
            self.stats.errors["in-flight limit:RESOURCE_EXHAUSTED"] += 1
            service, method = self._labels(header)
            self._observer.on_request(service, method, "RESOURCE_EXHAUSTED", 0.0)
            if not header.one_way:
                error = ResourceExhaustedError(
                    f"{header.method[:64]} refused: {self._max_in_flight} requests of this "
                    f"caller are in progress at {self._name} (rpc.max-in-flight-per-peer)"
                )
                task = asyncio.create_task(
                    self._send(identity, framing.encode_error(header.request_id, error))
                )
                self._handlers.add(task)
                task.add_done_callback(self._handlers.discard)
            return
        self._in_flight[key] += 1
        received_at = asyncio.get_running_loop().time()
        task = asyncio.create_task(self._handle(identity, peer, header, payload, received_at))
        self._handlers.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._handlers.discard(finished)
            self._in_flight[key] -= 1
            if self._in_flight[key] <= 0:
                del self._in_flight[key]

        task.add_done_callback(done)

    def _malformed(self, reason: str) -> None:
        self.stats.malformed[reason.split(":")[0]] += 1
        self._observer.on_malformed(reason)
        now = time.monotonic()
        if now - self._last_malformed_log > 5.0:  # rate-limited: garbage must not flood the log
            self._last_malformed_log = now
            total = sum(self.stats.malformed.values())
            log.warning(
                "%s: dropped a malformed message (%s); %d so far", self._name, reason, total
            )

    async def _handle(
        self,
        identity: bytes,
        peer: str,
        header: envelope_pb2.RequestHeader,
        payload: bytes,
        started: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        code = "OK"
        reply: list[bytes] | None
        try:
            response = await self._dispatch(header, payload, started, peer)
            reply = None if header.one_way else framing.encode_response(header.request_id, response)
        except _Expired:
            self.stats.expired += 1
            code, reply = "TIMEOUT", None
        except RpcError as exc:
            code = exc.code.name
            reply = framing.encode_error(header.request_id, exc)
        except FrameError as exc:
            self._malformed(exc.reason)
            code = "INVALID_ARGUMENT"
            reply = framing.encode_error(header.request_id, InvalidArgumentError(exc.reason))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in the handler: answer, log loudly, keep serving
            # The traceback stays in this service's log: it shows internals (paths, code, data)
            # a caller has no business seeing. The error id ties the reply to the log line.
            error_id = secrets.token_hex(6)
            log.exception(
                "%s: %s.%s failed unexpectedly (error id %s)",
                self._name,
                header.service,
                header.method,
                error_id,
            )
            code = "INTERNAL"
            error = InternalError(
                f"{header.method[:64]} failed inside {self._name}: {type(exc).__name__} "
                f"(a bug; error id {error_id}, see the service log)"
            )
            reply = framing.encode_error(header.request_id, error)
        # Only declared services and methods get a series of their own: garbage method names
        # must not grow the counters (or the /metrics page) without bound.
        service, method = self._labels(header)
        self.stats.requests[method] += 1
        if code != "OK":
            self.stats.errors[f"{method}:{code}"] += 1
        if code == "PERMISSION_DENIED":
            self._log_denied(header, peer)
        self._observer.on_request(service, method, code, loop.time() - started)
        if reply is not None and not header.one_way:
            await self._send(identity, reply)

    def _labels(self, header: envelope_pb2.RequestHeader) -> tuple[str, str]:
        servicer = self._servicers.get(header.service)
        if servicer is None:
            return _UNKNOWN, _UNKNOWN
        return header.service, header.method if header.method in servicer.METHODS else _UNKNOWN

    def _log_denied(self, header: envelope_pb2.RequestHeader, peer: str) -> None:
        now = time.monotonic()
        if now - self._last_denied_log > 5.0:  # rate-limited like malformed input
            self._last_denied_log = now
            log.warning(
                "%s: refused %s from %s: its role may not call it",
                self._name,
                header.method[:64],
                peer or "an unauthenticated peer",
            )

    async def _dispatch(
        self, header: envelope_pb2.RequestHeader, payload: bytes, received_at: float, peer: str
    ) -> Message:
        servicer = self._servicers.get(header.service)
        if servicer is None:
            raise UnimplementedError(f"{self._name} does not serve {header.service[:100]}")
        spec = servicer.METHODS.get(header.method)
        if spec is None:
            raise UnimplementedError(f"{header.service} has no method {header.method[:100]!r}")
        authorize(spec, peer, self._security)
        limit = self._max_bytes if spec.large_request else self._max_control_bytes
        if len(payload) > limit:
            raise InvalidArgumentError(
                f"message too large: {spec.name} request of {len(payload)} bytes exceeds its "
                f"limit of {limit} bytes"
            )
        timeout = header.timeout_ms / 1000 if header.timeout_ms else spec.default_timeout_s
        context = CallContext(header, received_at, received_at + timeout, peer)
        if asyncio.get_running_loop().time() > context.deadline:
            raise _Expired  # the caller has given up already; doing the work would be wasted
        request = framing.decode_payload(payload, spec.request_type, header.request_id)
        if servicer.CHECK_REQUESTS:
            check_request(spec.name, request)  # ids and enums, before anything looks at them
        if spec.fenced:
            expected = servicer.expected_fencing_token(spec, request)
            if not expected or header.fencing_token != expected:
                # Never echo the expected token: it is what a forger would need.
                raise FencingMismatchError(
                    f"{header.method} refused: fencing token {header.fencing_token[:8] or '(none)'}"
                    f" is not the current leader session"
                    f" (caller: {header.caller[:64] or 'unknown'})"
                )
        handler: Callable[[Any, CallContext], Awaitable[Message]] = getattr(
            servicer, spec.handler_name
        )
        response: Message = await handler(request, context)
        expected_type: type[Message] = spec.response_type
        if not isinstance(response, expected_type):
            raise InternalError(
                f"{header.method} returned {type(response).__name__}, "
                f"expected {spec.response_type.DESCRIPTOR.full_name}"
            )
        return response

    async def _send(self, identity: bytes, frames: list[bytes]) -> None:
        if self._socket is None:
            return
        try:
            await self._socket.send_multipart([identity, *frames])
        except zmq.ZMQError as exc:
            log.debug("%s: reply to a vanished peer dropped: %s", self._name, exc)


class _Expired(Exception):
    pass


_UNKNOWN = "unknown"
