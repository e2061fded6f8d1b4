"""A service process loads its own service's package, not the other three."""

from __future__ import annotations

import subprocess
import sys

import pytest

PACKAGES = {
    "dispatcher": "sparkmill.services.dispatcher",
    "resource-manager": "sparkmill.services.resourcemanager",
    "job-master": "sparkmill.services.jobmaster",
    "task-executor": "sparkmill.services.taskexecutor",
}

# Builds the role's service (as a process does at start, with hand-made collaborators that are
# never called) and prints which service packages got imported.
PROBE = """
import sys
from sparkmill.services import entrypoint
role = sys.argv[1]
if role != "none":
    from sparkmill.common.config.configuration import Configuration
    from sparkmill.common.ha.services import StandaloneHaServices
    from sparkmill.common.rpc.client import RpcClientPool
    from sparkmill.common.runtime.actor import ServiceRuntime
    from sparkmill.common.runtime.service_base import ServiceIdentity
    from sparkmill.common.runtime.settings import settings_from_config

    config = Configuration()
    settings = settings_from_config(config)
    clients = RpcClientPool("probe")
    ha = StandaloneHaServices(settings, clients.get)
    entrypoint._build(
        role, settings, config, ServiceRuntime(role), ha, clients, ServiceIdentity(role, "x" * 32)
    )
print(" ".join(sorted({m.split(".")[2] for m in sys.modules if m.startswith("sparkmill.services.")
                       and m.count(".") >= 2})))
"""


def _imported(role: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, role], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def test_the_entrypoint_alone_imports_no_service() -> None:
    assert _imported("none") == {"entrypoint"}


@pytest.mark.parametrize("role", sorted(PACKAGES))
def test_a_role_imports_its_own_service_only(role: str) -> None:
    others = {PACKAGES[r].rsplit(".", 1)[1] for r in PACKAGES if r != role}
    imported = _imported(role)
    assert PACKAGES[role].rsplit(".", 1)[1] in imported, imported
    assert not imported & others, imported
