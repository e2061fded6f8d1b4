"""A TaskExecutor for unit tests: no resource manager to find, a started slot table."""

from __future__ import annotations

from typing import TypeVar

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.ha.leader import LeaderInfo, LeaderListener, LeaderRetrievalService
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.runtime.settings import settings_from_config
from sparkmill.common.runtime.timers import AsyncioTimerService
from sparkmill.services.taskexecutor.slot_table import TaskSlotTable
from sparkmill.services.taskexecutor.table_actions import TableActions
from sparkmill.services.taskexecutor.task_executor import TaskExecutor

TE = TypeVar("TE", bound=TaskExecutor)


class NoLeaderRetrieval(LeaderRetrievalService):
    """Never names a resource manager leader: the task executor registers nowhere."""

    __test__ = False

    async def start(self, listener: LeaderListener) -> None:
        pass

    async def stop(self) -> None:
        pass

    def current(self) -> LeaderInfo | None:
        return None


def task_executor_with_slots(kind: type[TE], slots: int, clients: RpcClientPool) -> TE:
    """A ``kind`` (TaskExecutor or a testing subclass) ``te-1`` with ``slots`` free slots;
    call inside a running loop (the slot table's timers use it)."""
    config = Configuration.from_mapping({"taskmanager.numberOfTaskSlots": str(slots)})
    te = kind(
        settings_from_config(config),
        ServiceRuntime("te-test"),
        NoLeaderRetrieval(),
        clients,
        ServiceIdentity("task-executor", "te-1", address="tcp://127.0.0.1:9"),
    )
    te.slot_table = TaskSlotTable(
        slots, te.total_resources, te.default_slot_profile, AsyncioTimerService()
    )
    te.slot_table.start(TableActions(te))
    return te
