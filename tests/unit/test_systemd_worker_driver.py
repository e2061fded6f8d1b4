"""The ``systemd`` worker driver against hand-written fake hosts: the exact ssh argument lists,
the validation of every word that reaches a remote shell, placement by free slots, failures,
adoption of running units, and the periodic check that notices ended units."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkmill.cli.main import build_parser, main
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.core.ids import ResourceID, new_resource_id
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import settings_from_config
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.services.resourcemanager.active_workers import ActiveWorkers, ActiveWorkerSettings
from sparkmill.services.resourcemanager.drivers import create_worker_driver
from sparkmill.services.resourcemanager.host_health import HostHealth
from sparkmill.services.resourcemanager.systemd_worker_driver import (
    CommandResult,
    SystemdWorkerDriver,
    run_command,
)
from sparkmill.services.resourcemanager.worker_driver import WorkerSpec, WorkerState
from tests.unit.systemd_driver_fakes import FakeHosts, Recorder, driver_settings, run_scenario

UNIT = "sparkmill-task-executor-elastic"
SPEC = WorkerSpec(slots=2, cpu_cores=2.0, memory_mb=1024)
A, B = ResourceID("a" * 32), ResourceID("b" * 32)


def test_a_start_is_one_ssh_argument_list_with_checked_host_keys() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        assert await events.next("recovered") == ("", "")
        driver.request_worker(A, SPEC)
        assert await events.next("started") == (A, "")
        argv, timeout_s = next(c for c in hosts.calls if "start" in c[0])
        assert argv == [
            "ssh",
            "-F", "/dev/null",
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "UserKnownHostsFile=/etc/sparkmill/known_hosts",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "ConnectTimeout=5",
            "-o", "LogLevel=ERROR",
            "-p", "22",
            "-l", "root",
            "-o", "IdentitiesOnly=yes",
            "-i", "/etc/sparkmill/keys/rm_ssh",
            "--", "te-1",
            "systemctl", "start", f"{UNIT}@{A}.service",
        ]  # fmt: skip
        assert timeout_s == 20.0
        assert driver.placements() == {A: "te-1"}

    run_scenario(scenario)


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ("te-1;reboot", "not a host name"),
        ("-oProxyCommand=touch", "not a host name"),
        ("te 1", "not a host name"),
        ("te-1,te-1", "listed twice"),
        ("te-1=0", "positive integer"),
        ("te-1=two", "positive integer"),
        ("", "at least one host"),
        ("$(id)", "not a host name"),
    ],
)
def test_hosts_are_validated(hosts: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        driver_settings(**{"resourcemanager.systemd.hosts": hosts})


def test_paths_unit_and_user_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="must be set"):
        driver_settings(**{"resourcemanager.systemd.ssh-known-hosts-file": ""})
    for bad in ("known_hosts", "/etc/a b", "/etc/../root/x", "/etc/x;y"):
        with pytest.raises(ConfigurationError, match="absolute path"):
            driver_settings(**{"resourcemanager.systemd.ssh-known-hosts-file": bad})
    for unit in ("Sparkmill", "x@", "x.service", "a b"):
        with pytest.raises(ConfigurationError, match="lowercase"):
            driver_settings(**{"resourcemanager.systemd.unit": unit})
    with pytest.raises(ConfigurationError, match="not a user name"):
        driver_settings(**{"resourcemanager.systemd.ssh-user": "root;id"})
    settings = driver_settings(**{"resourcemanager.systemd.hosts": "te-1, 198.18.0.12=6"})
    assert settings.hosts == {"te-1": 2, "198.18.0.12": 6}
    with pytest.raises(ValueError, match="valid host"):
        settings.ssh("-oProxyCommand=x", ["true"])


def test_a_resource_id_that_cannot_name_an_instance_fails_without_a_call() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        calls = len(hosts.calls)
        driver.request_worker(ResourceID("x; rm -rf /"), SPEC)
        _, cause = await events.next("failed")
        assert "cannot name a unit instance" in cause
        assert len(hosts.calls) == calls
        assert driver.placements() == {}

    run_scenario(scenario)


def test_workers_go_to_the_host_with_the_most_free_slots_until_none_has_room() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        ids = [new_resource_id() for _ in range(4)]
        for rid in ids:  # te-1 offers 4 slots, te-2 2: te-1, then a tie (the first), then te-2
            driver.request_worker(rid, SPEC)
        assert [driver.placements().get(rid) for rid in ids[:3]] == ["te-1", "te-1", "te-2"]
        rid, cause = await events.next("refused")  # no room: not a failed start
        assert rid == ids[3]
        assert "no host has 2 free slot(s)" in cause and "every host is full" in cause
        assert (
            "te-1=0, te-2=0" in cause
            and "raise the slots in resourcemanager.systemd.hosts" in cause
        )
        for _ in range(3):
            await events.next("started")
        assert {len(u) for u in hosts.active.values()} == {2, 1}

    run_scenario(scenario)


def test_a_failed_start_is_reported_with_the_host_and_frees_the_slots() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        hosts.fail_start = CommandResult(
            5, "", "Unit sparkmill-task-executor-elastic@.service not found."
        )
        driver.request_worker(A, SPEC)
        rid, cause = await events.next("failed")
        assert rid == A
        assert f"systemctl start {UNIT}@{A}.service on te-1: exit code 5" in cause
        assert "not found" in cause
        assert driver.placements() == {}
        assert not any("stop" in remote for remote in hosts.remote("te-1"))
        # A call that did not finish may have gone through: it is followed by a stop.
        hosts.fail_start = CommandResult(None, "", "timed out after 20s")
        driver.request_worker(B, SPEC)
        rid, cause = await events.next("failed")
        assert "did not finish: timed out" in cause
        assert ["systemctl", "stop", "--no-block", f"{UNIT}@{B}.service"] in hosts.remote("te-1")

    run_scenario(scenario)


def test_a_worker_released_while_its_start_is_in_flight_is_stopped() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        driver.request_worker(A, SPEC)
        driver.release_worker(A)  # before the start's answer
        await events.next("started")
        rid, _ = await events.next("terminated")  # the listing: stopped, no longer active
        assert rid == A
        assert hosts.active["te-1"] == set()
        assert driver.placements() == {}

    run_scenario(scenario)


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 (the fake hosts run in threads: no event)
            await asyncio.sleep(0.01)


def _starts(hosts: FakeHosts, host: str, resource_id: ResourceID) -> int:
    return hosts.remote(host).count(["systemctl", "start", f"{UNIT}@{resource_id}.service"])


def test_an_unreachable_host_is_skipped_until_it_answers() -> None:
    one = WorkerSpec(slots=1, cpu_cores=1.0, memory_mb=512)
    c = ResourceID("c" * 32)

    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        hosts.unreachable.add("te-1")  # the freest host goes down
        driver.request_worker(A, one)
        assert await events.next("started") == (A, "")  # tried on te-1 once, then on te-2
        assert driver.placements() == {A: "te-2"}
        assert _starts(hosts, "te-1", A) == 1 and _starts(hosts, "te-2", A) == 1
        assert driver.skipped_hosts() == ["te-1"]
        driver.request_worker(B, one)  # te-1 still has the most free slots but is skipped
        assert driver.placements()[B] == "te-2"
        assert await events.next("started") == (B, "")
        assert _starts(hosts, "te-1", B) == 0
        hosts.unreachable.discard("te-1")  # the check lists it (A's start may have run there)
        await _until(lambda: driver.skipped_hosts() == [] and driver.stray_units() == [])
        driver.request_worker(c, one)
        assert driver.placements()[c] == "te-1"
        assert await events.next("started") == (c, "")
        assert [kind for kind, _ in events.events] == []

    run_scenario(scenario, config={"resourcemanager.systemd.hosts": "te-1=4, te-2=2"})


def test_a_host_s_back_off_grows_is_capped_and_ends_when_it_answers() -> None:
    now = [0.0]
    health = HostHealth(10.0, cap_s=60.0, clock=lambda: now[0])
    assert health.usable("te-1")
    health.failed("te-1")
    assert not health.usable("te-1") and health.backing_off() == ["te-1"]
    now[0] = 10.0
    assert health.usable("te-1")
    health.failed("te-1")  # a second failure in a row: 20 s
    now[0] = 29.0
    assert not health.usable("te-1")
    for _ in range(40):  # never longer than the cap, however many failures
        health.failed("te-1")
    now[0] += 60.0
    assert health.usable("te-1")
    health.failed("te-1")
    health.answered("te-1")
    assert health.usable("te-1") and health.backing_off() == []
    slow_checks = HostHealth(3600.0, cap_s=60.0, clock=lambda: now[0])
    slow_checks.failed("te-1")
    now[0] += 60.0
    assert slow_checks.usable("te-1")  # the cap holds for the first back-off too


def test_a_worker_whose_stop_lands_before_its_start_is_stopped_at_once() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        hosts.start_gate = threading.Event()
        driver.request_worker(A, SPEC)
        driver.release_worker(A)
        stop = ["systemctl", "stop", "--no-block", f"{UNIT}@{A}.service"]
        await _until(lambda: stop in hosts.remote("te-1"))  # the stop lands first
        hosts.start_gate.set()
        assert await events.next("started") == (A, "")
        # Stopped again at once, not at the next check (an hour away here).
        await _until(lambda: hosts.remote("te-1").count(stop) == 2)
        assert hosts.active["te-1"] == set()
        await driver.check_once()
        assert (await events.next("terminated"))[0] == A
        assert driver.placements() == {}

    run_scenario(scenario, config={"resourcemanager.systemd.check-interval": "1 h"})


def test_a_start_that_ends_after_leadership_is_lost_is_stopped() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        hosts.start_gate = threading.Event()
        driver.request_worker(A, SPEC)
        await driver.close()
        hosts.start_gate.set()
        stop = ["systemctl", "stop", "--no-block", f"{UNIT}@{A}.service"]
        await _until(lambda: stop in hosts.remote("te-1"))
        assert hosts.active["te-1"] == set()
        assert events.events == [] and driver.placements() == {}

    run_scenario(scenario)


def test_a_start_that_did_not_finish_is_stopped_until_the_unit_is_gone() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        unit = f"{UNIT}@{A}.service"
        hosts.fail_start = CommandResult(None, "", "timed out after 20s")
        hosts.start_runs_anyway = True  # it ran, but the answer was lost
        hosts.fail_stop = True
        driver.request_worker(A, SPEC)
        rid, cause = await events.next("failed")
        assert rid == A and "on te-1: did not finish" in cause and "on te-2" not in cause
        assert driver.placements() == {} and driver.stray_units() == [("te-1", A)]
        stop = ["systemctl", "stop", "--no-block", unit]
        await _until(lambda: hosts.remote("te-1").count(stop) >= 3)  # the checks ask again
        assert unit in hosts.active["te-1"] and driver.stray_units() == [("te-1", A)]
        hosts.fail_stop = False
        await _until(lambda: driver.stray_units() == [])
        assert hosts.active["te-1"] == set()
        assert [kind for kind, _ in events.events] == []  # never reported as a worker

    # One host: the start is not tried elsewhere.
    run_scenario(scenario, FakeHosts(("te-1",)), config={"resourcemanager.systemd.hosts": "te-1=4"})


def test_the_check_loop_survives_a_failing_round() -> None:
    class FailsOnce(Recorder):
        failed_once = False

        def on_worker_terminated(self, resource_id: ResourceID, diagnostics: str) -> None:
            if not self.failed_once:
                self.failed_once = True
                raise RuntimeError("a handler's bug")
            super().on_worker_terminated(resource_id, diagnostics)

    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        driver.request_worker(A, SPEC)
        driver.request_worker(B, SPEC)
        await events.next("started")
        await events.next("started")
        hosts.active["te-1"].discard(f"{UNIT}@{A}.service")
        await _until(lambda: A not in driver.placements())  # its report raised
        hosts.active[driver.placements()[B]].discard(f"{UNIT}@{B}.service")
        assert (await events.next("terminated"))[0] == B

    run_scenario(scenario, recorder=FailsOnce)


def test_the_first_listing_is_bounded_by_the_connect_timeout() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        assert [timeout_s for _, timeout_s in hosts.calls[:2]] == [10.0, 10.0]  # 5 s + 5 s
        driver.request_worker(A, SPEC)
        await events.next("started")
        assert hosts.calls[-1][1] == 20.0  # other calls: the command timeout

    run_scenario(scenario)


def test_a_host_list_where_no_host_fits_a_worker_is_refused() -> None:
    values = {
        "resourcemanager.driver": "systemd",
        "resourcemanager.systemd.hosts": "te-1=2, te-2=3",
        "resourcemanager.systemd.ssh-known-hosts-file": "/etc/sparkmill/known_hosts",
        "taskmanager.numberOfTaskSlots": 4,
    }
    config = Configuration.from_mapping(values)
    runtime = ServiceRuntime("systemd-driver-test")
    with pytest.raises(ConfigurationError, match="no host offers the 4 slot"):
        create_worker_driver(settings_from_config(config), runtime, config)


def test_running_units_are_recovered_and_others_ignored() -> None:
    hosts = FakeHosts(("te-1", "te-2", "te-3"))
    hosts.active["te-1"] |= {f"{UNIT}@{A}.service", "sparkmill-task-executor@1.service"}
    hosts.active["te-2"] |= {f"{UNIT}@{B}.service", f"{UNIT}@Bad$Name.service", "other@x.service"}
    hosts.unreachable.add("te-3")

    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        assert await events.next("recovered") == ("", f"{A},{B}")
        assert driver.placements() == {A: "te-1", B: "te-2"}
        assert hosts.remote("te-1")[0] == [
            "systemctl", "list-units", "--type=service", "--state=active",
            "--plain", "--no-legend", "--no-pager",
        ]  # fmt: skip
        # Their slots count: te-2 (2 slots) is full, te-1 has 2 of 4 free, te-3 2 of 2 but
        # it could not be listed, so it is skipped for now.
        first, second = new_resource_id(), new_resource_id()
        driver.request_worker(first, SPEC)
        driver.request_worker(second, SPEC)
        assert driver.placements() == {A: "te-1", B: "te-2", first: "te-1"}
        assert await events.next("started") == (first, "")
        rid, cause = await events.next("refused")  # no usable host has room
        assert rid == second and "te-1=0, te-2=0, te-3=2" in cause
        assert "skipped after failed calls: te-3" in cause

    run_scenario(scenario, hosts, config={"resourcemanager.systemd.hosts": "te-1=4, te-2, te-3"})


def test_a_host_unreachable_at_the_start_is_listed_again_and_its_units_adopted_late() -> None:
    hosts = FakeHosts(("te-1", "te-2"))
    hosts.active["te-2"] |= {f"{UNIT}@{B}.service"}
    hosts.unreachable.add("te-2")

    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        assert await events.next("recovered") == ("", "")
        assert driver.placements() == {}
        hosts.unreachable.discard("te-2")  # it answers again
        assert await events.next("recovered") == ("", B)
        assert driver.placements() == {B: "te-2"}
        await asyncio.sleep(0.3)  # later listings see it as a placed worker, not a new one
        assert [kind for kind, _ in events.events] == []
        hosts.active["te-2"].clear()  # and report its end like any other worker's
        assert (await events.next("terminated"))[0] == B

    run_scenario(scenario, hosts)


def test_an_ended_unit_is_reported_and_a_release_stops_its_unit() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        driver.request_worker(A, SPEC)
        driver.request_worker(B, SPEC)
        await events.next("started")
        await events.next("started")
        hosts.active["te-1"].discard(f"{UNIT}@{A}.service")  # it crashed
        rid, diagnostics = await events.next("terminated")
        assert rid == A and "no longer active" in diagnostics and "journalctl -u" in diagnostics
        # A release whose stop fails is asked again while the unit is active.
        hosts.fail_stop = True
        driver.release_worker(B)
        async with asyncio.timeout(5):
            while sum(r[:2] == ["systemctl", "stop"] for r in hosts.remote("te-1")) < 3:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        hosts.fail_stop = False
        rid, _ = await events.next("terminated")
        assert rid == B
        assert hosts.active["te-1"] == set()
        assert driver.placements() == {}

    run_scenario(scenario)


def test_close_stops_nothing_and_reports_nothing() -> None:
    async def scenario(driver: SystemdWorkerDriver, hosts: FakeHosts, events: Recorder) -> None:
        await events.next("recovered")
        driver.request_worker(A, SPEC)
        await events.next("started")
        await driver.close()
        calls = len(hosts.calls)
        hosts.active["te-1"].clear()
        await asyncio.sleep(0.2)
        assert len(hosts.calls) == calls  # no more listings
        assert events.events == []

    run_scenario(scenario)


def test_failed_starts_count_in_the_accounting() -> None:
    """Wired to the accounting: a start that fails on the host counts as failed and pauses new
    starts; the units it adopted cover the demand."""

    class Demand:
        waiting = 4

        def waiting_slot_requests(self) -> int:
            return self.waiting

        def registered_slots(self) -> int:
            return 0

        def is_idle(self, resource_id: ResourceID) -> bool:
            return False

        def close_task_executor(self, resource_id: ResourceID, cause: str) -> None:
            pass

    hosts = FakeHosts()
    hosts.active["te-2"].add(f"{UNIT}@{A}.service")

    async def main() -> None:
        runtime = ServiceRuntime("systemd-driver-test")
        driver = SystemdWorkerDriver(runtime, driver_settings(), 2, runner=hosts)
        hosts.fail_start = CommandResult(1, "", "Job for unit failed")
        workers = ActiveWorkers(
            driver, ManualTimerService(), Demand(), ActiveWorkerSettings(spec=SPEC)
        )
        workers.start()
        async with asyncio.timeout(5):
            while workers.counts().failed_total == 0:  # noqa: ASYNC110 (no event to await)
                await asyncio.sleep(0.01)
        assert workers.workers() == {A: WorkerState.STARTED}  # adopted: covers 2 of 4 slots
        assert workers.counts().requested_total == 1  # one more, which failed
        assert workers.check_resource_needs() == 0  # cooling down
        await workers.close()
        await runtime.close()

    asyncio.run(main())


def test_run_command_bounds_a_call_and_reports_a_missing_binary() -> None:
    assert run_command(["true"], 5).ok
    result = run_command(["sleep", "5"], 0.2)
    assert result.returncode is None and "timed out" in result.describe()
    missing = run_command(["/nonexistent/ssh"], 1)
    assert missing.returncode is None and "FileNotFoundError" in missing.describe()


def test_the_configuration_chooses_the_systemd_driver(tmp_path: Path) -> None:
    values = {
        "resourcemanager.driver": "systemd",
        "resourcemanager.systemd.hosts": "te-1=6",
        "resourcemanager.systemd.ssh-known-hosts-file": "/etc/sparkmill/known_hosts",
        "taskmanager.numberOfTaskSlots": 3,
    }
    config = Configuration.from_mapping(values)
    runtime = ServiceRuntime("systemd-driver-test")
    driver = create_worker_driver(settings_from_config(config), runtime, config)
    assert isinstance(driver, SystemdWorkerDriver) and driver.name == "systemd"
    del values["resourcemanager.systemd.hosts"]
    config = Configuration.from_mapping(values)
    with pytest.raises(ConfigurationError, match="at least one host"):
        create_worker_driver(settings_from_config(config), runtime, config)


def test_a_service_takes_dynamic_properties_like_the_unit_s_resource_id(tmp_path: Path) -> None:
    """The template unit passes ``-D taskmanager.resource-id=%i``: the CLI takes it and a bad
    one is refused before the service starts."""
    args = build_parser().parse_args(
        ["task-executor", "--config", "x.yaml", "-D", "taskmanager.resource-id=abc"]
    )
    assert args.service_overrides == ["taskmanager.resource-id=abc"]
    config = tmp_path / "te.yaml"
    config.write_text("taskmanager.numberOfTaskSlots: 2\n")
    assert main(["task-executor", "--config", str(config), "-D", "no-equals-sign"]) == 2
    assert (
        main(["task-executor", "--config", str(config), "-D", "taskmanager.numberOfTaskSlots=0"])
        == 2
    )
