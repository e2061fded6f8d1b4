"""Process-wide facilities a task executor offers its tasks (``TaskContext.services``).

The control plane needs none; the data plane installs the link to its pipeline worker here
(``services["pipeline-worker"]``, see :mod:`sparkmill.services.taskexecutor.pipeline`): the
process that runs pipeline code, with the Spark session, as a user of its own. The hooks are
called on the task executor's event loop; anything slow runs in the background (the loop must
keep answering heartbeats): the worker starts on its own thread and stops on the runtime's
blocking pool.
"""

from __future__ import annotations

from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.common.v1 import pipeline_worker_pb2 as pw
from sparkmill.services.taskexecutor.pipeline.link import SERVICE_KEY, PipelineWorkerLink


def install_task_services(
    services: dict[str, object], settings: ClusterSettings, runtime: ServiceRuntime
) -> None:
    """Called once when the task executor starts."""
    setup = pw.PipelineWorkerSetup(
        task_executor=runtime.name,
        spark_master=settings.spark_master,
        spark_conf={str(k): str(v) for k, v in dict(settings.spark_conf or {}).items()},
        spark_ui_enabled=settings.spark_ui_enabled,
        warm_up=settings.spark_session_warm_up,
        # Each slot is a FAIR pool (and so is each lane of a task without a slot index).
        slots=settings.number_of_slots,
        start_eagerly=settings.spark_session_start == "eager",
        app_name=f"sparkmill-{runtime.name}",
    )
    link = PipelineWorkerLink(
        setup,
        socket_path=settings.pipeline_worker_socket,
        user=settings.pipeline_worker_user,
        exchange_dir=settings.exchange_dir,
        resource_id=runtime.name,
        log_lines=lambda attempt_id, line: _attempt_line(services, attempt_id, line),
    )
    services[SERVICE_KEY] = link
    if settings.spark_session_start == "eager":
        link.start()  # a background thread: the worker's JVM takes ~10 s to come up


def _attempt_line(services: dict[str, object], attempt_id: str, line: str) -> bool:
    from sparkmill.services.taskexecutor.attempt_logs import AttemptLogStore

    store = services.get("attempt-logs")
    return isinstance(store, AttemptLogStore) and store.write_forwarded_line(attempt_id, line)


async def close_task_services(services: dict[str, object], runtime: ServiceRuntime) -> None:
    """Called once when the task executor stops, after its tasks ended."""
    link = services.pop(SERVICE_KEY, None)
    if isinstance(link, PipelineWorkerLink):
        await runtime.run_blocking(link.stop)


def spark_ui_url(services: dict[str, object]) -> str:
    """The Spark UI of the pipeline worker's session, once it is up with its UI on (else "")."""
    link = services.get(SERVICE_KEY)
    return link.ui_url if isinstance(link, PipelineWorkerLink) else ""
