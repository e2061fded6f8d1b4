"""A tiny HTTP client for the REST API tests (standard library only), following redirects."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urljoin, urlsplit

from sparkmill.common.jobgraph.codec import job_graph_to_proto

TERMINAL = ("FINISHED", "FAILED", "CANCELED")
# The bearer token requests send unless they name one (use_token); "" sends none.
_TOKEN = {"default": ""}


def use_token(token: str) -> None:
    """Make ``token`` the one every request sends by default (a cluster's operator token)."""
    _TOKEN["default"] = token


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body[:300]!r})"


def request(
    method: str,
    url: str,
    body: bytes | None = None,
    content_type: str = "",
    *,
    follow: bool = True,
    timeout: float = 15.0,
    token: str | None = None,
) -> Reply:
    """One request; a 307 is followed (same method and body, as RFC 9110 says) when asked."""
    token = _TOKEN["default"] if token is None else token
    for _ in range(5):
        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
        headers = {"Content-Type": content_type} if content_type else {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            connection.request(method, target or "/", body=body, headers=headers)
            response = connection.getresponse()
            reply = Reply(
                response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
            )
        finally:
            connection.close()
        if not (follow and reply.status == 307 and "location" in reply.headers):
            return reply
        url = urljoin(url, reply.headers["location"])
    raise AssertionError(f"too many redirects from {url}")


def get(url: str, **kwargs: Any) -> Reply:
    return request("GET", url, **kwargs)


def submit(base: str, pipeline: Any) -> str:
    graph = pipeline.build_job_graph()
    raw = job_graph_to_proto(graph).SerializeToString()
    reply = request("POST", f"{base}/v1/jobs", raw, "application/x-protobuf")
    assert reply.status == 202, reply
    job_id: str = reply.json()["jobid"]
    assert job_id == graph.job_id
    return job_id


def wait_for_state(
    base: str, job_id: str, states: tuple[str, ...], timeout_s: float = 60.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        reply = get(f"{base}/v1/jobs/{job_id}")
        if reply.status == 200:
            last = reply.json()
            if last["state"] in states:
                return dict(last)
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} not in {states} after {timeout_s:g}s: {last}")
