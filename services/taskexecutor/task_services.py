"""Process-wide facilities a task executor offers its tasks (``TaskContext.services``).

The control plane needs none; the data plane installs its per-process SparkSession here. The
hooks are called on the task executor's event loop; anything slow must run in the background
(the loop must keep answering heartbeats).
"""

from __future__ import annotations

from common.actor import ServiceRuntime
from common.settings import ClusterSettings


def install_task_services(
    services: dict[str, object], settings: ClusterSettings, runtime: ServiceRuntime
) -> None:
    """Called once when the task executor starts."""


async def close_task_services(services: dict[str, object], runtime: ServiceRuntime) -> None:
    """Called once when the task executor stops, after its tasks ended."""
