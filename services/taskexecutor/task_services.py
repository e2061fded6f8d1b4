"""Process-wide facilities a task executor offers its tasks (``TaskContext.services``).

The control plane needs none; the data plane installs its per-process SparkSession manager
here (``services["spark"]``, see :mod:`sparkmill.services.taskexecutor.spark.session`). The hooks
are called on the task executor's event loop; anything slow runs in the background (the loop must
keep answering heartbeats): the session starts on its own thread and stops on the runtime's
blocking pool.
"""

from __future__ import annotations

from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.services.taskexecutor.spark.session import SERVICE_KEY, SparkSessionManager


def install_task_services(
    services: dict[str, object], settings: ClusterSettings, runtime: ServiceRuntime
) -> None:
    """Called once when the task executor starts."""
    # spark.ui.enabled and the free-form spark.conf.* keys, once ClusterSettings carries them.
    ui_enabled = bool(getattr(settings, "spark_ui_enabled", False))
    conf = {str(k): str(v) for k, v in dict(getattr(settings, "spark_conf", {}) or {}).items()}
    manager = SparkSessionManager(
        settings.spark_master,
        app_name=f"sparkmill-{runtime.name}",
        ui_enabled=ui_enabled,
        conf=conf,
        warm_up=settings.spark_session_warm_up,
        # Each slot is a FAIR pool (and so is each lane of a task without a slot index).
        slots=settings.number_of_slots,
    )
    services[SERVICE_KEY] = manager
    if settings.spark_session_start == "eager":
        manager.start()  # a background thread: the JVM takes ~10 s to come up


async def close_task_services(services: dict[str, object], runtime: ServiceRuntime) -> None:
    """Called once when the task executor stops, after its tasks ended."""
    manager = services.pop(SERVICE_KEY, None)
    if isinstance(manager, SparkSessionManager):
        await runtime.run_blocking(manager.stop)


def spark_ui_url(services: dict[str, object]) -> str:
    """The Spark UI of this process's session, once it is up with its UI on (else "")."""
    manager = services.get(SERVICE_KEY)
    return manager.ui_url if isinstance(manager, SparkSessionManager) else ""
