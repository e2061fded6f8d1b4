"""A small HTTP/1.1 server on the dispatcher's event loop, for the REST API and the dashboard.

Written in the project instead of adding a web framework: the API needs request lines,
headers, ``Content-Length`` bodies, JSON answers and a handful of static files, and running on
the dispatcher's own asyncio loop keeps the actor model (one loop owns the dispatcher's state;
a handler may await the dispatcher's gateway methods directly).

One request per connection (``Connection: close``): the dashboard polls a few URLs every
second or two, which does not need keep-alive. Limits protect the dispatcher from clients that
never authenticate (see :class:`HttpLimits`):

* the head must arrive within ``header_timeout_s`` and fit ``max_header_bytes``;
* a connection whose head has not arrived yet is *pending*; at most ``max_pending_per_peer``
  per client address and ``max_pending`` in all are kept, the oldest pending one is closed to
  make room, so stalled connections cannot lock authenticated clients out;
* a request with a body is shown to the ``admit`` hook (the REST API's token check) *before*
  a byte of its body is read: a refused request costs its head, never its declared body;
* ``Content-Length`` must be plain ASCII digits within ``max_body_bytes``, and the body must
  arrive within ``body_timeout_s``;
* at most ``max_connections`` admitted requests are handled at once (more get a 503).

Malformed requests get a 4xx answer; an unexpected exception in a handler gets a 500 and is
logged; neither ever reaches the dispatcher's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mimetypes
import re
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

log = logging.getLogger(__name__)

REASONS = {
    200: "OK",
    202: "Accepted",
    204: "No Content",
    307: "Temporary Redirect",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name (RFC 9110 token)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class HttpError(Exception):
    """A request the server refuses; becomes a JSON ``{"errors": [message]}`` answer."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str  # percent-decoded, without the query
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes = b""
    raw_target: str = ""

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()


@dataclass
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, document: object) -> HttpResponse:
        return cls(status, json.dumps(document, indent=1).encode() + b"\n")

    @classmethod
    def error(cls, status: int, message: str, **extra: Any) -> HttpResponse:
        return cls.json(status, {"errors": [message], **extra})

    def encode(self, *, head_only: bool = False) -> bytes:
        reason = REASONS.get(self.status, "Unknown")
        lines = [
            f"HTTP/1.1 {self.status} {reason}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            "Cache-Control: no-store",
            "X-Content-Type-Options: nosniff",
            "Connection: close",
            *(f"{name}: {value}" for name, value in self.headers.items()),
        ]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
Admission = Callable[[str, str, dict[str, str]], "HttpResponse | None"]
"""``(method, path, headers) -> None`` to read the body, or the refusal to send instead."""


@dataclass(frozen=True)
class HttpLimits:
    max_header_bytes: int = 16 * 1024
    max_body_bytes: int = 64 * 1024 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 256  # admitted requests in progress; more are answered 503
    max_pending: int = 128  # connections whose head has not arrived yet, in all
    max_pending_per_peer: int = 32  # ... and per client address
    # A refused request's unread body is discarded up to this much before the socket closes,
    # so that the client reads the refusal instead of a connection reset.
    discard_bytes: int = 64 * 1024


def parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """The method, request target and headers of a request head (ending with a blank line)."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes every byte; kept for clarity
        raise HttpError(400, "the request head is not text") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[1]:
        raise HttpError(400, f"malformed request line {lines[0][:80]!r}")
    method, target, version = parts
    if not version.startswith("HTTP/1."):
        raise HttpError(505, f"unsupported protocol {version[:20]!r}; speak HTTP/1.1")
    if method not in METHODS:
        raise HttpError(501, f"unsupported method {method[:20]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise HttpError(400, f"malformed header line {line[:80]!r}")
        key = name.lower()
        if key in _SINGLE_HEADERS and key in headers:
            # Two lengths or two credentials: whichever one a proxy used, it may not be ours.
            raise HttpError(400, f"the {name} header appears more than once")
        headers[key] = value.strip()
    return method, target, headers


_SINGLE_HEADERS = frozenset({"content-length", "transfer-encoding", "authorization", "host"})


def parse_target(target: str) -> tuple[str, dict[str, str]]:
    """Path (percent-decoded) and query of an origin-form request target."""
    if not target.startswith("/"):
        raise HttpError(400, f"request target {target[:80]!r} must start with '/'")
    try:
        parts = urlsplit(target)
        path = unquote(parts.path, errors="strict") if parts.path else "/"
    except (ValueError, UnicodeDecodeError) as exc:  # UnicodeDecodeError: %-escapes not UTF-8
        raise HttpError(400, f"request target {target[:80]!r} is not a valid URL: {exc}") from None
    if "\x00" in path:
        raise HttpError(400, "the path contains a NUL byte")
    return path, dict(parse_qsl(parts.query, keep_blank_values=True))


_DIGITS = re.compile(r"[0-9]{1,20}")  # ASCII only: str.isdigit() also accepts '²' and '٣'


def body_length(headers: dict[str, str], limits: HttpLimits) -> int:
    if "transfer-encoding" in headers:
        raise HttpError(501, "chunked bodies are not supported; send Content-Length")
    raw = headers.get("content-length", "0")
    if not _DIGITS.fullmatch(raw):
        raise HttpError(400, f"Content-Length {raw[:20]!r} is not a number")
    length = int(raw)
    if length > limits.max_body_bytes:
        raise HttpError(
            413, f"the body ({length} bytes) exceeds the limit of {limits.max_body_bytes} bytes"
        )
    return length


class HttpServer:
    """Serves ``handler`` on ``host``, on the first free port of ``ports`` (0 = any).

    ``admit`` sees the method, path and headers of every request that declares a body, before
    the body is read (None: every request is admitted).
    """

    def __init__(
        self,
        handler: Handler,
        host: str,
        ports: tuple[int, int],
        limits: HttpLimits | None = None,
        admit: Admission | None = None,
    ) -> None:
        self._handler = handler
        self._host = host
        self._ports = ports
        self.limits = limits or HttpLimits()
        self._admit = admit
        self._server: asyncio.Server | None = None
        self._active = 0
        # Connections whose head has not arrived, oldest first: the task serving each, by
        # connection, and how many each client address holds.
        self._pending: OrderedDict[int, tuple[str, asyncio.Task[None]]] = OrderedDict()
        self._pending_by_peer: dict[str, int] = {}
        self.evicted = 0  # pending connections closed to make room (tests and logs)
        self.port = 0

    async def start(self) -> int:
        first, last = self._ports
        error: OSError | None = None
        for port in range(first, last + 1):
            try:
                self._server = await asyncio.start_server(self._serve, self._host, port)
            except OSError as exc:
                error = exc
                continue
            self.port = int(self._server.sockets[0].getsockname()[1])
            return self.port
        raise OSError(f"no free port in {first}-{last} on {self._host!r}: {error}")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for _peer, task in list(self._pending.values()):
                task.cancel()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self._server.wait_closed()
            self._server = None

    # -- pending connections --------------------------------------------------------------

    def _add_pending(self, key: int, peer: str, task: asyncio.Task[None]) -> None:
        self._pending[key] = (peer, task)
        self._pending_by_peer[peer] = self._pending_by_peer.get(peer, 0) + 1
        if self._pending_by_peer[peer] > self.limits.max_pending_per_peer:
            self._evict(next(k for k, (p, _) in self._pending.items() if p == peer))
        if len(self._pending) > self.limits.max_pending:
            self._evict(next(iter(self._pending)))

    def _remove_pending(self, key: int) -> None:
        entry = self._pending.pop(key, None)
        if entry is None:
            return
        left = self._pending_by_peer[entry[0]] - 1
        if left:
            self._pending_by_peer[entry[0]] = left
        else:
            del self._pending_by_peer[entry[0]]

    def _evict(self, key: int) -> None:
        entry = self._pending.get(key)
        self._remove_pending(key)
        if entry is not None:
            self.evicted += 1
            entry[1].cancel()

    # -- one connection ---------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        key = id(writer)
        peer_address = writer.get_extra_info("peername")
        peer = str(peer_address[0]) if isinstance(peer_address, tuple) else "local"
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - asyncio always runs a handler in a task
            raise RuntimeError("bug: an HTTP connection is served outside a task")
        self._add_pending(key, peer, task)
        try:
            await self._serve_one(key, reader, writer)
        except asyncio.CancelledError:
            writer.transport.abort()  # evicted while pending, or the server stops
        finally:
            self._remove_pending(key)

    async def _serve_one(
        self, key: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head_only = False
        unread = 0
        active = False
        try:
            async with asyncio.timeout(self.limits.header_timeout_s):
                method, target, headers = await self._read_head(reader)
            self._remove_pending(key)
            head_only = method == "HEAD"
            path, query = parse_target(target)
            unread = body_length(headers, self.limits)
            if unread and self._admit is not None:
                refusal = self._admit(method, path, headers)
                if refusal is not None:
                    raise _Refused(refusal)
            if self._active >= self.limits.max_connections:
                raise HttpError(503, "too many requests in progress; try again shortly")
            self._active += 1
            active = True
            async with asyncio.timeout(self.limits.body_timeout_s):
                body = await reader.readexactly(unread) if unread else b""
            unread = 0
            response = await self._dispatch(HttpRequest(method, path, query, headers, body, target))
        except _Refused as refused:
            response = refused.response
        except HttpError as exc:
            response = HttpResponse.error(exc.status, exc.message, **exc.extra)
        except TimeoutError:
            response = HttpResponse.error(408, "the request did not arrive in time")
            unread = 0
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        except Exception:  # a bug here must cost one request, never the dispatcher
            log.exception("HTTP server failed on a request")
            response = HttpResponse.error(500, "internal error; the dispatcher log has details")
        finally:
            if active:
                self._active -= 1
        try:
            writer.write(response.encode(head_only=head_only))
            await writer.drain()
            if unread:
                await self._discard(reader, writer, unread)
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _discard(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, unread: int
    ) -> None:
        """Read and drop a little of a refused body, so the client sees the answer (closing a
        socket with unread data resets it); never more than ``discard_bytes`` or one second."""
        if writer.can_write_eof():
            writer.write_eof()
        budget = min(unread, self.limits.discard_bytes)
        with contextlib.suppress(TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            async with asyncio.timeout(1.0):
                while budget > 0:
                    chunk = await reader.read(min(budget, 16 * 1024))
                    if not chunk:
                        break
                    budget -= len(chunk)

    async def _read_head(self, reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise HttpError(431, "the request head is too large") from None
        if len(head) > self.limits.max_header_bytes:
            raise HttpError(431, f"the request head exceeds {self.limits.max_header_bytes} bytes")
        return parse_head(head[:-4])

    async def _dispatch(self, request: HttpRequest) -> HttpResponse:
        try:
            return await self._handler(request)
        except HttpError:
            raise
        except Exception:
            log.exception("REST handler failed on %s %s", request.method, request.raw_target)
            return HttpResponse.error(500, "internal error; the dispatcher log has the details")


class _Refused(Exception):
    """The admission hook refused a request: send its response, leave the body unread."""

    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status)
        self.response = response


def advertised_host(bind_host: str, configured: str) -> str:
    """The host name clients are given: configured, else the bound host unless a wildcard."""
    host = configured or bind_host
    if host in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    return f"[{host}]" if ":" in host else host


# --------------------------------------------------------------------------------------------
# Static files


CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
}


class StaticFiles:
    """The files under a directory, read once into memory and served by URL path.

    Only the files found when loading can be served, by their exact relative path, so no
    request path (``..``, encoded slashes, symlinks) can name anything else, and serving never
    touches the disk from the event loop.
    """

    def __init__(self, files: dict[str, tuple[bytes, str]], index: str = "index.html") -> None:
        self._files = files
        self.index = index

    @classmethod
    def load(cls, root: Path) -> StaticFiles:
        """Read every file under ``root`` (blocking: call it from an executor)."""
        files: dict[str, tuple[bytes, str]] = {}
        for item in sorted(root.rglob("*")):
            if item.is_file() and not item.name.startswith("."):
                content_type = CONTENT_TYPES.get(item.suffix) or (
                    mimetypes.guess_type(item.name)[0] or "application/octet-stream"
                )
                files[item.relative_to(root).as_posix()] = (item.read_bytes(), content_type)
        return cls(files)

    @property
    def names(self) -> list[str]:
        return sorted(self._files)

    def response(self, path: str) -> HttpResponse | None:
        """The file's response, or None when there is no such file."""
        found = self._files.get(path.lstrip("/") or self.index)
        if found is None:
            return None
        return HttpResponse(200, found[0], found[1])
