"""Unit tests: the job-master process watches the dispatcher's heartbeats and registers again
when they stop (a dispatcher that stayed leader but dropped the process, e.g. after a network
partition, would otherwise never hear from it again)."""

from __future__ import annotations

import asyncio
from typing import Any

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.runtime.settings import settings_from_config
from sparkmill.common.v1 import common_pb2
from sparkmill.services.jobmaster.service import DISPATCHER_HEARTBEAT_TARGET, JobMasterProcess
from tests.unit.job_master_process_harness import TestingHa


class RecordingProcess(JobMasterProcess):
    """Counts registrations instead of calling a dispatcher (each one counts as accepted)."""

    registrations = 0

    async def _register_at_dispatcher(self, connection: Any) -> None:
        self.registrations += 1
        connection.registered = True
        self.heartbeats.monitor(DISPATCHER_HEARTBEAT_TARGET)


def _run(heartbeating: bool) -> int:
    async def main() -> int:
        config = Configuration.from_mapping(
            {"heartbeat.interval": "100 ms", "heartbeat.timeout": "400 ms"}
        )
        runtime = ServiceRuntime("jm-process-test")
        process = RecordingProcess(
            settings_from_config(config),
            config,
            runtime,
            TestingHa(),  # type: ignore[arg-type]
            RpcClientPool("test"),
            ServiceIdentity("job-master", "jm-process-1", address="tcp://127.0.0.1:8"),
        )
        try:
            await process.start()
            for _ in range(12):  # 1.2 s: three heartbeat timeouts
                await asyncio.sleep(0.1)
                if heartbeating:
                    await process.heartbeat_from_dispatcher(
                        common_pb2.HeartbeatRequest(sender_id="dispatcher-1"),
                        None,  # type: ignore[arg-type]
                    )
            return process.registrations
        finally:
            await process.stop()
            await runtime.close()

    return asyncio.run(main())


def test_a_heartbeated_process_registers_once() -> None:
    assert _run(heartbeating=True) == 1


def test_a_process_the_dispatcher_stopped_heartbeating_registers_again() -> None:
    assert _run(heartbeating=False) >= 2
