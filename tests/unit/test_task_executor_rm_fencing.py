"""Which resource manager a task executor obeys while its registration is under way: the
leader it registers with may already ask for a slot (it does so as soon as it has taken the
registration, which can be before its answer got here); nobody else may, and a disconnect
waits for the registration's end."""

from __future__ import annotations

import asyncio

import pytest

from sparkmill.common.core.errors import NotLeaderError
from sparkmill.common.ha.leader import LeaderInfo
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.v1.gateways import TASKEXECUTORGATEWAY_METHODS
from sparkmill.services.taskexecutor.resource_manager_link import _Connection
from sparkmill.services.taskexecutor.task_executor import TaskExecutor
from tests.unit.task_executor_harness import task_executor_with_slots

LEADER = LeaderInfo("tcp://127.0.0.1:7", "rm-session")


def _token(te: TaskExecutor, method: str) -> str:
    spec = TASKEXECUTORGATEWAY_METHODS[method]
    return te.expected_fencing_token(spec, spec.request_type())


def test_the_leader_being_registered_with_may_ask_for_slots_but_not_disconnect() -> None:
    async def main() -> None:
        clients = RpcClientPool("test")
        try:
            te = task_executor_with_slots(TaskExecutor, 1, clients)
            for method in ("RequestSlot", "HeartbeatFromResourceManager"):
                with pytest.raises(NotLeaderError):  # no resource manager known at all
                    _token(te, method)
            # Registering: the leader's session fences what it may already ask.
            te.rm_link.connection = _Connection(LEADER, client=None)  # type: ignore[arg-type]
            assert _token(te, "RequestSlot") == LEADER.session_id
            assert _token(te, "HeartbeatFromResourceManager") == LEADER.session_id
            with pytest.raises(NotLeaderError):
                _token(te, "DisconnectResourceManager")
            # Registered: everything.
            te.rm_link.connection.instance_id = "instance-1"
            assert _token(te, "DisconnectResourceManager") == LEADER.session_id
        finally:
            await clients.close()

    asyncio.run(main())
