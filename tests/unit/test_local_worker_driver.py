"""The ``local`` worker driver with real child processes: a task executor process is started
with a directory of its own, its start and its end are reported on the loop, a release stops
it, and closing the driver stops the ones left. No resource manager answers here (the task
executor keeps trying to register) and no Spark session starts (it would start lazily)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import yaml

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.ids import ResourceID
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.service_process import is_alive, running_workers, stop_workers
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.services.resourcemanager.active_workers import ActiveWorkerSettings
from sparkmill.services.resourcemanager.local_worker_driver import (
    LocalWorkerDriver,
    worker_dir_of,
)
from sparkmill.services.resourcemanager.worker_driver import WorkerSpec

SPEC = WorkerSpec(slots=3, cpu_cores=1.5, memory_mb=512)


class RecordedEvents:
    def __init__(self) -> None:
        self.events: list[tuple[str, ResourceID, str]] = []
        self.recovered: list[ResourceID] | None = None
        self.changed = asyncio.Event()

    def _note(self, kind: str, resource_id: ResourceID, text: str = "") -> None:
        self.events.append((kind, resource_id, text))
        self.changed.set()

    def on_worker_started(self, resource_id: ResourceID) -> None:
        self._note("started", resource_id)

    def on_worker_start_failed(self, resource_id: ResourceID, cause: str) -> None:
        self._note("failed", resource_id, cause)

    def on_worker_start_refused(self, resource_id: ResourceID, cause: str) -> None:
        self._note("refused", resource_id, cause)

    def on_worker_terminated(self, resource_id: ResourceID, diagnostics: str) -> None:
        self._note("terminated", resource_id, diagnostics)

    def on_previous_workers_recovered(self, resource_ids: list[ResourceID]) -> None:
        self.recovered = list(resource_ids)
        self._note("recovered", ResourceID(""), ",".join(resource_ids))

    async def wait_for(self, kind: str, resource_id: ResourceID, timeout_s: float = 30) -> str:
        async with asyncio.timeout(timeout_s):
            while True:
                for seen, rid, text in self.events:
                    if (seen, rid) == (kind, resource_id):
                        return text
                self.changed.clear()
                await self.changed.wait()


def _config() -> Configuration:
    return Configuration.from_mapping(
        {
            "resourcemanager.rpc-address": "tcp://127.0.0.1:1",
            "taskmanager.rpc-address": "tcp://127.0.0.1:0",
            "spark.session.start": "lazy",
            "metrics.enabled": False,
            "security.curve.enabled": False,
            "log.level": "INFO",
        }
    )


def test_a_worker_is_started_in_its_directory_released_and_reported(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime = ServiceRuntime("driver-test")
        driver = LocalWorkerDriver(runtime, _config(), tmp_path, stop_grace_s=10)
        events = RecordedEvents()
        driver.start(events)
        first, second = ResourceID("worker-a"), ResourceID("worker-b")
        driver.request_worker(first, SPEC)
        driver.request_worker(second, SPEC)
        assert events.events == []  # answers come later, never from inside the call
        await events.wait_for("started", first)
        await events.wait_for("started", second)

        directory = tmp_path / first
        written = yaml.safe_load((directory / "task-executor.yaml").read_text())
        assert written["taskmanager.resource-id"] == first
        assert int(written["taskmanager.numberOfTaskSlots"]) == 3
        assert written["spark.conf.spark.local.dir"] == str(directory / "spark-local")
        assert written["resourcemanager.driver"] == "none"
        pid = int((directory / "pid").read_text())
        assert is_alive(pid)
        log = directory / "task-executor.log"
        async with asyncio.timeout(30):  # it serves (and logs so) before it is released
            while "listening on" not in log.read_text():  # noqa: ASYNC110 (a file to poll)
                await asyncio.sleep(0.05)

        driver.release_worker(first)
        diagnostics = await events.wait_for("terminated", first)
        assert "exit code" in diagnostics and str(directory) in diagnostics
        assert not is_alive(pid)
        assert "stopping" in log.read_text()  # SIGTERM first: it stopped in order

        other = int((tmp_path / second / "pid").read_text())
        await driver.stop_all()
        assert not is_alive(other)
        # Closing is not an event: the resource manager asked for it.
        assert ("terminated", second, "") not in [(k, r, "") for k, r, _ in events.events]
        await runtime.close()

    asyncio.run(scenario())


def test_a_worker_released_while_it_is_being_started_is_stopped_once_it_runs(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        runtime = ServiceRuntime("driver-test")
        driver = LocalWorkerDriver(runtime, _config(), tmp_path, stop_grace_s=10)
        events = RecordedEvents()
        driver.start(events)
        rid = ResourceID("worker-early")
        driver.request_worker(rid, SPEC)
        driver.release_worker(rid)  # the fork has not happened yet
        await events.wait_for("started", rid)
        await events.wait_for("terminated", rid)
        assert running_workers(tmp_path) == {}
        await driver.stop_all()
        await runtime.close()

    asyncio.run(scenario())


def test_a_worker_that_cannot_be_started_is_reported_failed(tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime = ServiceRuntime("driver-test")
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("a file where the worker directory should go")
        driver = LocalWorkerDriver(runtime, _config(), blocker)
        events = RecordedEvents()
        driver.start(events)
        driver.request_worker(ResourceID("worker-x"), SPEC)
        cause = await events.wait_for("failed", ResourceID("worker-x"))
        assert "not-a-dir" in cause
        await driver.close()
        await runtime.close()

    asyncio.run(scenario())


def test_the_worker_dir_defaults_to_workers_next_to_the_configuration(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("resourcemanager.driver: local\n")
    assert worker_dir_of("", Configuration.load(path)) == tmp_path / "workers"
    assert worker_dir_of("/srv/w", Configuration.load(path)) == Path("/srv/w")


def test_workers_are_like_the_configured_task_executor() -> None:
    settings = ClusterSettings(
        number_of_slots=3, task_executor_cpu_cores=1.5, task_executor_memory_mb=512, max_slots=9
    )
    of = ActiveWorkerSettings.of(settings)
    assert of.spec == SPEC
    assert of.max_slots == 9


def test_a_second_driver_adopts_the_first_ones_running_worker(tmp_path: Path) -> None:
    """A resource manager that loses leadership leaves its workers running (in sessions of
    their own); the next leader's driver on this host finds them through their pid files,
    adopts them, learns of their end and can release them. ``stop_workers`` (what
    ``local-cluster down`` runs) stops the rest."""

    async def scenario() -> None:
        runtime = ServiceRuntime("driver-test")
        first = LocalWorkerDriver(runtime, _config(), tmp_path, stop_grace_s=10)
        first_events = RecordedEvents()
        first.start(first_events)
        await first_events.wait_for("recovered", ResourceID(""))
        assert first_events.recovered == []
        kept, ended = ResourceID("worker-kept"), ResourceID("worker-ended")
        for resource_id in (kept, ended):
            first.request_worker(resource_id, SPEC)
            await first_events.wait_for("started", resource_id)
        # A stale directory: its pid file names a live process that is not that worker.
        stale = tmp_path / "worker-stale"
        stale.mkdir()
        (stale / "pid").write_text(f"{os.getpid()}\n")
        (stale / "task-executor.yaml").write_text("{}\n")
        pids = {rid: int((tmp_path / rid / "pid").read_text()) for rid in (kept, ended)}
        assert all(os.getsid(pid) == pid for pid in pids.values())  # sessions of their own

        await first.close()  # leadership lost: nothing is stopped
        assert all(is_alive(pid) for pid in pids.values())

        second = LocalWorkerDriver(runtime, _config(), tmp_path, stop_grace_s=10)
        events = RecordedEvents()
        second.start(events)
        await events.wait_for("recovered", ResourceID(""))
        assert sorted(events.recovered or []) == sorted([kept, ended])
        os.kill(pids[ended], signal.SIGKILL)
        assert "worker-ended" in await events.wait_for("terminated", ended)
        second.release_worker(kept)
        await events.wait_for("terminated", kept)
        assert not is_alive(pids[kept])
        assert not [e for e in first_events.events if e[0] == "terminated"]  # closed: silent

        third = ResourceID("worker-third")
        second.request_worker(third, SPEC)
        await events.wait_for("started", third)
        assert await asyncio.to_thread(stop_workers, tmp_path, 10.0) == 1
        await events.wait_for("terminated", third)
        assert running_workers(tmp_path) == {}
        await second.stop_all()
        await runtime.close()

    asyncio.run(scenario())
