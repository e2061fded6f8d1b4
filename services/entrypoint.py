"""Run one service process in the foreground: ``sparkmill <role> --config FILE``.

This is what a systemd unit (or ``local-cluster up``) starts. The configuration is validated
before anything binds a port; a bad key ends the process with exit code 2 and a message that
names it. The process then serves until SIGTERM/SIGINT and stops in order.
"""

from __future__ import annotations

import asyncio
import cProfile
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.core.ids import new_resource_id
from sparkmill.common.ha.factory import create_ha_services
from sparkmill.common.ha.services import HighAvailabilityServices
from sparkmill.common.rpc.addresses import RpcEndpoints, rpc_endpoints
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.security import INSECURE_WARNING, security_from_config
from sparkmill.common.rpc.server import RpcServer
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.logs import configure_process_logging
from sparkmill.common.runtime.metrics import MetricsHttpServer, ProcessMetrics
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.runtime.settings import ClusterSettings, settings_from_config

if TYPE_CHECKING:
    from sparkmill.services.dispatcher.dispatcher import Dispatcher
    from sparkmill.services.dispatcher.rest_service import RestEndpoint
    from sparkmill.services.jobmaster.service import JobMasterProcess
    from sparkmill.services.resourcemanager.resource_manager import ResourceManager
    from sparkmill.services.taskexecutor.task_executor import TaskExecutor

    Service = Dispatcher | ResourceManager | JobMasterProcess | TaskExecutor

# A process imports its own service's package only (in _build and _register_metrics): the other
# three cost 0.1-0.2 s of CPU at every start, which a cold `sparkmill run` pays in each of its
# processes while the Spark JVM starts on the same cores.

EXIT_CONFIG_ERROR = 2
# Set to a directory, every service process profiles its event loop thread with cProfile and
# writes ``{role}-{pid}.prof`` there when it stops (benchmarks/profile_control_plane.py).
PROFILE_DIR_ENV = "SPARKMILL_PROFILE_DIR"

log = logging.getLogger("sparkmill")


def configure_logging(level: str) -> None:
    configure_process_logging(level)


def run_service(role: str, config_path: Path, overrides: dict[str, str] | None = None) -> int:
    try:
        config = Configuration.load(config_path)
        if overrides:
            config = config.with_overrides(overrides, source="-D")
        settings = settings_from_config(config)
    except ConfigurationError as exc:
        print(f"sparkmill {role}: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    configure_logging(settings.log_level)
    try:
        return _run_loop(role, settings, config)
    except ConfigurationError as exc:
        print(f"sparkmill {role}: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR


def _run_loop(role: str, settings: ClusterSettings, config: Configuration) -> int:
    profile_dir = os.environ.get(PROFILE_DIR_ENV)
    if not profile_dir:
        return asyncio.run(_serve(role, settings, config))
    # Only the loop's thread: that is where a service's control-plane time goes.
    profiler = cProfile.Profile(time.thread_time)  # CPU time: immune to a busy machine
    try:
        result: int = profiler.runcall(asyncio.run, _serve(role, settings, config))
        return result
    finally:
        profiler.dump_stats(Path(profile_dir) / f"{role}-{os.getpid()}.prof")


def run_pipeline_worker(argv: list[str]) -> int:
    """``sparkmill pipeline-worker``: a task executor's pipeline code, in a process of its own."""
    from sparkmill.services.taskexecutor.pipeline.worker import main

    return main(argv)


def rpc_endpoints_of(role: str, settings: ClusterSettings) -> RpcEndpoints:
    """Where ``role``'s RPC server binds and what it advertises; a wildcard advertised address
    is a configuration error (raised before anything starts)."""
    option, advertised = {
        "dispatcher": (opt.DISPATCHER_RPC_ADDRESS, settings.dispatcher_address),
        "resource-manager": (opt.RESOURCE_MANAGER_RPC_ADDRESS, settings.resource_manager_address),
        "job-master": (opt.JOB_MASTER_RPC_ADDRESS, settings.job_master_bind_address),
        "task-executor": (opt.TASK_MANAGER_RPC_ADDRESS, settings.task_executor_bind_address),
    }[role]
    return rpc_endpoints(option.key, advertised, settings.bind_host)


def _build(
    role: str,
    settings: ClusterSettings,
    config: Configuration,
    runtime: ServiceRuntime,
    ha: HighAvailabilityServices,
    clients: RpcClientPool,
    identity: ServiceIdentity,
) -> Service:
    if role == "dispatcher":
        from sparkmill.services.dispatcher.attempt_logs import TaskExecutorLogs
        from sparkmill.services.dispatcher.dispatcher import Dispatcher

        return Dispatcher(
            settings,
            runtime,
            ha.dispatcher_election(),
            ha.job_graph_store(identity.id),
            ha.job_result_store(),
            clients,
            identity,
            ha.job_master_contenders,
            ha.job_leader,
            TaskExecutorLogs(clients, ha.resource_manager_retrieval()),
        )
    if role == "resource-manager":
        from sparkmill.services.resourcemanager.drivers import create_worker_driver
        from sparkmill.services.resourcemanager.resource_manager import ResourceManager

        return ResourceManager(
            settings,
            runtime,
            ha.resource_manager_election(),
            clients,
            identity,
            ha.job_leader_retrieval_factory(),
            create_worker_driver(settings, runtime, config),
        )
    if role == "job-master":
        from sparkmill.services.jobmaster.service import JobMasterProcess

        return JobMasterProcess(settings, config, runtime, ha, clients, identity)
    from sparkmill.services.taskexecutor.task_executor import TaskExecutor

    return TaskExecutor(
        settings,
        runtime,
        ha.resource_manager_retrieval(),
        clients,
        identity,
        ha.job_leader_retrieval_factory(),
    )


def _process_metrics(
    identity: ServiceIdentity, runtime: ServiceRuntime, settings: ClusterSettings
) -> ProcessMetrics:
    return ProcessMetrics(
        identity.role,
        identity.id,
        runtime,
        ha_mode=settings.ha_mode,
        extra_labels=settings.metrics_labels,
        started_at=identity.started_at,
    )


def _register_metrics(service: Service, metrics: ProcessMetrics) -> None:
    """Add the service's own collectors (each service package wires its own) and start its RPC
    series at 0. This module is the one place that knows every service."""
    metrics.rpc.declare(service.SERVICE, service.METHODS)
    role = metrics.role
    if role == "dispatcher":
        from sparkmill.services.dispatcher import metrics as dispatcher_metrics

        dispatcher_metrics.register(cast("Dispatcher", service), metrics)
    elif role == "resource-manager":
        from sparkmill.services.resourcemanager import metrics as resource_manager_metrics

        resource_manager_metrics.register(cast("ResourceManager", service), metrics)
    elif role == "job-master":
        from sparkmill.services.jobmaster import metrics as job_master_metrics

        job_master_metrics.register(cast("JobMasterProcess", service), metrics)
    else:
        from sparkmill.services.taskexecutor import metrics as task_executor_metrics

        task_executor_metrics.register(cast("TaskExecutor", service), metrics)


async def _start_metrics_endpoint(
    metrics: ProcessMetrics, settings: ClusterSettings, identity: ServiceIdentity
) -> MetricsHttpServer | None:
    """Serve ``/metrics`` (before the service registers anywhere: its ServiceInfo carries the
    URL). A port that cannot be bound is logged as an error; the service runs on without it."""
    if not settings.metrics_enabled:
        return None
    server = MetricsHttpServer(
        metrics.render,
        settings.metrics_bind_host,
        settings.metrics_port,
        advertised_host=settings.metrics_address,
    )
    try:
        identity.metrics_url = await server.start()
    except OSError as exc:
        log.error(
            "%s: cannot serve metrics on %s:%d (metrics.bind-host / metrics.port): %s",
            identity.role,
            settings.metrics_bind_host,
            settings.metrics_port,
            exc,
        )
        return None
    log.info("%s %s metrics at %s", identity.role, identity.id[:8], identity.metrics_url)
    return server


async def _refuse_foreign_coordination_data(
    ha: HighAvailabilityServices, runtime: ServiceRuntime
) -> None:
    problem = await ha.verify()
    if problem is not None:
        runtime.fail_fatally(problem, EXIT_CONFIG_ERROR)


async def _serve(role: str, settings: ClusterSettings, config: Configuration) -> int:
    """Run one service until it is told to stop; the process's exit code."""
    identity_id = (settings.task_executor_resource_id if role == "task-executor" else "") or (
        new_resource_id()
    )
    identity = ServiceIdentity(role, identity_id)
    endpoints = rpc_endpoints_of(role, settings)
    # Keys first: a missing or world-readable key file ends the process before it binds a port.
    security = security_from_config(config, role, serves=True)
    if not security.enabled:
        log.warning("%s %s: %s", role, identity_id[:8], INSECURE_WARNING)
    # Likewise the REST API's token file (a dispatcher's).
    rest_authorizer = None
    if role == "dispatcher":
        from sparkmill.services.dispatcher.rest_auth import authorizer_of

        rest_authorizer = authorizer_of(settings)
    runtime = ServiceRuntime(role)
    clients = RpcClientPool(
        f"{role} {identity_id[:8]}",
        max_message_bytes=settings.rpc_max_message_bytes,
        security=security,
    )
    ha = create_ha_services(settings, config, clients.get, role)
    await ha.start()
    metrics = _process_metrics(identity, runtime, settings)
    server = RpcServer(
        endpoints.bind,
        advertised_address=endpoints.advertised,
        name=role,
        max_message_bytes=settings.rpc_max_message_bytes,
        max_control_message_bytes=settings.rpc_max_control_message_bytes,
        max_in_flight_per_peer=settings.rpc_max_in_flight_per_peer,
        observer=metrics.rpc,
        security=security,
    )
    servicer = _build(role, settings, config, runtime, ha, clients, identity)
    server.add_servicer(servicer)
    _register_metrics(servicer, metrics)
    endpoint: MetricsHttpServer | None = None
    rest: RestEndpoint | None = None

    async def start() -> None:
        nonlocal endpoint, rest
        identity.address = await server.start()
        log.info("%s %s listening on %s", role, identity_id[:8], identity.address)
        endpoint = await _start_metrics_endpoint(metrics, settings, identity)
        if role == "dispatcher":  # before it announces itself: the URL is in its info
            from sparkmill.services.dispatcher.rest_service import start_rest_endpoint

            rest = await start_rest_endpoint(
                cast("Dispatcher", servicer), runtime, ha, clients, rest_authorizer
            )
            identity.rest_url = rest.url if rest is not None else ""
        await servicer.start()
        runtime.spawn(_refuse_foreign_coordination_data(ha, runtime), "verify HA")
        if role != "task-executor":  # task executors are listed by the resource manager
            runtime.spawn(
                ha.announce(role, identity_id, identity.info().SerializeToString()), "announce"
            )
        # What the process built to serve lives as long as it: out of every full collection.
        runtime.heap.freeze_startup()

    async def stop() -> None:
        if rest is not None:
            await rest.stop()
        await servicer.stop()
        await server.stop()
        await clients.close()
        await ha.close()
        if endpoint is not None:
            await endpoint.stop()

    await runtime.serve(start, stop)
    return runtime.exit_code
