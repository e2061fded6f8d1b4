"""The soak's database job: each submission appends ``ROWS`` rows with ids ``0..ROWS-1`` and its
own name in the column ``job`` to one PostgreSQL table (``write_jdbc``, mode append).

The server is a throw-away PostgreSQL on the controller (tests/integration/postgres.py),
listening on the controller's address on the bed's bridge and admitting the bed's /24 only.
Every task executor host gets Debian's JDBC driver (``TestBed.install_jdbc_driver``) and a
credentials file of its own, private to the user the pipeline code runs as; the password goes
to the hosts on ssh's standard input, never on a command line.

Exactly once, at the end: every FINISHED job's name has each id exactly once, every other job's
name has no row, no staging table is left, and no host's journal holds the password.
"""

from __future__ import annotations

import shlex
import time
from collections import Counter
from dataclasses import dataclass
from types import TracebackType

import sparkmill as sm
from sparkmill import functions as F
from sparkmill.client import ClusterClient
from tests.integration.postgres import USER, PostgresServer, postgres_available
from tests.testbed.bed import CONTROLLER_ADDRESS, TestBed
from tests.testbed.cluster import wait_cluster

ROWS = 2000
TABLE = "soak_events"
# On every task executor host, readable only by the user the pipeline workers run as (the
# play's sparkmill_pipeline_user): the JDBC sink runs there.
CREDENTIALS = "/var/lib/sparkmill-soak/db.credentials"
SERVICE_USER = "sparkmill-pipeline"
TASK_EXECUTOR_UNIT = "sparkmill-task-executor@1.service"


@dataclass(frozen=True)
class JdbcCheck:
    rows: int = 0
    wrong: int = 0
    duplicated: int = 0
    staging_left: int = 0
    password_in_journals: int = 0
    staging_tables: tuple[str, ...] = ()  # the names of those left, to find their jobs


def available() -> bool:
    """This machine can run the database job (Debian's postgresql and its JDBC driver)."""
    return postgres_available()


class SoakDatabase:
    """The server, the hosts' driver and credentials; ``with`` starts and removes the server."""

    def __init__(self, bed: TestBed) -> None:
        self.bed = bed
        network = CONTROLLER_ADDRESS.rsplit(".", 1)[0] + ".0/24"
        self.server = PostgresServer(listen=(CONTROLLER_ADDRESS,), allow=(network,))
        self.url = self.server.url_on(CONTROLLER_ADDRESS)

    def __enter__(self) -> SoakDatabase:
        self.server.start()
        try:
            self._prepare_hosts()
        except BaseException:
            self.server.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.server.stop()

    def _prepare_hosts(self) -> None:
        restart = self.bed.install_jdbc_driver()
        path = shlex.quote(CREDENTIALS)
        directory = shlex.quote(CREDENTIALS.rsplit("/", 1)[0])
        for host in self.bed.groups["task_executors"]:
            self.bed.ssh(
                host,
                f"install -d -m 0700 -o {SERVICE_USER} {directory} && umask 077 &&"
                f" cat > {path} && chown {SERVICE_USER} {path}",
                stdin=f"user={USER}\npassword={self.server.password}\n",
            )
        # A task executor started before the jar was there (a bed reused across runs) has a
        # Spark session without the driver.
        for host in restart:
            self.bed.ssh(host, f"systemctl restart {TASK_EXECUTOR_UNIT}")
        if restart:
            wait_cluster(self.bed)

    def submit(self, client: ClusterClient, name: str) -> str:
        pipeline = sm.Pipeline(f"soak-jdbc-{name}", parallelism=3)
        (
            pipeline.range(ROWS)
            .with_column("job", F.lit(name))
            .write_jdbc(self.url, TABLE, mode="append", credentials_file=CREDENTIALS)
        )
        return client.submit(pipeline.build_job_graph(), timeout=120)

    def check(self, finished: set[str]) -> JdbcCheck:
        """``finished``: the names of the FINISHED database jobs; a row of any other name (a
        job that failed, was cancelled or lost) is wrong."""
        exists = self.server.psql(f"SELECT to_regclass('{TABLE}') IS NOT NULL")
        rows: Counter[tuple[str, int]] = Counter()
        if exists == [["t"]]:
            for job, row_id, times in self.server.psql(
                f"SELECT job, id, COUNT(*) FROM {TABLE} GROUP BY job, id"
            ):
                rows[(job, int(row_id))] = int(times)
        total = wrong = duplicated = 0
        for name in finished:
            for ident in range(ROWS):
                count = rows.pop((name, ident), 0)
                total += count
                wrong += count == 0
                duplicated += max(count - 1, 0)
        # What is left: rows of jobs that did not finish, of no job of this soak, or bad ids.
        wrong += sum(rows.values())
        staging = self._staging_tables()
        return JdbcCheck(
            rows=total,
            wrong=wrong,
            duplicated=duplicated,
            staging_left=len(staging),
            password_in_journals=self._password_in_journals(),
            staging_tables=staging,
        )

    def _staging_tables(self, grace_s: float = 30.0) -> tuple[str, ...]:
        """The staging tables still there once ``grace_s`` has passed: an attempt that outlived
        its JobMaster (a paused host's) ends a little after its job did, and drops its table
        then, whether it was cancelled or found the job committed."""
        deadline = time.monotonic() + grace_s
        while True:
            names = self.staging_tables_now()
            if not names or time.monotonic() > deadline:
                return names
            time.sleep(1.0)

    def staging_tables_now(self) -> tuple[str, ...]:
        return tuple(
            row[0]
            for row in self.server.psql(
                "SELECT table_name FROM information_schema.tables"
                f" WHERE table_name LIKE '{TABLE}\\_\\_sm\\_%' ORDER BY table_name"
            )
        )

    def _password_in_journals(self) -> int:
        """Lines of the hosts' journals holding the password (counted on the hosts: the
        password is compared there, from the credentials file, and never travels back)."""
        path = shlex.quote(CREDENTIALS)
        found = 0
        for host in self.bed.groups["task_executors"]:
            result = self.bed.ssh(
                host,
                f"umask 077; p=$(mktemp); sed -n 's/^password=//p' {path} > $p;"
                f" journalctl --no-pager -o cat | grep -c -F -f $p; rm -f $p",
                timeout=120,
                check=False,
            )
            found += int(result.stdout.strip() or 0)
        return found
