"""Prometheus metrics shared by every sparkmill service process.

Each process has its own :class:`ProcessMetrics`: a private ``CollectorRegistry`` (never the
global one), the metrics every service exports (RPC, heartbeats, event-loop lag, ZooKeeper,
identity) and an HTTP endpoint (:class:`MetricsHttpServer`) that serves the classic Prometheus
text format on ``/metrics``.

Threading: the endpoint runs *on the service's event loop*, so every collector runs there too and
reads service state like any other actor code, without locks. A scrape therefore also proves
that the loop answers; a blocked loop shows as a failed scrape (``up == 0``) and, afterwards, as
``sparkmill_event_loop_lag_max_seconds``.

Most service metrics are custom collectors that *read* service state when scraped (slot counts,
job status...), so the services carry almost no instrumentation. Events that leave no trace in
state (an RPC finished, a task attempt ended) are counted as they happen.

Every sample carries the constant labels ``role`` (the service role) plus the configured
``metrics.labels.*``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from sparkmill.common.core.zookeeper_state import ZooKeeperConnectionState

log = logging.getLogger(__name__)

PREFIX = "sparkmill_"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The classic text exposition (``promtool check metrics`` reads it; no ``_created`` series)."""

RPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
ENDED_JOB_RETENTION_S = 600.0
"""How long series labelled with the id of an ended job are still exported (bounded labels)."""
MAX_MALFORMED_REASONS = 16
RESERVED_LABELS = frozenset({"role", "job", "instance"})


# -- ZooKeeper connection state -------------------------------------------------------------------


class ZooKeeperStateHolder:
    """The ZooKeeper connection state of this process, written by the HA code.

    The ZooKeeper HA services call :meth:`enable` once when they create their client (from then
    on the process reports ``sparkmill_zookeeper_connected``, 0 until connected) and :meth:`set`
    with every connection state change (any thread; kazoo's ``KazooState`` values are the
    strings ``CONNECTED``/``SUSPENDED``/``LOST``). A process that never enables it runs without
    ZooKeeper (standalone) and exports no ZooKeeper series.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.enabled = False
        self.state: ZooKeeperConnectionState | None = None
        self.losses_total = 0  # CONNECTED -> SUSPENDED/LOST transitions

    def enable(self) -> None:
        self.enabled = True

    def set(self, state: str | ZooKeeperConnectionState) -> None:
        new = (
            state
            if isinstance(state, ZooKeeperConnectionState)
            else ZooKeeperConnectionState(str(state).upper())
        )
        with self._lock:
            self.enabled = True
            was_connected = self.state is ZooKeeperConnectionState.CONNECTED
            if was_connected and new is not ZooKeeperConnectionState.CONNECTED:
                self.losses_total += 1
            self.state = new

    @property
    def connected(self) -> bool:
        return self.state is ZooKeeperConnectionState.CONNECTED


ZOOKEEPER = ZooKeeperStateHolder()
"""The process-wide holder the ZooKeeper HA services write (``ZOOKEEPER.set(state)``)."""


# -- building blocks for collectors ---------------------------------------------------------------


def gauge(name: str, documentation: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, labels=list(labels))


def counter(name: str, documentation: str, labels: Iterable[str] = ()) -> CounterMetricFamily:
    """A counter family; ``name`` is given without ``_total`` (the sample gets it)."""
    return CounterMetricFamily(PREFIX + name, documentation, labels=list(labels))


def one_hot(
    family: GaugeMetricFamily, prefix: list[str], states: Iterable[str], current: str
) -> None:
    """A sample per state, 1 for ``current`` and 0 for the others (a state-set gauge)."""
    for state in states:
        family.add_metric([*prefix, state], 1.0 if state == current else 0.0)


class RetainedCounter:
    """A counter summed over short-lived objects (e.g. one heartbeat manager per job) that stays
    monotonic when an object goes away: :meth:`retire` adds its final count to a base."""

    def __init__(self) -> None:
        self._base = 0

    def retire(self, final_count: int) -> None:
        self._base += final_count

    def value(self, live_counts: Iterable[int]) -> int:
        return self._base + sum(live_counts)


class ExpiringKeys:
    """Remembers when keys (e.g. job ids) were last active, to drop series of ended jobs."""

    def __init__(self, retention_s: float = ENDED_JOB_RETENTION_S) -> None:
        self.retention_s = retention_s
        self._last_active: dict[str, float] = {}

    def touch(self, key: str, now: float | None = None) -> None:
        self._last_active[key] = time.monotonic() if now is None else now

    def expired(self, active: Iterable[str], now: float | None = None) -> list[str]:
        """Keys idle for the retention time and not in ``active``; they are forgotten."""
        now = time.monotonic() if now is None else now
        for key in active:
            self._last_active[key] = now
        horizon = now - self.retention_s
        gone = [k for k, t in self._last_active.items() if t < horizon]
        for key in gone:
            del self._last_active[key]
        return gone


# -- RPC -----------------------------------------------------------------------------------------


def _service_label(service: str) -> str:
    return service.rsplit(".", 1)[-1]


class RpcMetrics:
    """An :class:`~sparkmill.common.rpc.server.RpcObserver`: requests, errors and latency by
    method."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests: dict[tuple[str, str, str], int] = {}
        self._errors: dict[tuple[str, str], int] = {}
        self._malformed: dict[str, int] = {}
        self._listeners: list[Callable[[str, str, str, float], None]] = []
        self.latency = Histogram(
            PREFIX + "rpc_request_duration_seconds",
            "Time to serve an RPC request, from its arrival to its reply, by service and method.",
            ["service", "method"],
            buckets=RPC_BUCKETS,
            registry=registry,
        )
        registry.register(self)

    def declare(self, service: str, methods: Iterable[str]) -> None:
        """Start the series of every method at 0 (so rates and error panels show data)."""
        label = _service_label(service)
        for method in methods:
            self._requests.setdefault((label, method, "OK"), 0)
            self._errors.setdefault((label, method), 0)
            self.latency.labels(label, method)

    def add_listener(self, listener: Callable[[str, str, str, float], None]) -> None:
        """Also called with every finished request (e.g. for a per-method histogram)."""
        self._listeners.append(listener)

    # RpcObserver
    def on_request(self, service: str, method: str, code: str, seconds: float) -> None:
        label = _service_label(service)
        key = (label, method, code)
        self._requests[key] = self._requests.get(key, 0) + 1
        if code != "OK":
            self._errors[(label, method)] = self._errors.get((label, method), 0) + 1
        self.latency.labels(label, method).observe(seconds)
        for listener in self._listeners:
            listener(label, method, code, seconds)

    def on_malformed(self, reason: str) -> None:
        key = reason.split(":")[0].strip()[:60] or "unknown"
        if key not in self._malformed and len(self._malformed) >= MAX_MALFORMED_REASONS:
            key = "other"
        self._malformed[key] = self._malformed.get(key, 0) + 1

    # Collector
    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        requests = counter(
            "rpc_requests",
            "RPC requests served, by service, method and result code.",
            ["service", "method", "code"],
        )
        for (service, method, code), value in sorted(self._requests.items()):
            requests.add_metric([service, method, code], value)
        errors = counter(
            "rpc_errors",
            "RPC requests answered with an error (any code but OK), by service and method.",
            ["service", "method"],
        )
        for (service, method), value in sorted(self._errors.items()):
            errors.add_metric([service, method], value)
        malformed = counter(
            "rpc_malformed_messages", "Malformed RPC messages dropped, by reason.", ["reason"]
        )
        for reason, value in sorted(self._malformed.items()):
            malformed.add_metric([reason], value)
        yield from (requests, errors, malformed)


# -- the process --------------------------------------------------------------------------------


class LoopLagSource(Protocol):
    def take_loop_lag(self) -> float: ...


class _ProcessCollector:
    """Identity, HA mode, ZooKeeper connection and event-loop lag."""

    def __init__(
        self,
        role: str,
        service_id: str,
        started_at: float,
        ha_mode: str,
        runtime: LoopLagSource,
        zookeeper: ZooKeeperStateHolder,
    ) -> None:
        self.role = role
        self.service_id = service_id
        self.started_at = started_at
        self.ha_mode = ha_mode
        self.runtime = runtime
        self.zookeeper = zookeeper

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        info = gauge(
            "service_info", "Always 1: identifies the service process.", ["service_id", "hostname"]
        )
        info.add_metric([self.service_id, socket.gethostname()], 1.0)
        started = gauge("service_start_time_seconds", "When the process started (Unix time).")
        started.add_metric([], self.started_at)
        lag = gauge(
            "event_loop_lag_max_seconds",
            "The longest time the service's event loop was blocked since the previous scrape.",
        )
        lag.add_metric([], self.runtime.take_loop_lag())
        mode = gauge(
            "high_availability_mode",
            "Always 1, labelled with high-availability.mode ('none': standalone, no ZooKeeper).",
            ["mode"],
        )
        mode.add_metric([self.ha_mode], 1.0)
        yield from (info, started, lag, mode)
        zk = self.zookeeper
        if zk.enabled:  # the ZooKeeper HA services enabled it: the process uses ZooKeeper
            connected = gauge(
                "zookeeper_connected",
                "1 while the process's ZooKeeper client is connected, else 0 (HA mode only).",
            )
            connected.add_metric([], 1.0 if zk.connected else 0.0)
            losses = counter(
                "zookeeper_connection_losses",
                "Times the ZooKeeper connection was suspended or lost after being connected.",
            )
            losses.add_metric([], zk.losses_total)
            yield from (connected, losses)


class _ConstLabels:
    """What the HTTP endpoint collects: the registry's families with constant labels added."""

    def __init__(self, registry: CollectorRegistry, labels: Mapping[str, str]) -> None:
        self._registry = registry
        self._labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            out.samples = [s._replace(labels={**self._labels, **s.labels}) for s in family.samples]
            yield out


class ProcessMetrics:
    """Everything one service process exports; services add their collectors with
    :meth:`register`."""

    def __init__(
        self,
        role: str,
        service_id: str,
        runtime: LoopLagSource,
        *,
        ha_mode: str = "none",
        extra_labels: Mapping[str, str] | None = None,
        started_at: float | None = None,
        zookeeper: ZooKeeperStateHolder = ZOOKEEPER,
    ) -> None:
        self.role = role
        # Histograms' *_created series add nothing the scrape does not know (process-wide).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        labels = {"role": role}
        for key, value in (extra_labels or {}).items():
            if key in RESERVED_LABELS:
                log.warning("metrics.labels.%s ignored: '%s' is a reserved label", key, key)
            else:
                labels[key] = str(value)
        self.const_labels = labels
        self.exposition = _ConstLabels(self.registry, labels)
        self.rpc = RpcMetrics(self.registry)
        self.registry.register(
            _ProcessCollector(
                role,
                service_id,
                time.time() if started_at is None else started_at,
                ha_mode,
                runtime,
                zookeeper,
            )
        )
        with contextlib.suppress(Exception):  # /proc may be missing (not Linux)
            ProcessCollector(namespace="sparkmill", registry=self.registry)

    def register(self, collector: Collector) -> None:
        self.registry.register(collector)

    def render(self) -> bytes:
        """The classic text exposition of every metric of the process."""
        return generate_latest(self.exposition)


# -- HTTP endpoint ------------------------------------------------------------------------------

_REQUEST_TIMEOUT_S = 10.0
_MAX_HEADER_BYTES = 64 * 1024


_RENDER = b"(rendered off the event loop)"  # marker: _respond leaves the rendering to _handle


class MetricsHttpServer:
    """A minimal HTTP/1.1 endpoint on the service's event loop: ``GET /metrics``."""

    def __init__(
        self, render: Callable[[], bytes], host: str, port: int, *, advertised_host: str = ""
    ) -> None:
        self._render = render
        self._host = host
        self._port = port
        # The host others are told (metrics.address); empty: the bound host.
        self._advertised_host = advertised_host
        self._server: asyncio.Server | None = None
        self._render_lock: asyncio.Lock | None = None
        self.port = 0
        self.scrapes_total = 0

    @property
    def url(self) -> str:
        host = self._advertised_host or self._host
        if host in ("", "0.0.0.0", "::"):
            host = socket.getfqdn()
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> str:
        """Bind (port 0 picks a free port) and serve; returns the URL of ``/metrics``."""
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            status, content_type, body = self._respond(head)
            if body is _RENDER:
                body = await self._render_off_loop()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, content_type, body = "400 Bad Request", "text/plain", b"bad request\n"
        except ConnectionError:
            writer.close()
            return
        except Exception:  # a collector's bug: answer 500, keep the endpoint (and loop) alive
            log.exception("rendering /metrics failed")
            status, content_type, body = "500 Internal Server Error", "text/plain", b"failed\n"

        header = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        try:
            writer.write(header + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _render_off_loop(self) -> bytes:
        """Render in a worker thread: a large page must not stall the service's event loop
        (heartbeats would be missed). One render at a time; concurrent scrapes wait for it.

        Collectors read the service's state while the loop keeps changing it; a collection that
        trips over a container changing size under it is simply retried.
        """
        if self._render_lock is None:
            self._render_lock = asyncio.Lock()
        async with self._render_lock:
            loop = asyncio.get_running_loop()
            for attempt in range(3):
                try:
                    return await loop.run_in_executor(None, self._render)
                except RuntimeError:
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

    def _respond(self, head: bytes) -> tuple[str, str, bytes]:
        if len(head) > _MAX_HEADER_BYTES:
            return "431 Request Header Fields Too Large", "text/plain", b"headers too large\n"
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET is served\n"
        path = parts[1].split("?", 1)[0]
        if path == "/metrics":
            self.scrapes_total += 1
            return "200 OK", CONTENT_TYPE, b"" if parts[0] == "HEAD" else _RENDER
        if path == "/":
            return "200 OK", "text/plain", b"sparkmill metrics: GET /metrics\n"
        return "404 Not Found", "text/plain", b"not found; metrics are at /metrics\n"
