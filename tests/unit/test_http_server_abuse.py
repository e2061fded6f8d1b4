"""The REST server under hostile clients, over real sockets on loopback: bodies are never read
before the token is checked, stalled connections cannot lock others out, and odd lengths are
refused cleanly."""

from __future__ import annotations

import asyncio
import time

from sparkmill.services.dispatcher.http_server import (
    HttpLimits,
    HttpRequest,
    HttpResponse,
    HttpServer,
)


def _admit_with_token(method: str, path: str, headers: dict[str, str]) -> HttpResponse | None:
    if headers.get("authorization") == "Bearer good":
        return None
    return HttpResponse.error(401, "a token is needed")


async def _exchange(port: int, raw: bytes, *, read_timeout_s: float = 5.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    async with asyncio.timeout(read_timeout_s):
        reply = await reader.read()
    writer.close()
    return reply


def test_a_body_without_a_token_is_refused_before_a_byte_of_it_is_read() -> None:
    seen: list[HttpRequest] = []

    async def handler(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse.json(200, {"size": len(request.body)})

    async def scenario() -> tuple[bytes, float, bytes]:
        server = HttpServer(handler, "127.0.0.1", (0, 0), admit=_admit_with_token)
        port = await server.start()
        try:
            started = time.monotonic()
            # 60 MiB announced, none of it sent: the answer must not wait for the body.
            refused = await _exchange(
                port, b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 62914560\r\n\r\n" + b"x" * 100
            )
            elapsed = time.monotonic() - started
            admitted = await _exchange(
                port,
                b"POST /v1/jobs HTTP/1.1\r\nAuthorization: Bearer good\r\n"
                b"Content-Length: 3\r\n\r\nabc",
            )
            return refused, elapsed, admitted
        finally:
            await server.stop()

    refused, elapsed, admitted = asyncio.run(scenario())
    assert refused.startswith(b"HTTP/1.1 401 "), refused[:80]
    assert elapsed < 3.0
    assert admitted.startswith(b"HTTP/1.1 200 ") and b'"size": 3' in admitted
    assert len(seen) == 1  # the refused request never reached the handler


def test_stalled_connections_cannot_lock_an_authenticated_client_out() -> None:
    async def handler(request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(200, {"ok": True})

    async def scenario() -> tuple[bytes, int]:
        limits = HttpLimits(max_pending=64, max_pending_per_peer=16, header_timeout_s=30)
        server = HttpServer(handler, "127.0.0.1", (0, 0), limits, admit=_admit_with_token)
        port = await server.start()
        stalled: list[asyncio.StreamWriter] = []
        try:
            for _ in range(300):  # heads that never end, no token
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 9")
                stalled.append(writer)
            await asyncio.sleep(0.2)
            reply = await _exchange(
                port, b"GET /v1/overview HTTP/1.1\r\nAuthorization: Bearer good\r\n\r\n"
            )
            return reply, server.evicted
        finally:
            for writer in stalled:
                writer.close()
            await server.stop()

    reply, evicted = asyncio.run(scenario())
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:80]
    assert evicted >= 300 - 16


def test_ambiguous_lengths_are_refused_and_the_server_keeps_serving() -> None:
    async def handler(request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(200, {"body": request.body.decode()})

    async def scenario() -> list[bytes]:
        server = HttpServer(handler, "127.0.0.1", (0, 0))
        port = await server.start()
        try:
            return [
                await _exchange(
                    port, "POST /x HTTP/1.1\r\nContent-Length: 1\u00b2\r\n\r\nab".encode("utf-8")
                ),
                await _exchange(
                    port,
                    b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
                ),
                await _exchange(port, b"POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\nab"),
            ]
        finally:
            await server.stop()

    replies = asyncio.run(scenario())
    assert [r.split(b" ", 2)[1] for r in replies] == [b"400", b"400", b"200"]
    assert b'"body": "ab"' in replies[-1]
