"""Wires the Prometheus metrics of one service process (called by :mod:`services.entrypoint`).

See ``docs/monitoring.md`` for every metric and :mod:`common.metrics` for the shared parts.
"""

from __future__ import annotations

import logging

from sparkmill.common import config_options as opt
from sparkmill.common.actor import ServiceRuntime
from sparkmill.common.config import Configuration
from sparkmill.common.metrics import MetricsHttpServer, ProcessMetrics
from sparkmill.common.settings import ClusterSettings
from sparkmill.services.base import ServiceIdentity
from sparkmill.services.dispatcher import metrics as dispatcher_metrics
from sparkmill.services.dispatcher.dispatcher import Dispatcher
from sparkmill.services.jobmaster import metrics as job_master_metrics
from sparkmill.services.jobmaster.service import JobMasterProcess
from sparkmill.services.resourcemanager import metrics as resource_manager_metrics
from sparkmill.services.resourcemanager.resource_manager import ResourceManager
from sparkmill.services.taskexecutor import metrics as task_executor_metrics
from sparkmill.services.taskexecutor.task_executor import TaskExecutor

log = logging.getLogger(__name__)

Service = Dispatcher | ResourceManager | JobMasterProcess | TaskExecutor


def process_metrics(
    identity: ServiceIdentity, runtime: ServiceRuntime, config: Configuration
) -> ProcessMetrics:
    return ProcessMetrics(
        identity.role,
        identity.id,
        runtime,
        ha_mode=config.get(opt.HA_MODE),
        extra_labels=config.prefixed(opt.METRICS_LABELS),
        started_at=identity.started_at,
    )


def register_service(service: Service, metrics: ProcessMetrics) -> None:
    """Add the service's own collectors and start its RPC series at 0."""
    metrics.rpc.declare(service.SERVICE, service.METHODS)
    if isinstance(service, Dispatcher):
        dispatcher_metrics.register(service, metrics)
    elif isinstance(service, ResourceManager):
        resource_manager_metrics.register(service, metrics)
    elif isinstance(service, JobMasterProcess):
        job_master_metrics.register(service, metrics)
    else:
        task_executor_metrics.register(service, metrics)


async def start_endpoint(
    metrics: ProcessMetrics, settings: ClusterSettings, identity: ServiceIdentity
) -> MetricsHttpServer | None:
    """Serve ``/metrics`` (before the service registers anywhere: its ServiceInfo carries the
    URL). A port that cannot be bound is logged as an error; the service runs on without it."""
    if not settings.metrics_enabled:
        return None
    server = MetricsHttpServer(metrics.render, settings.metrics_bind_host, settings.metrics_port)
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
