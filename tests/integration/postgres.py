"""A throw-away PostgreSQL server for tests: Debian's ``postgresql`` binaries, a fresh data
directory, a free loopback port, run as an unprivileged user (``nobody`` when the tests run as
root: PostgreSQL refuses to run as root), removed afterwards.

The superuser ``sparkmill`` logs in with a password (scram-sha-256) over TCP only: no Unix
socket, nothing outside the temporary directory. By default it listens on loopback only; the
test bed's soak also lets it listen on the controller's address on the bed's bridge (``listen``)
and admits the bed's network (``allow``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sparkmill.common.core.free_ports import free_port

USER = "sparkmill"
DATABASE = "postgres"
JDBC_JAR = Path("/usr/share/java/postgresql.jar")


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's binary directory."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


def postgres_available() -> bool:
    return postgres_bin() is not None and JDBC_JAR.is_file()


class PostgresServer:
    def __init__(self, *, listen: tuple[str, ...] = (), allow: tuple[str, ...] = ()) -> None:
        """``listen``: addresses to listen on besides 127.0.0.1; ``allow``: networks (CIDR)
        whose clients may log in with the password, besides loopback."""
        binaries = postgres_bin()
        if binaries is None:
            raise RuntimeError("Debian's postgresql package is not installed")
        self.bin = binaries
        self.listen = listen
        self.allow = allow
        self.password = secrets.token_urlsafe(18)
        self.port = free_port()
        self.base = Path(tempfile.mkdtemp(prefix="sparkmill-pg-"))
        self.data = self.base / "data"
        self._process: subprocess.Popen[bytes] | None = None
        self._log = self.base / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(self.base, nobody.pw_uid, nobody.pw_gid)
            self._as = [
                "setpriv",
                f"--reuid={nobody.pw_uid}",
                f"--regid={nobody.pw_gid}",
                "--clear-groups",
                "--",
            ]

    @property
    def url(self) -> str:
        return self.url_on("127.0.0.1")

    def url_on(self, address: str) -> str:
        """The JDBC URL through ``address`` (127.0.0.1 or one of ``listen``)."""
        return f"jdbc:postgresql://{address}:{self.port}/{DATABASE}"

    def _run_as(self, args: list[str]) -> None:
        subprocess.run(
            [*self._as, *args], check=True, capture_output=True, cwd=self.base, timeout=120
        )

    def start(self) -> PostgresServer:
        pwfile = self.base / "pw"
        pwfile.write_text(self.password + "\n")
        if self._as:
            nobody = pwd.getpwnam("nobody")
            os.chown(pwfile, nobody.pw_uid, nobody.pw_gid)
        pwfile.chmod(0o600)
        self._run_as(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                USER,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ]
        )
        pwfile.unlink()
        if self.allow:
            with (self.data / "pg_hba.conf").open("a") as hba:
                for network in self.allow:
                    hba.write(f"host all {USER} {network} scram-sha-256\n")
        log = self._log.open("wb")
        self._process = subprocess.Popen(
            [
                *self._as,
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=" + ",".join(["127.0.0.1", *self.listen]),
                "-c",
                "unix_socket_directories=",
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=60",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.base,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"PostgreSQL did not start: {self.logs()}")
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
            )
            if ready.returncode == 0:
                return self
            time.sleep(0.2)
        raise RuntimeError(f"PostgreSQL not ready within 60 s: {self.logs()}")

    def logs(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def _psql(self, *args: str) -> list[str]:
        """psql's command line for this server's database, stopping at the first error."""
        return [
            str(self.bin / "psql"),
            *("-h", "127.0.0.1", "-p", str(self.port), "-U", USER, "-d", DATABASE),
            *("-v", "ON_ERROR_STOP=1", *args),
        ]

    def _psql_env(self) -> dict[str, str]:
        return {**os.environ, "PGPASSWORD": self.password}

    def psql(self, sql: str) -> list[list[str]]:
        """Run ``sql`` (statements separated by ';') and return the rows of the last one."""
        done = subprocess.run(
            self._psql("-At", "-F", "\t", "-c", sql),
            capture_output=True,
            text=True,
            env=self._psql_env(),
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.strip()}")
        return [line.split("\t") for line in done.stdout.splitlines() if line]

    @contextlib.contextmanager
    def open_transaction(self, sql: str) -> Iterator[None]:
        """A session that runs ``sql`` inside a transaction and leaves it open until the block
        ends: what the server sees of a client that died in the middle of a write."""
        session = subprocess.Popen(
            self._psql("-q"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self._psql_env(),
        )
        assert session.stdin is not None and session.stdout is not None
        try:
            session.stdin.write(f"BEGIN;\n{sql};\n\\echo transaction-open\n")
            session.stdin.flush()
            said = session.stdout.readline()
            if "transaction-open" not in said:
                raise RuntimeError(f"psql did not open the transaction: {said.strip()}")
            yield
        finally:
            session.stdin.close()  # psql ends; the server rolls the transaction back
            try:
                session.wait(timeout=30)
            except subprocess.TimeoutExpired:
                session.kill()
                session.wait(timeout=30)

    def credentials_file(self, directory: Path, *, password: str | None = None) -> Path:
        path = directory / "db.credentials"
        path.write_text(
            f"user={USER}\npassword={self.password if password is None else password}\n"
        )
        path.chmod(0o600)
        return path

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=30)
        shutil.rmtree(self.base, ignore_errors=True)
