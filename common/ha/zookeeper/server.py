"""A real ZooKeeper server in the foreground, for local clusters and tests.

Uses Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar`` pulls its dependencies
through its manifest; ``slf4j-simple`` makes it log). The harness can stop and restart the server
on the same port and data directory, which is how tests simulate a ZooKeeper outage.
:class:`ZooKeeperEnsemble` runs several servers on loopback as one replicated ensemble (each
with its own client, quorum and election port), so a test can stop the one server a client is
connected to while the others keep the quorum.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from sparkmill.common.core.free_ports import free_port, free_ports

JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")


def zookeeper_available() -> bool:
    return all(Path(jar).exists() for jar in JARS) and _java() is not None


def _java() -> str | None:
    for candidate in (os.environ.get("JAVA_HOME", "") + "/bin/java", "/usr/bin/java"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


class ZooKeeperServer:
    def __init__(
        self,
        directory: Path,
        port: int = 0,
        tick_ms: int = 200,
        *,
        server_id: int = 0,
        peers: tuple[str, ...] = (),
    ) -> None:
        self.directory = directory
        self.port = port or free_port()
        # In an ensemble: this server's myid and the ``server.N=...`` lines of all servers.
        self.server_id = server_id
        self.peers = peers
        # Sessions are bounded below by 2 ticks, and ZooKeeper expires them at tick boundaries:
        # a dead leader's session ends up to one tick after its timeout, which adds to every
        # failover. 200 ms keeps that small for the short sessions of local clusters.
        self.tick_ms = tick_ms
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.directory / "zookeeper.log"

    def write_config(self) -> Path:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "maxSessionTimeout=120000\n"
            "4lw.commands.whitelist=ruok,srvr,cons\n"
        )
        if self.peers:
            lines = ["initLimit=10", "syncLimit=5", *self.peers]
            with open(config, "a") as out:
                out.write("".join(f"{line}\n" for line in lines))
            (data / "myid").write_text(f"{self.server_id}\n")
        return config

    def command(self) -> list[str]:
        java = _java()
        if java is None:
            raise RuntimeError("java not found: install openjdk-17-jre-headless")
        return [
            java,
            "-Xmx128m",
            # A development server of a few znodes: C1 alone and the serial collector start it
            # with about half the CPU, and nothing it does needs C2's code.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            ":".join(JARS),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.write_config()),
        ]

    def start(self, timeout_s: float = 30.0) -> None:
        self.launch()
        self.wait_ready(timeout_s)

    def launch(self) -> None:
        """Start the server process without waiting for it (an ensemble's servers wait for
        each other before any of them serves)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {self.process.returncode}; see {self.log_file}"
                )
            if self.serving():
                return
            time.sleep(0.1)
        raise TimeoutError(f"ZooKeeper on port {self.port} not ready after {timeout_s}s")

    def serving(self) -> bool:
        """Answers requests: up, and (in an ensemble) part of a quorum."""
        return b"Mode:" in self.four_letter_word("srvr")

    def four_letter_word(self, command: str, timeout_s: float = 1.0) -> bytes:
        """The answer to one of ZooKeeper's four-letter commands (``srvr``, ``cons``...), or
        nothing when the server does not answer."""
        answer = b""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s) as sock:
                sock.sendall(command.encode())
                while chunk := sock.recv(4096):
                    answer += chunk
        except OSError:
            return b""
        return answer

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


class ZooKeeperEnsemble:
    """``size`` servers on loopback forming one ensemble; ``address`` is the quorum string."""

    def __init__(self, directory: Path, size: int = 3, tick_ms: int = 200) -> None:
        picked = free_ports(2 * size)
        ports = [(picked[2 * i], picked[2 * i + 1]) for i in range(size)]
        peers = tuple(
            f"server.{i + 1}=127.0.0.1:{quorum}:{election}"
            for i, (quorum, election) in enumerate(ports)
        )
        self.servers = [
            ZooKeeperServer(directory / f"zk{i + 1}", tick_ms=tick_ms, server_id=i + 1, peers=peers)
            for i in range(size)
        ]

    @property
    def address(self) -> str:
        return ",".join(server.address for server in self.servers)

    def start(self, timeout_s: float = 60.0) -> None:
        """Start every server, then wait until each serves (a quorum formed)."""
        for server in self.servers:
            server.launch()
        for server in self.servers:
            server.wait_ready(timeout_s)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
