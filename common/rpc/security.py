"""Transport security of the RPC layer: CurveZMQ, the ZAP handler and authorization by role.

Every server socket is a CURVE server with the cluster's *server key*; every client socket
presents its process's *member key* and checks the server's public key. libzmq asks a ZAP
handler (RFC 27, ``inproc://zeromq.zap.01`` in the socket's context) whether to admit a client:
:class:`ZapHandler` admits exactly the public keys in the server's key directory and answers
with the User-Id ``role:name`` of the key (see :mod:`sparkmill.common.rpc.keys`). libzmq attaches
that User-Id to every message the peer sends, so the server knows the caller's role without
trusting anything the caller wrote, and :func:`authorize` checks it against the method's
``callers`` option.

``security.curve.enabled: false`` turns all of this off for a lab: nothing is encrypted, anyone
who reaches a port may call any method, and every process says so loudly in its log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import zmq
import zmq.asyncio
import zmq.utils.z85

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError, PermissionDeniedError
from sparkmill.common.rpc.framing import MethodSpec
from sparkmill.common.rpc.keys import (
    PUBLIC_SUFFIX,
    SERVER,
    Member,
    load_members,
    load_public_key,
    load_secret_key,
)

log = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_VERSION = b"1.0"
INSECURE_WARNING = (
    "SECURITY IS OFF (security.curve.enabled: false): RPC traffic is neither encrypted nor "
    "authenticated, and anyone who reaches a port can submit code, cancel jobs or pose as a "
    "cluster member. Use this only in an isolated lab."
)


@dataclass(frozen=True, slots=True)
class CurveKeyPair:
    public: bytes
    secret: bytes


@dataclass(frozen=True)
class TransportSecurity:
    """What a process needs to talk CURVE: its member key, the server key, the admitted keys."""

    enabled: bool
    member: CurveKeyPair | None = None  # presented to servers (client side)
    server_public: bytes = b""  # the cluster's server public key (client side checks it)
    server: CurveKeyPair | None = None  # served with (service processes only)
    members: Mapping[bytes, Member] = field(default_factory=dict)  # admitted callers

    @classmethod
    def disabled(cls) -> TransportSecurity:
        return cls(enabled=False)

    def apply_client(self, sock: zmq.asyncio.Socket) -> None:
        if not self.enabled:
            return
        if self.member is None or not self.server_public:
            raise ConfigurationError(
                opt.SECURITY_CURVE_SECRET_KEY_FILE.key,
                "CurveZMQ is on but this process has no member key or no server public key",
            )
        sock.curve_secretkey = self.member.secret
        sock.curve_publickey = self.member.public
        sock.curve_serverkey = self.server_public

    def apply_server(self, sock: zmq.asyncio.Socket, zap_domain: str) -> None:
        if not self.enabled:
            return
        if self.server is None:
            raise ConfigurationError(
                opt.SECURITY_CURVE_SERVER_SECRET_KEY_FILE.key,
                "CurveZMQ is on but this process has no server secret key to serve with",
            )
        sock.zap_domain = zap_domain.encode()
        # Fail closed: without a ZAP handler libzmq would otherwise admit every CURVE client.
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
        sock.curve_server = True
        sock.curve_secretkey = self.server.secret
        sock.curve_publickey = self.server.public


def security_from_config(config: Configuration, role: str, *, serves: bool) -> TransportSecurity:
    """The transport security of a process of ``role`` (``client`` for the CLI and scripts).

    Raises :class:`ConfigurationError` naming the key when a file is missing, unreadable or has
    loose permissions; nothing binds a port before this succeeded.
    """
    if not config.get(opt.SECURITY_CURVE_ENABLED):
        return TransportSecurity.disabled()
    public_key = opt.SECURITY_CURVE_PUBLIC_KEYS_DIR.key
    public_dir_text = config.get(opt.SECURITY_CURVE_PUBLIC_KEYS_DIR)
    secret_text = config.get(opt.SECURITY_CURVE_SECRET_KEY_FILE).replace("{role}", role)
    if not public_dir_text:
        raise ConfigurationError(
            public_key,
            "CurveZMQ is on (security.curve.enabled) but no public keys directory is set; "
            "generate keys with `sparkmill keys generate --dir DIR` and set this key to "
            "DIR/public (or set security.curve.enabled: false for an isolated lab)",
        )
    if not secret_text:
        raise ConfigurationError(
            opt.SECURITY_CURVE_SECRET_KEY_FILE.key,
            "CurveZMQ is on but no secret key file is set for this process",
        )
    public_dir = Path(public_dir_text)
    server_public = load_public_key(public_dir / (SERVER + PUBLIC_SUFFIX), public_key)
    public, secret = load_secret_key(Path(secret_text), opt.SECURITY_CURVE_SECRET_KEY_FILE.key)
    server: CurveKeyPair | None = None
    members: dict[bytes, Member] = {}
    if serves:
        server_key = opt.SECURITY_CURVE_SERVER_SECRET_KEY_FILE.key
        server_text = config.get(opt.SECURITY_CURVE_SERVER_SECRET_KEY_FILE)
        if not server_text:
            raise ConfigurationError(server_key, "CurveZMQ is on but no server key file is set")
        server_pair = load_secret_key(Path(server_text), server_key)
        if server_pair[0] != server_public:
            raise ConfigurationError(
                server_key,
                f"{server_text} is not the key pair of {public_dir / (SERVER + PUBLIC_SUFFIX)}",
            )
        server = CurveKeyPair(*server_pair)
        members = load_members(public_dir, public_key)
        if public not in members:
            log.warning(
                "this %s's own public key is not in %s: other members will refuse its calls",
                role,
                public_dir,
            )
    return TransportSecurity(True, CurveKeyPair(public, secret), server_public, server, members)


# -- authorization ------------------------------------------------------------------------------


def authorize(spec: MethodSpec, user_id: str | None, security: TransportSecurity) -> None:
    """Refuse (PERMISSION_DENIED) a call whose authenticated role may not call ``spec``."""
    if not security.enabled:
        return
    role = (user_id or "").partition(":")[0]
    if not role:
        raise PermissionDeniedError(f"{spec.name} refused: the caller is not authenticated")
    if "*" in spec.callers or role in spec.callers:
        return
    raise PermissionDeniedError(
        f"{spec.name} refused: callers with role {role!r} may not call it "
        f"(allowed: {', '.join(spec.callers)})"
    )


# -- ZAP ----------------------------------------------------------------------------------------


def zap_reply(request: list[bytes], domains: Mapping[str, Mapping[bytes, Member]]) -> list[bytes]:
    """The ZAP reply (RFC 27) to one request: admit a CURVE client whose key is known.

    ``request`` is ``[version, request_id, domain, address, identity, mechanism, *credentials]``
    (the REP socket strips the envelope). Only CURVE is accepted; with it the one credential is
    the client's 32-byte public key.
    """
    if len(request) < 6 or request[0] != ZAP_VERSION:
        request_id = request[1] if len(request) > 1 else b""
        return [ZAP_VERSION, request_id, b"500", b"malformed ZAP request", b"", b""]
    request_id, domain, mechanism = request[1], request[2], request[5]
    credentials = request[6:]

    def deny(code: bytes, text: str) -> list[bytes]:
        return [ZAP_VERSION, request_id, code, text.encode(), b"", b""]

    members = domains.get(domain.decode("utf-8", "replace"))
    if members is None:
        return deny(b"400", "unknown ZAP domain")
    if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
        return deny(b"400", "only CURVE clients are admitted")
    member = members.get(zmq.utils.z85.encode(credentials[0]))
    if member is None:
        return deny(b"400", "unknown public key")
    return [ZAP_VERSION, request_id, b"200", b"OK", member.user_id.encode(), b""]


class ZapHandler:
    """One ZAP handler per ZeroMQ context, serving every RPC server of that context.

    Each server registers its *domain* (set on its socket) with the keys it admits; the handler
    runs as a task on the event loop and answers from memory (no disk, no blocking).
    """

    _by_context: weakref.WeakKeyDictionary[zmq.asyncio.Context, ZapHandler] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, context: zmq.asyncio.Context) -> None:
        self._context = context
        self.domains: dict[str, Mapping[bytes, Member]] = {}
        self.denied = 0
        self._socket: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def for_context(cls, context: zmq.asyncio.Context) -> ZapHandler:
        handler = cls._by_context.get(context)
        if handler is None:
            handler = cls(context)
            cls._by_context[context] = handler
        return handler

    def add_domain(self, domain: str, members: Mapping[bytes, Member]) -> None:
        self.domains[domain] = members
        loop = asyncio.get_running_loop()
        if self._task is not None and self._task.get_loop() is not loop:
            self._task = None  # a previous event loop of this process (tests run several)
            if self._socket is not None:
                self._socket.close(linger=0)
                self._socket = None
        if self._task is None or self._task.done():
            sock = self._context.socket(zmq.REP)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(ZAP_ENDPOINT)
            self._socket = sock
            self._task = asyncio.create_task(self._serve(sock), name="zap-handler")

    async def remove_domain(self, domain: str) -> None:
        self.domains.pop(domain, None)
        if self.domains or self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    async def _serve(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            request = list(await sock.recv_multipart())
            reply = zap_reply(request, self.domains)
            if reply[2] != b"200":
                self.denied += 1
                if self.denied in (1, 10, 100) or self.denied % 1000 == 0:
                    log.warning(
                        "refused a connection (%s); %d refused so far",
                        reply[3].decode(),
                        self.denied,
                    )
            await sock.send_multipart(reply)
