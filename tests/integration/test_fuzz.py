"""Hostile input against every service of a real cluster; afterwards the cluster still works.

Hypothesis generates, for every RPC of every gateway, valid-looking protobuf requests whose
fields hold hostile values (ids that are paths, huge strings, out-of-range enums, negative and
huge numbers, garbage addresses, job graphs with parallelism 10^6...), and raw multipart
messages (random, truncated, oversized, too many frames). They are sent with an *admitted* key
of the role each method allows, and with the right fencing token where one is known, so they get
past CurveZMQ, authorization and fencing to the request checks and the handlers.

Afterwards every service process must be alive and within its memory bound, and a real job must
still finish. The counts (examples per RPC, replies by code) are printed for the closing note
(``pytest -s``). Runs are reproducible (``derandomize=True``); SPARKMILL_FUZZ_EXAMPLES changes
the number of examples per RPC.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkmill.common.core.errors import DeadlineExceededError, RpcError
from sparkmill.common.core.ids import new_job_id
from sparkmill.common.jobgraph.codec import job_graph_to_proto
from sparkmill.common.rpc import framing
from sparkmill.common.rpc.client import RpcClient
from sparkmill.common.rpc.framing import MethodSpec
from sparkmill.common.rpc.request_checks import is_address_field, is_id_field
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, envelope_pb2, gateways, job_master_pb2
from sparkmill.local_cluster import LocalCluster
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import RunningCluster, start_local_cluster

EXAMPLES_PER_RPC = int(os.environ.get("SPARKMILL_FUZZ_EXAMPLES", "20"))
FRAME_EXAMPLES = 30
CALL_TIMEOUT_S = 5.0
# A service process (the Python side; Spark's JVM is a separate process) may grow this much.
RSS_GROWTH_LIMIT_MB = 300
RSS_LIMIT_MB = 1500

GATEWAYS: dict[str, tuple[str, dict[str, MethodSpec]]] = {
    "dispatcher": ("sparkmill.v1.DispatcherGateway", gateways.DISPATCHERGATEWAY_METHODS),
    "resource-manager": (
        "sparkmill.v1.ResourceManagerGateway",
        gateways.RESOURCEMANAGERGATEWAY_METHODS,
    ),
    "job-master": ("sparkmill.v1.JobMasterGateway", gateways.JOBMASTERGATEWAY_METHODS),
    "task-executor": ("sparkmill.v1.TaskExecutorGateway", gateways.TASKEXECUTORGATEWAY_METHODS),
}

HOSTILE_STRINGS = [
    "",
    "/",
    "../../etc",
    "/etc/passwd",
    "A" * 32,
    "0" * 31,
    "0" * 33,
    "\x00",
    "é" * 16,
    "tcp://127.0.0.1:1",
    "tcp://256.1.1.1:99999",
    "x" * 5000,
]
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_EDGE_INTS = [0, 1, -1, 2, 7, 1_000_000, 100_001, 2**31 - 1, -(2**31)]


# -- strategies ----------------------------------------------------------------------------------


def _ints(low: int, high: int) -> st.SearchStrategy[int]:
    edges = [v for v in (*_EDGE_INTS, low, high) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(max(low, -5), min(high, 100)))


def _strings(pool: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HOSTILE_STRINGS + pool),
        st.text(max_size=24),
        st.integers(0, 300_000).map(lambda n: "y" * n),  # large, within the size limits
    )


def _scalar(field: Any, pool: list[str], clean: bool) -> st.SearchStrategy[Any]:
    """Values for ``field``; ``clean``: ids, addresses and enums that pass the request checks
    (the other values stay hostile), so that the handlers behind the checks are fuzzed too."""
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING and is_id_field(field.name):
        # Mostly ids that pass the checks (some of real jobs), so handlers get exercised too.
        good = st.one_of(st.sampled_from(pool), st.uuids().map(lambda u: u.hex), st.just("te-x"))
        return good if clean else st.one_of(good, good, good, _strings(pool))
    if kind == FieldDescriptor.TYPE_STRING and is_address_field(field.name):
        good = st.sampled_from(["tcp://127.0.0.1:1", "tcp://localhost:9", "tcp://[::1]:2"])
        return good if clean else st.one_of(good, good, _strings(pool))
    if kind == FieldDescriptor.TYPE_ENUM and clean:
        return st.sampled_from([v.number for v in field.enum_type.values])
    if kind == FieldDescriptor.TYPE_STRING:
        return _strings(pool)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.just(b"\x80\x04\x95garbage pickle"))
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        if kind == FieldDescriptor.TYPE_FLOAT:
            return st.floats(width=32, allow_nan=True, allow_infinity=True)
        return st.floats(allow_nan=True, allow_infinity=True)
    if kind == FieldDescriptor.TYPE_ENUM:
        return _ints(-3, 40)
    if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return _ints(0, 2**32 - 1)
    if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return _ints(0, 2**64 - 1)
    if kind in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64):
        return _ints(*_INT64)
    return _ints(*_INT32)


def messages(
    descriptor: Any, pool: list[str], clean: bool, depth: int = 0
) -> st.SearchStrategy[Message]:
    """Messages of ``descriptor``'s type with hostile values in any subset of their fields."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    value: st.SearchStrategy[Any]
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                key = _scalar(field.message_type.fields_by_name["key"], pool, clean)
                value_field = field.message_type.fields_by_name["value"]
                if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    continue
                value = st.dictionaries(key, _scalar(value_field, pool, clean), max_size=2)
            elif depth >= 3:
                continue
            else:
                nested = messages(field.message_type, pool, clean, depth + 1)
                value = st.lists(nested, max_size=3) if field.is_repeated else nested
        elif field.is_repeated:
            value = st.lists(_scalar(field, pool, clean), max_size=3)
        else:
            value = _scalar(field, pool, clean)
        fields[field.name] = st.one_of(st.none(), value)
    return st.fixed_dictionaries(fields).map(lambda values: _build(descriptor, values))


def _build(descriptor: Any, values: dict[str, Any]) -> Message:
    message: Message = _message_class(descriptor)()
    for name, value in values.items():
        if value is None:
            continue
        field = descriptor.fields_by_name[name]
        target: Any = getattr(message, name)
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            target.update(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.is_repeated:
            for item in value:
                target.add().CopyFrom(item)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            target.CopyFrom(value)
        elif field.is_repeated:
            target.extend(value)
        else:
            setattr(message, name, value)
    return message


def _message_class(descriptor: Any) -> type[Message]:
    cls: type[Message] = message_factory.GetMessageClass(descriptor)
    return cls


# -- the cluster and its members -----------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    running = RunningCluster(
        start_local_cluster(tmp_path_factory.mktemp("fuzz"), task_executors=1, slots=2)
    )
    yield running
    running.close()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _services(cluster: LocalCluster) -> dict[str, int]:
    return {p.name: p.pid for p in cluster.processes if p.role != "zookeeper"}


class Fuzzer:
    """Sends requests to one cluster's services with admitted keys and counts the replies."""

    def __init__(self, cluster: LocalCluster, addresses: dict[str, str], pool: list[str]):
        self.cluster = cluster
        self.addresses = addresses
        self.pool = pool
        self.loop = asyncio.new_event_loop()
        self.clients: dict[tuple[str, str], RpcClient] = {}
        self.tokens: dict[str, str] = {}
        self.examples: Counter[str] = Counter()
        self.codes: Counter[str] = Counter()
        self.codes_by_rpc: dict[str, Counter[str]] = {}
        self.slowest = (0.0, "")

    def client(self, target: str, role: str) -> RpcClient:
        key = (target, role)
        if key not in self.clients:
            security = self.cluster.transport_security(role)
            self.clients[key] = RpcClient(self.addresses[target], caller="fuzz", security=security)
        return self.clients[key]

    def send(self, target: str, spec: MethodSpec, request: Message, token: str) -> str:
        service = GATEWAYS[target][0]
        role = spec.callers[0] if spec.callers[0] != "*" else "client"
        started = time.monotonic()
        try:
            self.loop.run_until_complete(
                self.client(target, role).call(
                    service, spec, request, timeout=CALL_TIMEOUT_S, fencing_token=token
                )
            )
            code = "OK"
        except DeadlineExceededError:
            code = "TIMEOUT"
        except RpcError as exc:
            code = exc.code.name
        took = time.monotonic() - started
        if took > self.slowest[0]:
            self.slowest = (took, f"{target}.{spec.name}")
        self.examples[f"{target}.{spec.name}"] += 1
        self.codes[code] += 1
        self.codes_by_rpc.setdefault(f"{target}.{spec.name}", Counter())[code] += 1
        return code

    def close(self) -> None:
        for client in self.clients.values():
            self.loop.run_until_complete(client.close())
        self.loop.close()


def _leader_token(fuzzer: Fuzzer, target: str) -> str:
    spec = GATEWAYS[target][1]["GetLeaderSession"]
    reply: Any = fuzzer.loop.run_until_complete(
        fuzzer.client(target, "client").call(
            GATEWAYS[target][0], spec, common_pb2.GetLeaderSessionRequest(), timeout=10
        )
    )
    return str(reply.session_id)


def _fuzz_method(fuzzer: Fuzzer, target: str, spec: MethodSpec) -> None:
    known = fuzzer.tokens.get(target, "")
    tokens = st.sampled_from([known, known, known, "", "0" * 32]) if spec.fenced else st.just("")
    descriptor = spec.request_type.DESCRIPTOR
    requests = st.one_of(
        messages(descriptor, fuzzer.pool, clean=True),
        messages(descriptor, fuzzer.pool, clean=False),
    )

    @settings(
        max_examples=EXAMPLES_PER_RPC,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(request=requests, token=tokens)
    def run(request: Message, token: str) -> None:
        fuzzer.send(target, spec, request, token)

    run()


def _fuzz_frames(fuzzer: Fuzzer, target: str) -> None:
    """Raw multipart messages: random, truncated, oversized, too many frames."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    socket = context.socket(zmq.DEALER)
    # Sets socket options only: a plain socket takes them as well as an asyncio one.
    fuzzer.cluster.transport_security("client").apply_client(socket)  # type: ignore[arg-type]
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(fuzzer.addresses[target])
    header = envelope_pb2.RequestHeader(
        request_id=7, service=GATEWAYS[target][0], method="GetServiceInfo", timeout_ms=2000
    ).SerializeToString()
    frames = st.one_of(
        st.lists(st.binary(max_size=64), min_size=0, max_size=6),
        st.just([framing.MAGIC, header[: len(header) // 2], b""]),  # truncated header
        st.just([framing.MAGIC, header, b"\xff" * 10]),  # undecodable payload
        st.just([framing.MAGIC, header, b"z" * (70 * 1024 * 1024)]),  # over every limit
        st.just([framing.MAGIC, header, b""] + [b"x"] * 20),  # too many frames
        st.just([b"GET / HTTP/1.1\r\n\r\n"]),
    )

    @settings(
        max_examples=FRAME_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(message=frames)
    def run(message: list[bytes]) -> None:
        if message:
            socket.send_multipart(message)
        fuzzer.examples[f"{target}.<raw frames>"] += 1

    try:
        run()
        time.sleep(0.5)
        while socket.poll(100):
            socket.recv_multipart()
            fuzzer.codes["raw frames answered"] += 1
    finally:
        socket.close(linger=0)


def test_hostile_messages_to_every_service_change_nothing(fuzzed: RunningCluster) -> None:
    cluster, client = fuzzed.cluster, fuzzed.client
    view = client.cluster_status()
    addresses = {
        "dispatcher": view.dispatcher.address,
        "resource-manager": view.resource_manager.resource_manager.address,
        "job-master": view.job_master_process_infos[0].address,
        "task-executor": view.resource_manager.task_executors[0].address,
    }
    before = {name: _rss_mb(pid) for name, pid in _services(cluster).items()}
    # A real job, known to every service while the fuzzer runs (its ids join the pool).
    held = client.submit(noop_pipeline("held", parallelism=1, sleep_s=5.0).build_job_graph())
    fuzzer = Fuzzer(cluster, addresses, [held, new_job_id()])
    fuzzer.tokens = {
        "dispatcher": _leader_token(fuzzer, "dispatcher"),
        "resource-manager": _leader_token(fuzzer, "resource-manager"),
    }
    fuzzer.tokens["job-master"] = fuzzer.tokens["dispatcher"]  # StartJob is the dispatcher's
    fuzzer.tokens["task-executor"] = fuzzer.tokens["resource-manager"]
    started = time.monotonic()
    try:
        _known_hostile_cases(fuzzer)
        for target, (_, methods) in GATEWAYS.items():
            for spec in methods.values():
                _fuzz_method(fuzzer, target, spec)
            _fuzz_frames(fuzzer, target)
    finally:
        fuzzer.close()
    took = time.monotonic() - started

    print(f"\nfuzzing took {took:.1f} s; {sum(fuzzer.examples.values())} messages")
    for name, count in sorted(fuzzer.examples.items()):
        codes = ", ".join(f"{c} {n}" for c, n in sorted(fuzzer.codes_by_rpc.get(name, {}).items()))
        print(f"  {name}: {count}" + (f" ({codes})" if codes else ""))
    print("replies by code:", dict(sorted(fuzzer.codes.items())))
    print(f"slowest reply: {fuzzer.slowest[0]:.2f} s ({fuzzer.slowest[1]})")
    assert fuzzer.codes["INTERNAL"] == 0, "a handler failed unexpectedly (see the service logs)"

    after = {name: _rss_mb(pid) for name, pid in _services(cluster).items()}
    print("RSS MB before -> after:", {n: f"{before[n]:.0f}->{after[n]:.0f}" for n in after})
    cluster._check_alive()  # every service process still runs
    for name, rss in after.items():
        assert rss < RSS_LIMIT_MB and rss - before[name] < RSS_GROWTH_LIMIT_MB, (name, rss)
    # The held job ended one way or another (an admitted client key may cancel it, and the
    # fuzzer holds one), and a new job runs to the end.
    held_status = client.wait(held, timeout=90).status
    print("the held job ended", common_pb2.JobStatus.Name(held_status))
    job_id = client.submit(noop_pipeline("after-fuzz", parallelism=2).build_job_graph())
    assert client.wait(job_id, timeout=90).status == common_pb2.FINISHED


def _known_hostile_cases(fuzzer: Fuzzer) -> None:
    """The cases the issue names, each once, with their expected refusal."""
    expect: list[tuple[str, str, Message, Callable[[str], bool]]] = []
    graph = job_graph_to_proto(noop_pipeline("huge", parallelism=1).build_job_graph())
    graph.vertices[0].parallelism = 1_000_000
    graph.vertices[0].max_parallelism = 0
    start = job_master_pb2.StartJobRequest(job_graph=graph, dispatcher_address="tcp://a:1")
    expect.append(("job-master", "StartJob", start, lambda code: code == "INVALID_JOB_GRAPH"))
    register = dispatcher_pb2.RegisterJobMasterProcessRequest(
        process_id="f" * 32, address="tcp://127.0.0.1:1"
    )
    register.jobs.add(job_id=fuzzer.pool[0], status=99)
    expect.append(
        ("dispatcher", "RegisterJobMasterProcess", register, lambda c: c == "INVALID_ARGUMENT")
    )
    bogus = job_graph_to_proto(noop_pipeline("bogus", parallelism=1).build_job_graph())
    bogus.config["restart-strategy.type"] = "bogus"
    submit = dispatcher_pb2.SubmitJobRequest(job_graph=bogus)
    expect.append(("dispatcher", "SubmitJob", submit, lambda code: code == "INVALID_JOB_GRAPH"))
    for target, method, request, ok in expect:
        started = time.monotonic()
        code = fuzzer.send(target, GATEWAYS[target][1][method], request, fuzzer.tokens[target])
        took = time.monotonic() - started
        print(f"{target}.{method} (the issue's case): {code} in {took:.2f} s")
        assert ok(code) and took < 3.0, (method, code, took)
