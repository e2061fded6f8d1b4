"""Fault injection on the test bed, for the tests: the `scripts/testbed.sh` fault commands behind
context managers that always undo what they did.

    faults = Faults(bed)
    with faults.power_off("h1") as fault:   # the container is killed at once
        ...                                 # fault.at: when (time.time())
    # h1 is booted again and its services are back in the cluster

Every fault is bounded twice: the context manager undoes it on the way out (also when the body
raised), and the script is given a deadline after which it undoes the fault by itself, should
this process die first. ``heal_all`` undoes every fault in force, whoever made it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.testbed.bed import SCRIPT, TestBed

# A fault left behind by a killed test process is undone by the script after this long.
FAULT_LIMIT_S = 600
KINDS = ("poweroff", "partition", "pause", "zk-stop")
UNDO = {"poweroff": "poweron", "partition": "heal", "pause": "resume", "zk-stop": "zk-start"}


@dataclass
class Fault:
    kind: str
    host: str
    at: float  # time.time() when the fault took effect
    undone_at: float | None = None


def testbed_script(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, SPARKMILL_VENV=sys.prefix),
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        command = " ".join(args)
        raise AssertionError(f"testbed.sh {command} exited {result.returncode}:\n{result.stderr}")
    return result


class Faults:
    def __init__(self, bed: TestBed) -> None:
        self.bed = bed
        self.history: list[Fault] = []

    # -- one fault at a time, undone on the way out -----------------------------------------------

    @contextmanager
    def power_off(self, host: str, *, wait_healthy: bool = True) -> Iterator[Fault]:
        """The host's container is killed at once (no unit stops; its sockets just go silent)."""
        with self._fault("poweroff", host, wait_healthy) as fault:
            yield fault

    @contextmanager
    def partition(self, host: str, *, wait_healthy: bool = True) -> Iterator[Fault]:
        """The host's link leaves the bridge: nothing in, nothing out; it keeps running (and
        keeps the shared directory, like a host whose NFS is on another network)."""
        with self._fault("partition", host, wait_healthy) as fault:
            yield fault

    @contextmanager
    def pause(self, host: str, *, wait_healthy: bool = True) -> Iterator[Fault]:
        """Every process of the host is stopped (SIGSTOP) where it is; resumed on the way out."""
        with self._fault("pause", host, wait_healthy) as fault:
            yield fault

    @contextmanager
    def zookeeper_stopped(self, *hosts: str, wait_healthy: bool = True) -> Iterator[list[Fault]]:
        """The ZooKeeper servers of ``hosts`` are stopped; started again on the way out."""
        faults: list[Fault] = []
        try:
            for host in hosts:
                faults.append(self.inject("zk-stop", host))
            yield faults
        finally:
            for fault in faults:
                self.undo(fault)
            if wait_healthy:
                wait_services(self.bed)

    @contextmanager
    def _fault(self, kind: str, host: str, wait_healthy: bool) -> Iterator[Fault]:
        fault = self.inject(kind, host)
        try:
            yield fault
        finally:
            self.undo(fault)
            if wait_healthy:
                wait_services(self.bed)

    # -- the plain calls (the soak uses them) -----------------------------------------------------

    def inject(self, kind: str, host: str, limit_s: float = FAULT_LIMIT_S) -> Fault:
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r} (one of {', '.join(KINDS)})")
        testbed_script(kind, host, str(int(limit_s)))
        fault = Fault(kind, host, time.time())
        self.history.append(fault)
        return fault

    def undo(self, fault: Fault) -> None:
        if fault.undone_at is None:
            testbed_script(UNDO[fault.kind], fault.host, timeout=400)
            fault.undone_at = time.time()

    def heal_all(self) -> None:
        testbed_script("heal-all", timeout=900)
        for fault in self.history:
            if fault.undone_at is None:
                fault.undone_at = time.time()

    def in_force(self) -> list[str]:
        return testbed_script("faults").stdout.split()


def wait_services(bed: TestBed, timeout: float = 240) -> None:
    """Every unit of every host active again (systemd restarts what died with a fault)."""

    def all_active() -> bool:
        for host in bed.addresses:
            units = bed.units_of(host)
            out = bed.ssh(host, "systemctl is-active " + " ".join(units), check=False, timeout=20)
            if out.stdout.split() != ["active"] * len(units):
                return False
        return True

    bed.wait_until("every unit of every host active", all_active, timeout=timeout)
