"""Which :class:`~.worker_driver.WorkerDriver` the resource manager runs with
(``resourcemanager.driver``). ``none`` keeps the standalone behaviour: the resource manager
only uses the task executors it is given."""

from __future__ import annotations

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.services.resourcemanager.local_worker_driver import (
    LocalWorkerDriver,
    worker_dir_of,
)
from sparkmill.services.resourcemanager.systemd_worker_driver import systemd_worker_driver
from sparkmill.services.resourcemanager.worker_driver import WorkerDriver


def create_worker_driver(
    settings: ClusterSettings, runtime: ServiceRuntime, config: Configuration
) -> WorkerDriver | None:
    if settings.resource_manager_driver == "local":
        return LocalWorkerDriver(runtime, config, worker_dir_of(settings.local_worker_dir, config))
    if settings.resource_manager_driver == "systemd":
        return systemd_worker_driver(runtime, config, settings.number_of_slots)
    return None


__all__ = ["create_worker_driver"]
