"""The shared metrics pieces and each service's collector, on fakes (no processes)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import Metric

from sparkmill.common.core.ids import (
    new_allocation_id,
    new_instance_id,
    new_job_id,
    new_resource_id,
)
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.slots import SlotReport, SlotStatus
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.common.core.zookeeper_state import ZooKeeperConnectionState
from sparkmill.common.runtime.metrics import (
    CONTENT_TYPE,
    ExpiringKeys,
    MetricsHttpServer,
    ProcessMetrics,
    RetainedCounter,
    RpcMetrics,
    ZooKeeperStateHolder,
)
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.common.v1 import common_pb2
from sparkmill.services.dispatcher.metrics import DispatcherCollector
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from sparkmill.services.jobmaster.metrics import JobMasterCollector, _JobMasters
from sparkmill.services.resourcemanager.slot_manager import SlotManager, SlotRequest, SlotState
from sparkmill.services.resourcemanager.task_executor_registration import TaskExecutorRegistration
from sparkmill.services.taskexecutor.context import TaskOutcome
from sparkmill.services.taskexecutor.metrics import TaskExecutorCollector, spark_session_up
from sparkmill.testing import noop_pipeline
from tests.unit.resource_manager_harness import (
    TestingHeartbeats,
    TestingResourceManagerState,
    TestingSlotView,
)
from tests.unit.slot_manager_fakes import RecordingActions

ES = ExecutionState


class Lag:
    def __init__(self, lag: float = 0.25) -> None:
        self.lag = lag

    def take_loop_lag(self) -> float:
        return self.lag


def samples(collector: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a collector (or registry) as {(name, sorted labels): value}."""
    out = {}
    families: list[Metric] = list(collector.collect())
    for family in families:
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(collector: Any, name: str, **labels: str) -> float | None:
    return samples(collector).get((name, tuple(sorted(labels.items()))))


# -- shared pieces ------------------------------------------------------------------------------


def test_rpc_metrics_count_requests_errors_and_latency_and_start_methods_at_zero() -> None:
    registry = CollectorRegistry()
    rpc = RpcMetrics(registry)
    rpc.declare("sparkmill.v1.ResourceManagerGateway", ["RequestSlot", "Heartbeat"])
    assert value(rpc, "sparkmill_rpc_errors_total", service="ResourceManagerGateway",
                 method="Heartbeat") == 0  # fmt: skip
    seen: list[str] = []
    rpc.add_listener(lambda service, method, code, seconds: seen.append(code))
    rpc.on_request("sparkmill.v1.ResourceManagerGateway", "RequestSlot", "OK", 0.002)
    rpc.on_request("sparkmill.v1.ResourceManagerGateway", "RequestSlot", "NOT_LEADER", 0.001)
    labels = {"service": "ResourceManagerGateway", "method": "RequestSlot"}
    assert value(rpc, "sparkmill_rpc_requests_total", code="OK", **labels) == 1
    assert value(rpc, "sparkmill_rpc_requests_total", code="NOT_LEADER", **labels) == 1
    assert value(rpc, "sparkmill_rpc_errors_total", **labels) == 1
    assert value(registry, "sparkmill_rpc_request_duration_seconds_count", **labels) == 2
    assert seen == ["OK", "NOT_LEADER"]


def test_malformed_reasons_are_bounded() -> None:
    rpc = RpcMetrics(CollectorRegistry())
    for i in range(40):
        rpc.on_malformed(f"reason {i}: details")
    reasons = {k[1][0][1] for k in samples(rpc) if k[0] == "sparkmill_rpc_malformed_messages_total"}
    assert len(reasons) == 17 and "other" in reasons and "reason 0" in reasons


def test_process_metrics_add_role_and_configured_labels_but_never_override_reserved() -> None:
    metrics = ProcessMetrics(
        "task-executor",
        "te-1",
        Lag(),
        extra_labels={"cluster": "prod", "role": "x", "instance": "y"},
        zookeeper=ZooKeeperStateHolder(),
    )
    text = metrics.render().decode()
    assert 'sparkmill_event_loop_lag_max_seconds{cluster="prod",role="task-executor"} 0.25' in text
    assert (
        'sparkmill_high_availability_mode{cluster="prod",mode="none",role="task-executor"} 1.0'
        in text
    )
    assert "zookeeper" not in text  # standalone: not applicable
    assert "_created" not in text


def test_zookeeper_state_is_exported_once_enabled_and_losses_are_counted() -> None:
    holder = ZooKeeperStateHolder()
    metrics = ProcessMetrics("dispatcher", "d-1", Lag(), ha_mode="zookeeper", zookeeper=holder)
    assert "zookeeper_connected" not in metrics.render().decode()
    holder.enable()
    assert value(metrics.exposition, "sparkmill_zookeeper_connected", role="dispatcher") == 0
    holder.set("CONNECTED")
    holder.set(ZooKeeperConnectionState.SUSPENDED)
    holder.set("connected")
    assert holder.connected
    assert value(metrics.exposition, "sparkmill_zookeeper_connected", role="dispatcher") == 1
    assert (
        value(metrics.exposition, "sparkmill_zookeeper_connection_losses_total", role="dispatcher")
        == 1
    )


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_exposition_with_every_shared_metric() -> None:
    holder = ZooKeeperStateHolder()
    holder.set("CONNECTED")
    metrics = ProcessMetrics("resource-manager", "rm", Lag(), ha_mode="zookeeper", zookeeper=holder)
    metrics.rpc.declare("sparkmill.v1.ResourceManagerGateway", ["RequestSlot"])
    metrics.rpc.on_request("sparkmill.v1.ResourceManagerGateway", "RequestSlot", "OK", 0.01)
    metrics.rpc.on_malformed("bad magic: xyz")
    text = metrics.render()
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_retained_counter_and_expiring_keys() -> None:
    counter = RetainedCounter()
    assert counter.value([1, 2]) == 3
    counter.retire(2)
    assert counter.value([1]) == 3
    keys = ExpiringKeys(retention_s=10)
    keys.touch("a", now=0)
    keys.touch("b", now=0)
    assert keys.expired(["b"], now=5) == []
    assert keys.expired([], now=11) == ["a"]
    assert keys.expired([], now=16) == ["b"]


def test_http_endpoint_serves_metrics_on_the_loop() -> None:
    async def scenario() -> tuple[bytes, bytes, bytes]:
        server = MetricsHttpServer(lambda: b"sparkmill_x 1\n", "127.0.0.1", 0)
        url = await server.start()
        assert url == f"http://127.0.0.1:{server.port}/metrics"

        async def get(path: str) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            await writer.drain()
            reply = await reader.read()
            writer.close()
            return reply

        replies = (await get("/metrics"), await get("/nope"), await get("/metrics?x=1"))
        await server.stop()
        assert server.scrapes_total == 2
        return replies

    metrics, missing, with_query = asyncio.run(scenario())
    assert metrics.startswith(b"HTTP/1.1 200 OK\r\n")
    assert f"Content-Type: {CONTENT_TYPE}".encode() in metrics
    assert metrics.endswith(b"\r\n\r\nsparkmill_x 1\n")
    assert missing.startswith(b"HTTP/1.1 404")
    assert with_query.endswith(b"sparkmill_x 1\n")


def test_a_slow_render_does_not_block_the_event_loop() -> None:
    # A huge page takes time to render; the service's loop (heartbeats!) must keep running.
    import time

    def slow_render() -> bytes:
        time.sleep(0.6)
        return b"sparkmill_x 1\n"

    async def scenario() -> tuple[bytes, int]:
        server = MetricsHttpServer(slow_render, "127.0.0.1", 0)
        await server.start()
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        ticker = asyncio.create_task(tick())
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        reply = await reader.read()
        writer.close()
        ticker.cancel()
        await server.stop()
        return reply, ticks

    reply, ticks = asyncio.run(scenario())
    assert reply.endswith(b"sparkmill_x 1\n")
    assert ticks >= 6  # ~12 expected in 0.6 s; a render on the loop would give at most 1


def test_a_failing_render_answers_500_and_keeps_serving() -> None:
    calls = 0

    def flaky() -> bytes:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("a collector bug")
        return b"sparkmill_x 1\n"

    async def scenario() -> list[bytes]:
        server = MetricsHttpServer(flaky, "127.0.0.1", 0)
        await server.start()
        replies = []
        for _ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            replies.append(await reader.read())
            writer.close()
        await server.stop()
        return replies

    failed, served = asyncio.run(scenario())
    assert failed.startswith(b"HTTP/1.1 500")
    assert served.endswith(b"sparkmill_x 1\n")


# -- resource manager ---------------------------------------------------------------------------


def test_slot_manager_reports_how_long_a_served_request_waited() -> None:
    timers = ManualTimerService()
    actions = RecordingActions()
    waits: list[float] = []
    sm = SlotManager(timers, actions, 30.0, 60.0, on_request_served=waits.append)
    profile = ResourceProfile(1.0, 1024)
    request = SlotRequest(new_job_id(), new_allocation_id(), profile, "jm")
    assert sm.register_slot_request(request)  # no task executor yet: it waits
    timers.advance(4.0)
    report = SlotReport((SlotStatus(0, profile),))
    registration = TaskExecutorRegistration(
        new_resource_id(), "te", 1, profile, profile, common_pb2.ServiceInfo()
    )
    sm.register_task_executor(new_instance_id(), registration, report)
    timers.advance(1.0)
    _, slot_id, _ = actions.allocations[-1]
    assert sm.on_allocation_result(request.allocation_id, slot_id, None)
    assert waits == [5.0]


def test_resource_manager_collector_reads_slot_counts_and_leadership() -> None:
    counts = {SlotState.FREE: 3, SlotState.PENDING: 1, SlotState.ALLOCATED: 4}
    rm = TestingResourceManagerState(
        active_workers=None,  # resourcemanager.driver: none
        task_executors={"a": 1, "b": 2},
        job_masters={"j": 1},
        te_heartbeats=TestingHeartbeats(timeouts_total=3),
        slot_manager=TestingSlotView(counts, pending_requests=2),
    )
    collector = rm.collector()
    assert value(collector, "sparkmill_leader") == 1
    assert value(collector, "sparkmill_resource_manager_task_executors") == 2
    assert value(collector, "sparkmill_resource_manager_slots", state="free") == 3
    assert value(collector, "sparkmill_resource_manager_slots", state="pending") == 1
    assert value(collector, "sparkmill_resource_manager_slots", state="allocated") == 4
    assert value(collector, "sparkmill_resource_manager_pending_slot_requests") == 2
    assert value(collector, "sparkmill_heartbeat_timeouts_total", peer="task-executor") == 3
    rm.session_id, rm.slot_manager = None, None  # a standby has no slot view
    names = {name for name, _ in samples(collector)}
    assert value(collector, "sparkmill_leader") == 0
    assert "sparkmill_resource_manager_slots" not in names


# -- task executor ------------------------------------------------------------------------------


def _task(job: str, vertex: str, attempt: str) -> Any:
    return SimpleNamespace(tdd=SimpleNamespace(job_id=job, vertex_name=vertex, attempt_id=attempt))


def _te(services: dict[str, object] | None = None) -> Any:
    return SimpleNamespace(
        slot_table=None,
        rm_link=SimpleNamespace(is_registered=True),
        task_services=services or {},
        heartbeats=SimpleNamespace(timeouts_total=1),
    )


def test_task_executor_collector_counts_attempts_by_job_and_vertex_and_drops_ended_jobs() -> None:
    retention = ExpiringKeys(retention_s=0.0)
    collector = TaskExecutorCollector(_te(), retention)
    a, b = _task("j1", "map", "a1"), _task("j1", "map", "a2")
    collector.on_task_state(a, ES.INITIALIZING, None, None)
    collector.on_task_state(a, ES.RUNNING, None, None)
    collector.on_task_state(a, ES.FINISHED, None, TaskOutcome(IOCounters(10, 5, 100, 50)))
    collector.on_task_state(b, ES.FAILED, None, None)  # failed before it was seen running
    labels = {"job_id": "j1", "vertex": "map"}
    retention.retention_s = 3600
    assert value(collector, "sparkmill_task_attempts_started_total", **labels) == 2
    assert value(collector, "sparkmill_task_attempts_finished_total", **labels) == 1
    assert value(collector, "sparkmill_task_attempts_failed_total", **labels) == 1
    assert value(collector, "sparkmill_task_attempts_canceled_total", **labels) == 0
    assert value(collector, "sparkmill_task_records_in_total", **labels) == 10
    assert value(collector, "sparkmill_task_bytes_out_total", **labels) == 50
    assert value(collector, "sparkmill_task_executor_registered") == 1
    assert value(collector, "sparkmill_spark_session_up") == 0
    retention.retention_s = 0.0
    assert value(collector, "sparkmill_task_attempts_started_total", **labels) is None


def test_spark_session_up_is_read_defensively() -> None:
    class Broken:
        @property
        def is_up(self) -> bool:
            raise RuntimeError("boom")

    assert not spark_session_up({"x": object(), "y": Broken()})
    assert spark_session_up({"spark": SimpleNamespace(is_up=True)})
    assert spark_session_up({"spark": SimpleNamespace(is_up=lambda: True)})


# -- job master ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _job_master(graph: ExecutionGraph, restarts: int = 0) -> Any:
    return SimpleNamespace(
        job_id=graph.job_id,
        job_graph=graph.job_graph,
        status=JobStatus.RUNNING,
        scheduler=SimpleNamespace(
            restarts=restarts,
            speculation=SimpleNamespace(
                attempts_started={"v": 3},
                attempts_won={"v": 2},
                blocklist=SimpleNamespace(until={"te-slow": 1e12}),
            ),
        ),
        graph=graph,
        submitted_at=50.0,
        ended_at=0.0,
        heartbeats=SimpleNamespace(timeouts_total=2),
        session_id="leader-session",
    )


def test_job_master_collector_reads_jobs_and_observes_latencies_once() -> None:
    clock = Clock()
    graph = ExecutionGraph.build(
        noop_pipeline("demo", parallelism=2).build_job_graph(), clock=clock
    )
    process = SimpleNamespace(job_masters={}, dispatcher=None)
    registry = CollectorRegistry()
    scheduling = Histogram("s_seconds", "s", registry=registry)
    deployment = Histogram("d_seconds", "d", registry=registry)
    collector = JobMasterCollector(cast(Any, process), scheduling, deployment, retention_s=60)
    process.job_masters = _JobMasters({}, collector.track)
    jm = _job_master(graph, restarts=1)
    process.job_masters[graph.job_id] = jm
    executions = [v.current_execution for v in graph.all_execution_vertices()]
    for execution in executions:
        execution.transition_to(ES.SCHEDULED)
    clock.now += 2
    for execution in executions:
        execution.transition_to(ES.DEPLOYING)
    clock.now += 0.5
    executions[0].transition_to(ES.INITIALIZING)
    executions[0].transition_to(ES.RUNNING)
    job = {"job_id": graph.job_id}
    assert value(collector, "sparkmill_job_tasks", state="RUNNING", **job) == 1
    assert value(collector, "sparkmill_job_tasks", state="DEPLOYING", **job) == 1
    assert value(collector, "sparkmill_job_restarts_total", **job) == 1
    assert value(collector, "sparkmill_job_speculative_attempts_total", **job) == 3
    assert value(collector, "sparkmill_job_speculative_wins_total", **job) == 2
    assert value(collector, "sparkmill_job_blocked_task_executors", **job) == 1
    assert value(collector, "sparkmill_job_status", job_name="demo", status="RUNNING", **job) == 1
    assert value(collector, "sparkmill_job_master_jobs", status="RUNNING") == 1
    assert value(collector, "sparkmill_job_master_standby_jobs") == 0
    assert value(registry, "s_seconds_count") == 2 and value(registry, "s_seconds_sum") == 4.0
    assert value(registry, "d_seconds_count") == 1 and value(registry, "d_seconds_sum") == 0.5
    # The job ends and leaves the process between two scrapes: its last state stays visible.
    executions[1].transition_to(ES.INITIALIZING)
    executions[1].transition_to(ES.RUNNING)
    for execution in executions:
        execution.transition_to(ES.FINISHED)
    jm.status, jm.ended_at = JobStatus.FINISHED, 60.0
    del process.job_masters[graph.job_id]
    assert value(collector, "sparkmill_job_status", job_name="demo", status="FINISHED", **job) == 1
    assert value(collector, "sparkmill_job_running_time_seconds", **job) == 10.0
    assert value(collector, "sparkmill_job_tasks", state="FINISHED", **job) == 2
    assert value(registry, "d_seconds_count") == 2 and value(registry, "s_seconds_count") == 2
    assert value(collector, "sparkmill_heartbeat_timeouts_total",
                 peer="task-executor-or-resource-manager") == 2  # fmt: skip
    collector.retention_s = 0.0
    assert value(collector, "sparkmill_job_tasks", state="FINISHED", **job) is None
    assert value(collector, "sparkmill_job_master_jobs", status="FINISHED") == 0
    assert value(collector, "sparkmill_heartbeat_timeouts_total",
                 peer="task-executor-or-resource-manager") == 2  # fmt: skip


# -- dispatcher ---------------------------------------------------------------------------------


def test_dispatcher_collector_counts_each_ended_job_once() -> None:
    def job(job_id: str, status: JobStatus) -> Any:
        return SimpleNamespace(job_id=job_id, status=status)

    dispatcher = SimpleNamespace(
        session_id="s",
        submitted_total=3,
        jobs={"a": job("a", JobStatus.FINISHED), "b": job("b", JobStatus.RUNNING)},
        processes={"p": 1},
        heartbeats=SimpleNamespace(timeouts_total=0),
    )
    collector = DispatcherCollector(cast(Any, dispatcher))
    ended = "sparkmill_dispatcher_jobs_ended_total"
    assert value(collector, ended, status="FINISHED") == 1
    assert value(collector, ended, status="FINISHED") == 1  # not twice
    dispatcher.jobs["b"].status = JobStatus.FAILED
    del dispatcher.jobs["a"]  # expired
    assert value(collector, ended, status="FAILED") == 1
    assert value(collector, ended, status="FINISHED") == 1
    assert value(collector, "sparkmill_dispatcher_jobs", status="FAILED") == 1
    assert value(collector, "sparkmill_dispatcher_jobs_submitted_total") == 3
    assert value(collector, "sparkmill_dispatcher_job_master_processes") == 1
    assert value(collector, "sparkmill_leader") == 1


def test_task_executor_collector_shows_its_pipeline_worker() -> None:
    from sparkmill.common.v1 import pipeline_worker_pb2
    from sparkmill.services.taskexecutor.pipeline.link import SERVICE_KEY, PipelineWorkerLink

    te = _te()
    collector = TaskExecutorCollector(te)
    assert value(collector, "sparkmill_pipeline_worker_up") is None  # no data plane here
    link = PipelineWorkerLink(pipeline_worker_pb2.PipelineWorkerSetup())
    te.task_services[SERVICE_KEY] = link
    assert value(collector, "sparkmill_pipeline_worker_up") == 0
    link.starts_total, link.losses_total = 3, 2
    assert value(collector, "sparkmill_pipeline_worker_starts_total") == 3
    assert value(collector, "sparkmill_pipeline_worker_losses_total") == 2
    link.session_up = True  # without a connected worker the session is not up either
    assert value(collector, "sparkmill_spark_session_up") == 0
