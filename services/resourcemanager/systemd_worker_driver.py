"""The ``systemd`` worker driver: task executors as instances of a template unit on a list of
hosts, started and stopped with ``systemctl`` over SSH (``resourcemanager.driver: systemd``).

A worker with resource id ``ID`` is the unit ``<resourcemanager.systemd.unit>@ID.service`` on
one host of ``resourcemanager.systemd.hosts``; the unit passes ``%i`` as the task executor's
``taskmanager.resource-id``, so its registration names the worker the accounting waits for.
The Ansible role installs the template (``sparkmill-task-executor-elastic@.service``, the
fixed task executors' ``sparkmill-task-executor@N`` being another one).

* **Placement.** Each host offers a number of slots (``HOST=SLOTS``, or
  ``resourcemanager.systemd.slots-per-host``); a new worker goes to the host with the most
  free slots, reserved at once so that requests in flight do not overbook a host. A host whose
  call did not connect is skipped for a growing back-off (:mod:`.host_health`), and a start
  that did not connect is tried on the next host with room. When no host has room the start
  fails (the accounting counts it and cools down).
* **Calls.** One ``ssh`` per call, an argument list with BatchMode, StrictHostKeyChecking=yes
  against the configured known_hosts file and a ConnectTimeout, bounded by
  ``resourcemanager.systemd.command-timeout`` and run off the loop
  (``ServiceRuntime.run_blocking``). ssh hands the remote words to a shell (or to the forced
  command the role installs, which checks them again), so every word is either a constant or
  matched by a strict pattern here: host names, the unit's name and instance names.
* **Ends.** ``systemctl stop --no-block`` asks for a stop; whether a unit still runs is learnt by
  listing the hosts' active units every ``resourcemanager.systemd.check-interval``: a worker
  whose unit is no longer active has ended (``on_worker_terminated``); a release whose unit is
  still active is asked again (the host may have been unreachable). A unit that may run
  without being a worker (its start did not finish, or it was started after a release or after
  leadership was lost) is stopped the same way until a listing shows it inactive.
* **Adoption.** When the driver starts (its resource manager gained leadership) it lists the
  active instances of the template on every host and reports them as recovered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.config.schema import ConfigOption
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.core.ids import ResourceID, short
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.services.resourcemanager.host_health import HostHealth
from sparkmill.services.resourcemanager.worker_driver import WorkerEvents, WorkerSpec

log = logging.getLogger(__name__)

# A DNS name (labels of letters, digits and inner hyphens) or an IPv4 address: never a leading
# '-' (an ssh option) nor anything a shell would read.
_HOST_RE = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
    re.ASCII,
)
_UNIT_RE = re.compile(r"[a-z][a-z0-9-]{0,62}", re.ASCII)
# Resource ids the resource manager makes are 32 hex digits; a unit found running must look the
# same to be adopted (systemd would escape anything else, and a shell could read it).
_INSTANCE_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}", re.ASCII)
_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}", re.ASCII)
_PATH_RE = re.compile(r"/[A-Za-z0-9_./-]*", re.ASCII)
_TAIL = 300  # characters of a failed call's output kept in its diagnostics
_SSH_FAILED = 255  # ssh's own exit code: it could not connect (or lost the connection)
# The first listing must end within previous-worker.recovery.timeout: a host that does not
# answer within the connect timeout plus this is listed again at the checks instead.
_RECOVERY_LISTING_MARGIN_S = 5.0


def valid_instance(name: str) -> bool:
    return _INSTANCE_RE.fullmatch(name) is not None


def valid_host(name: str) -> bool:
    return _HOST_RE.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class CommandResult:
    returncode: int | None  # None: it did not run to its end (timeout, no ssh binary)
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def not_connected(self) -> bool:
        """ssh could not connect, or the call did not finish: the host may be down (and the
        remote command may have run all the same)."""
        return self.returncode is None or self.returncode == _SSH_FAILED

    def describe(self) -> str:
        status = "did not finish" if self.returncode is None else f"exit code {self.returncode}"
        detail = (self.stderr.strip() or self.stdout.strip())[-_TAIL:]
        return f"{status}: {detail}" if detail else status


# Runs one command (an argument list) within a bound; blocking. Tests pass a fake.
CommandRunner = Callable[[list[str], float], CommandResult]


def run_command(argv: list[str], timeout_s: float) -> CommandResult:
    """Run ``argv`` without a shell, stdin closed; a timeout kills it."""
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return CommandResult(None, "", f"timed out after {timeout_s:g}s")
    except OSError as exc:
        return CommandResult(None, "", f"{type(exc).__name__}: {exc}")
    return CommandResult(
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )


def _path(config: Configuration, option: ConfigOption[str], required: bool) -> str:
    value = config.get(option).strip()
    if not value:
        if required:
            raise ConfigurationError(option.key, "must be set with resourcemanager.driver: systemd")
        return ""
    if _PATH_RE.fullmatch(value) is None or ".." in PurePosixPath(value).parts:
        raise ConfigurationError(
            option.key, f"{value!r} must be an absolute path of letters, digits and _ . / -"
        )
    return value


def _hosts(config: Configuration) -> dict[str, int]:
    key = opt.RESOURCE_MANAGER_SYSTEMD_HOSTS.key
    default_slots = config.get(opt.RESOURCE_MANAGER_SYSTEMD_SLOTS_PER_HOST)
    hosts: dict[str, int] = {}
    for entry in config.get(opt.RESOURCE_MANAGER_SYSTEMD_HOSTS).split(","):
        if not entry.strip():
            continue
        host, sep, slots_text = (part.strip() for part in entry.partition("="))
        if not valid_host(host):
            raise ConfigurationError(key, f"{host!r} is not a host name or an IPv4 address")
        if host in hosts:
            raise ConfigurationError(key, f"{host!r} is listed twice")
        if sep and not (slots_text.isascii() and slots_text.isdigit() and int(slots_text) > 0):
            raise ConfigurationError(key, f"{entry.strip()!r}: SLOTS must be a positive integer")
        hosts[host] = int(slots_text) if sep else default_slots
    if not hosts:
        raise ConfigurationError(
            key, "must name at least one host with resourcemanager.driver: systemd"
        )
    return hosts


@dataclass(frozen=True, slots=True)
class SystemdDriverSettings:
    hosts: dict[str, int]  # host -> slots it offers on-demand task executors, in config order
    unit: str
    known_hosts_file: str
    user: str = "root"
    identity_file: str = ""
    port: int = 22
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 60.0
    check_interval_s: float = 10.0

    def __post_init__(self) -> None:
        if _UNIT_RE.fullmatch(self.unit) is None:
            raise ConfigurationError(
                opt.RESOURCE_MANAGER_SYSTEMD_UNIT.key,
                f"{self.unit!r} must be lowercase letters, digits and '-' (no '@.service')",
            )
        if _USER_RE.fullmatch(self.user) is None:
            raise ConfigurationError(
                opt.RESOURCE_MANAGER_SYSTEMD_SSH_USER.key, f"{self.user!r} is not a user name"
            )

    @classmethod
    def of(cls, config: Configuration) -> SystemdDriverSettings:
        return cls(
            hosts=_hosts(config),
            unit=config.get(opt.RESOURCE_MANAGER_SYSTEMD_UNIT).strip(),
            known_hosts_file=_path(config, opt.RESOURCE_MANAGER_SYSTEMD_SSH_KNOWN_HOSTS_FILE, True),
            user=config.get(opt.RESOURCE_MANAGER_SYSTEMD_SSH_USER).strip(),
            identity_file=_path(config, opt.RESOURCE_MANAGER_SYSTEMD_SSH_IDENTITY_FILE, False),
            port=config.get(opt.RESOURCE_MANAGER_SYSTEMD_SSH_PORT),
            connect_timeout_s=config.get(opt.RESOURCE_MANAGER_SYSTEMD_CONNECT_TIMEOUT),
            command_timeout_s=config.get(opt.RESOURCE_MANAGER_SYSTEMD_COMMAND_TIMEOUT),
            check_interval_s=config.get(opt.RESOURCE_MANAGER_SYSTEMD_CHECK_INTERVAL),
        )

    def unit_of(self, instance: str) -> str:
        if not valid_instance(instance):
            raise ValueError(f"{instance!r} cannot name a unit instance")
        return f"{self.unit}@{instance}.service"

    def instance_of(self, unit: str) -> str | None:
        """The instance of one of the template's units, ``None`` for any other unit."""
        prefix, suffix = f"{self.unit}@", ".service"
        if not (unit.startswith(prefix) and unit.endswith(suffix)):
            return None
        instance = unit[len(prefix) : -len(suffix)]
        return instance if valid_instance(instance) else None

    def ssh(self, host: str, remote: list[str]) -> list[str]:
        """The ssh argument list that runs ``remote`` on ``host``."""
        if not valid_host(host):
            raise ValueError(f"{host!r} is not a valid host")
        argv = [
            "ssh",
            "-F", "/dev/null",  # no user or system ssh_config: these options are all there is
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts_file}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"ConnectTimeout={max(1, round(self.connect_timeout_s))}",
            "-o", "LogLevel=ERROR",
            "-p", str(self.port),
            "-l", self.user,
        ]  # fmt: skip
        if self.identity_file:
            argv += ["-o", "IdentitiesOnly=yes", "-i", self.identity_file]
        return [*argv, "--", host, *remote]


# The remote commands: constants and validated unit names only (the forced command on the host
# accepts exactly these forms).
def start_command(unit: str) -> list[str]:
    return ["systemctl", "start", unit]


def stop_command(unit: str) -> list[str]:
    return ["systemctl", "stop", "--no-block", unit]


LIST_COMMAND = [
    "systemctl",
    "list-units",
    "--type=service",
    "--state=active",
    "--plain",
    "--no-legend",
    "--no-pager",
]


@dataclass(eq=False, slots=True)
class _Placed:
    host: str
    slots: int
    running: bool = False  # its start went through (or it was adopted): a listing judges it
    releasing: bool = False


@dataclass(slots=True)
class _Listing:
    ok: bool
    instances: set[str] = field(default_factory=set)
    problem: str = ""


class SystemdWorkerDriver:
    def __init__(
        self,
        runtime: ServiceRuntime,
        settings: SystemdDriverSettings,
        slots_per_worker: int,
        runner: CommandRunner = run_command,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._runtime = runtime
        self._settings = settings
        self._slots_per_worker = slots_per_worker
        self._runner = runner
        self._events: WorkerEvents | None = None
        self._placed: dict[ResourceID, _Placed] = {}
        # Units that may be active without being workers (a start that did not finish on a
        # host the worker then left): slots they hold, stopped at each check until a listing
        # shows them inactive; never reported.
        self._strays: dict[tuple[str, ResourceID], int] = {}
        # Hosts that could not be listed when this driver started: listed again at every check
        # until they answer, and their running units are reported then (adopted late).
        self._unlisted: set[str] = set()
        self._health = HostHealth(settings.check_interval_s, clock=clock)
        self._checker: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return "systemd"

    def start(self, events: WorkerEvents) -> None:
        self._events = events
        self._placed.clear()  # the listing says what runs now
        self._strays.clear()
        self._runtime.spawn(self._recover(events), "recover-workers")

    def request_worker(self, resource_id: ResourceID, spec: WorkerSpec) -> None:
        if not valid_instance(resource_id):
            cause = f"{resource_id!r} cannot name a unit instance"
            self._runtime.spawn(self._answer_failed(resource_id, cause), "start-worker")
            return
        host = self._place(spec.slots, tried=set())
        if host is None:
            self._runtime.spawn(
                self._answer_refused(resource_id, self._no_room(spec.slots)), "start-worker"
            )
            return
        placed = _Placed(host, spec.slots)
        self._placed[resource_id] = placed
        self._runtime.spawn(self._start_worker(resource_id, placed), "start-worker")

    def release_worker(self, resource_id: ResourceID) -> None:
        placed = self._placed.get(resource_id)
        if placed is None:
            return
        placed.releasing = True
        self._runtime.spawn(self._stop(resource_id, placed.host), "stop-worker")

    async def close(self) -> None:
        """Stop reporting and listing; the units keep running for the next leader."""
        self._events = None
        if self._checker is not None:
            self._checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checker
            self._checker = None

    def placements(self) -> dict[ResourceID, str]:
        """Which host each known worker is on (tests, diagnostics)."""
        return {rid: placed.host for rid, placed in self._placed.items()}

    def stray_units(self) -> list[tuple[str, ResourceID]]:
        """Units that may run without being workers, stopped at each check (diagnostics)."""
        return sorted(self._strays)

    def skipped_hosts(self) -> list[str]:
        """Hosts placement skips now, after failed calls (diagnostics)."""
        return self._health.backing_off()

    # ---------------------------------------------------------------- placement

    def _free(self) -> dict[str, int]:
        free = dict(self._settings.hosts)
        for placed in self._placed.values():
            free[placed.host] = free.get(placed.host, 0) - placed.slots
        for (host, _), slots in self._strays.items():
            free[host] = free.get(host, 0) - slots
        return free

    def _place(self, slots: int, tried: set[str]) -> str | None:
        """The usable host with the most free slots (the first of them, in config order), not
        one of ``tried``: a host in its back-off after a failure would only fail again."""
        free = self._free()
        fits = [
            host
            for host in free
            if free[host] >= slots and host not in tried and self._health.usable(host)
        ]
        return max(fits, key=lambda host: free[host]) if fits else None

    def _no_room(self, slots: int) -> str:
        free = ", ".join(f"{host}={count}" for host, count in self._free().items())
        key = opt.RESOURCE_MANAGER_SYSTEMD_HOSTS.key
        cause = (
            f"no host has {slots} free slot(s) for a new task executor (free: {free}): every "
            f"host is full or unreachable; to run more, raise the slots in {key} (HOST=SLOTS) "
            f"or add hosts"
        )
        skipped = self._health.backing_off()
        if skipped:
            cause += f"; skipped after failed calls: {', '.join(skipped)}"
        return cause

    # ---------------------------------------------------------------- calls

    async def _call(
        self, host: str, remote: list[str], timeout_s: float | None = None
    ) -> CommandResult:
        argv = self._settings.ssh(host, remote)
        bound_s = self._settings.command_timeout_s if timeout_s is None else timeout_s
        result: CommandResult = await self._runtime.run_blocking(self._runner, argv, bound_s)
        if result.not_connected:
            self._health.failed(host)
        else:
            self._health.answered(host)
        return result

    async def _answer_refused(self, resource_id: ResourceID, cause: str) -> None:
        if self._events is not None:
            self._events.on_worker_start_refused(resource_id, cause)

    async def _answer_failed(self, resource_id: ResourceID, cause: str) -> None:
        if self._events is not None:
            self._events.on_worker_start_failed(resource_id, cause)

    async def _start_worker(self, resource_id: ResourceID, placed: _Placed) -> None:
        events = self._events
        unit = self._settings.unit_of(resource_id)  # checked by request_worker
        tried: set[str] = set()
        causes: list[str] = []
        while True:
            host = placed.host
            tried.add(host)
            result = await self._call(host, start_command(unit))
            if result.ok:
                break
            causes.append(f"systemctl start {unit} on {host}: {result.describe()}")
            log.warning("worker %s could not be started: %s", short(resource_id), causes[-1])
            if result.not_connected:
                # It may have gone through all the same: stop it (before trying elsewhere) and
                # at each check until a listing shows it inactive, holding its slots meanwhile.
                self._strays[(host, resource_id)] = placed.slots
                await self._stop(resource_id, host)
            next_host = None
            if result.not_connected and not placed.releasing and self._events is events:
                next_host = self._place(placed.slots, tried)
            if next_host is None or self._placed.get(resource_id) is not placed:
                if self._placed.get(resource_id) is placed:
                    del self._placed[resource_id]
                if events is not None and self._events is events:
                    events.on_worker_start_failed(resource_id, "; ".join(causes))
                return
            placed.host = next_host  # at most once per host for this request
        log.info("worker %s started as %s on %s", short(resource_id), unit, host)
        if events is None or self._events is not events:
            # Leadership was lost (or taken again) meanwhile: nobody tracks this unit.
            if self._placed.get(resource_id) is placed:
                del self._placed[resource_id]
            await self._stop(resource_id, host)
            return
        placed.running = True
        if placed.releasing:
            # Released while the start was in flight: its stop may have landed first.
            self._runtime.spawn(self._stop(resource_id, host), "stop-worker")
        events.on_worker_started(resource_id)

    async def _stop(self, resource_id: ResourceID, host: str) -> None:
        unit = self._settings.unit_of(resource_id)
        result = await self._call(host, stop_command(unit))
        if not result.ok:  # the next listing asks again while the unit is active
            log.warning("systemctl stop %s on %s: %s", unit, host, result.describe())

    async def _list(self, host: str, timeout_s: float | None = None) -> _Listing:
        result = await self._call(host, LIST_COMMAND, timeout_s)
        if not result.ok:
            self._health.failed(host)  # it may answer ssh but not list: do not place there
            return _Listing(False, problem=result.describe())
        instances = set()
        for line in result.stdout.splitlines():
            words = line.split()
            instance = self._settings.instance_of(words[0]) if words else None
            if instance is not None:
                instances.add(instance)
        return _Listing(True, instances)

    # ---------------------------------------------------------------- recovery and checks

    async def _recover(self, events: WorkerEvents) -> None:
        hosts = list(self._settings.hosts)
        bound_s = min(
            self._settings.command_timeout_s,
            self._settings.connect_timeout_s + _RECOVERY_LISTING_MARGIN_S,
        )
        listings = await asyncio.gather(*(self._list(host, bound_s) for host in hosts))
        if self._events is not events:
            return
        recovered: list[ResourceID] = []
        for host, listing in zip(hosts, listings, strict=True):
            if not listing.ok:
                log.warning(
                    "could not list the task executors running on %s (%s): asked again at "
                    "every check, its units are adopted once it answers",
                    host,
                    listing.problem,
                )
                self._unlisted.add(host)
            recovered += self._adopt(host, listing)
        log.info("found %d running task executor unit(s) on %d host(s)", len(recovered), len(hosts))
        events.on_previous_workers_recovered(recovered)
        self._checker = self._runtime.spawn(self._check_loop(events), "check-workers")

    def _adopt(self, host: str, listing: _Listing) -> list[ResourceID]:
        adopted = []
        for instance in sorted(listing.instances):
            resource_id = ResourceID(instance)
            # A stray is being stopped: it is no worker to report.
            if resource_id not in self._placed and (host, resource_id) not in self._strays:
                self._placed[resource_id] = _Placed(host, self._slots_per_worker, running=True)
                adopted.append(resource_id)
        return adopted

    async def _check_loop(self, events: WorkerEvents) -> None:
        while self._events is events:
            await asyncio.sleep(self._settings.check_interval_s)
            try:
                await self.check_once()
            except Exception:  # one bad round (a bug, a handler's error) must not end checks
                log.exception("checking the task executor units failed; checking again later")

    async def check_once(self) -> None:
        """List the active units on the hosts with running workers: report the ended ones and
        ask again for the stop of released ones still active. Hosts not listed at the start are
        listed too, and the units running there reported as recovered once they answer."""
        events = self._events
        judged = {rid: p for rid, p in self._placed.items() if p.running}
        strays = dict(self._strays)
        hosts = sorted(
            {placed.host for placed in judged.values()}
            | {host for host, _ in strays}
            | self._unlisted
        )
        listings = await asyncio.gather(*(self._list(host) for host in hosts))
        by_host = dict(zip(hosts, listings, strict=True))
        late: list[ResourceID] = []
        for host in sorted(self._unlisted):
            if by_host[host].ok:
                self._unlisted.discard(host)
                late += self._adopt(host, by_host[host])
        if late and events is not None and self._events is events:
            log.info("found %d running task executor unit(s) on a late host", len(late))
            events.on_previous_workers_recovered(late)
        for host, resource_id in strays:
            listing = by_host[host]
            if not listing.ok:
                continue
            if resource_id in listing.instances:
                self._runtime.spawn(self._stop(resource_id, host), "stop-worker")
            else:
                self._strays.pop((host, resource_id), None)
        for resource_id, placed in judged.items():
            listing = by_host[placed.host]
            if not listing.ok or self._placed.get(resource_id) is not placed:
                continue
            if resource_id in listing.instances:
                if placed.releasing:
                    self._runtime.spawn(self._stop(resource_id, placed.host), "stop-worker")
                continue
            del self._placed[resource_id]
            unit = self._settings.unit_of(resource_id)
            log.info(
                "worker %s (%s on %s) is no longer active", short(resource_id), unit, placed.host
            )
            if events is not None and self._events is events:
                events.on_worker_terminated(
                    resource_id,
                    f"{unit} on {placed.host} is no longer active (journalctl -u {unit})",
                )


def systemd_worker_driver(
    runtime: ServiceRuntime, config: Configuration, slots_per_worker: int
) -> SystemdWorkerDriver:
    settings = SystemdDriverSettings.of(config)
    if slots_per_worker > max(settings.hosts.values()):
        raise ConfigurationError(
            opt.RESOURCE_MANAGER_SYSTEMD_HOSTS.key,
            f"no host offers the {slots_per_worker} slot(s) of one task executor "
            f"(taskmanager.numberOfTaskSlots): give at least one host HOST={slots_per_worker} "
            f"or more",
        )
    return SystemdWorkerDriver(runtime, settings, slots_per_worker)


__all__ = [
    "LIST_COMMAND",
    "CommandResult",
    "CommandRunner",
    "SystemdDriverSettings",
    "SystemdWorkerDriver",
    "run_command",
    "start_command",
    "stop_command",
    "systemd_worker_driver",
    "valid_host",
    "valid_instance",
]
