"""Hand-written fakes of the ``systemd`` worker driver's tests: :class:`FakeHosts`, what ssh would
reach (the active units per host, scripted failures, a clock); :class:`Recorder`, the driver's
events as the test awaits them; and :func:`run_scenario`, which runs a driver against both on a
fresh event loop and closes it after the test's scenario."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.ids import ResourceID
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.services.resourcemanager.systemd_worker_driver import (
    CommandResult,
    SystemdDriverSettings,
    SystemdWorkerDriver,
)


def driver_settings(**overrides: object) -> SystemdDriverSettings:
    values: dict[str, object] = {
        "resourcemanager.driver": "systemd",
        "resourcemanager.systemd.hosts": "te-1=4, te-2",
        "resourcemanager.systemd.slots-per-host": 2,
        "resourcemanager.systemd.ssh-known-hosts-file": "/etc/sparkmill/known_hosts",
        "resourcemanager.systemd.ssh-identity-file": "/etc/sparkmill/keys/rm_ssh",
        "resourcemanager.systemd.ssh-connect-timeout": "5 s",
        "resourcemanager.systemd.command-timeout": "20 s",
        "resourcemanager.systemd.check-interval": "50 ms",
        **overrides,
    }
    return SystemdDriverSettings.of(Configuration.from_mapping(values))


class FakeHosts:
    """What ssh would reach: per host, the active units; scripted failures. Called from the
    runtime's blocking threads, so it keeps a lock."""

    def __init__(self, hosts: tuple[str, ...] = ("te-1", "te-2")) -> None:
        self.active: dict[str, set[str]] = {host: set() for host in hosts}
        self.calls: list[tuple[list[str], float]] = []
        self.unreachable: set[str] = set()
        self.fail_start: CommandResult | None = None
        self.fail_stop = False
        self.start_runs_anyway = False  # a failing start (fail_start) still starts the unit
        self.start_gate: threading.Event | None = None  # a start waits for it before running
        self.now = 0.0  # the driver's clock: back-offs end only when a test moves it
        self._lock = threading.Lock()

    def clock(self) -> float:
        return self.now

    def remote(self, host: str) -> list[list[str]]:
        """The remote words of the calls to ``host``."""
        out = []
        for argv, _ in self.calls:
            cut = argv.index("--")
            if argv[cut + 1] == host:
                out.append(argv[cut + 2 :])
        return out

    def __call__(self, argv: list[str], timeout_s: float) -> CommandResult:
        gate = self.start_gate
        if gate is not None and argv[-2:-1] == ["start"]:
            assert gate.wait(5), "the start gate was never opened"
        with self._lock:
            self.calls.append((argv, timeout_s))
            assert argv[0] == "ssh"
            cut = argv.index("--")
            host, remote = argv[cut + 1], argv[cut + 2 :]
            if host in self.unreachable:
                return CommandResult(255, "", f"ssh: connect to host {host} port 22: timed out")
            units = self.active[host]
            match remote:
                case ["systemctl", "start", unit]:
                    if self.fail_start is not None:
                        if self.start_runs_anyway:
                            units.add(unit)
                        return self.fail_start
                    units.add(unit)
                case ["systemctl", "stop", "--no-block", unit]:
                    if self.fail_stop:
                        return CommandResult(1, "", "Failed to stop")
                    units.discard(unit)
                case ["systemctl", "list-units", *_]:
                    lines = [f"{u} loaded active running sparkmill task executor" for u in units]
                    lines.append("sshd.service loaded active running OpenBSD Secure Shell")
                    return CommandResult(0, "\n".join(sorted(lines)) + "\n")
                case _:
                    return CommandResult(1, "", f"unexpected {remote}")
            return CommandResult(0)


class Recorder:
    """The driver's events (its ``WorkerEvents``), kept until the test awaits them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple[ResourceID, str]]] = []
        self.changed = asyncio.Event()

    def _note(self, kind: str, detail: tuple[ResourceID, str]) -> None:
        self.events.append((kind, detail))
        self.changed.set()

    def on_worker_started(self, resource_id: ResourceID) -> None:
        self._note("started", (resource_id, ""))

    def on_worker_start_failed(self, resource_id: ResourceID, cause: str) -> None:
        self._note("failed", (resource_id, cause))

    def on_worker_start_refused(self, resource_id: ResourceID, cause: str) -> None:
        self._note("refused", (resource_id, cause))

    def on_worker_terminated(self, resource_id: ResourceID, diagnostics: str) -> None:
        self._note("terminated", (resource_id, diagnostics))

    def on_previous_workers_recovered(self, resource_ids: list[ResourceID]) -> None:
        self._note("recovered", (ResourceID(""), ",".join(sorted(resource_ids))))

    async def next(self, kind: str, timeout_s: float = 5.0) -> tuple[ResourceID, str]:
        """The first event of ``kind`` not seen yet: its resource id and text (for
        ``recovered``: the ids, comma-separated)."""
        async with asyncio.timeout(timeout_s):
            while True:
                for index, (seen, detail) in enumerate(self.events):
                    if seen == kind:
                        del self.events[index]
                        return detail
                self.changed.clear()
                await self.changed.wait()


Scenario = Callable[[SystemdWorkerDriver, FakeHosts, Recorder], Awaitable[None]]


def run_scenario(
    scenario: Scenario,
    hosts: FakeHosts | None = None,
    recorder: Callable[[], Recorder] = Recorder,
    config: dict[str, object] | None = None,
) -> None:
    async def main() -> None:
        runtime = ServiceRuntime("systemd-driver-test")
        fake = hosts or FakeHosts()
        settings = driver_settings(**(config or {}))
        driver = SystemdWorkerDriver(runtime, settings, 2, runner=fake, clock=fake.clock)
        events = recorder()
        driver.start(events)
        try:
            await scenario(driver, fake, events)
        finally:
            await driver.close()
            await runtime.close()

    asyncio.run(main())
