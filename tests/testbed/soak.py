"""Soak the test bed's cluster: a stream of HA pipelines while random faults hit random hosts.

    python -m tests.testbed.soak --minutes 10 [--seed N] [--concurrent 2]

Needs a bed that is up and converged (scripts/testbed.sh up, then ansible/site.yml; the default
bed unless SPARKMILL_TESTBED_STATE and SPARKMILL_TESTBED_NET name another). For ``--minutes``
it keeps ``--concurrent`` HA pipelines (tests/testbed/ha_pipeline.py: word count + join, exact
answers known; of every four, the second appends rows to a PostgreSQL table on the controller
instead, tests/testbed/soak_jdbc.py, and the third appends a day to a partitioned table,
tests/testbed/soak_append.py) running and, one at a time, powers off, partitions or pauses a
random host or stops a ZooKeeper server for 10-25 s, then waits until the cluster is whole
again. Then it stops submitting, undoes every fault, waits (bounded) for the jobs still running
and checks every output row by row. It prints jobs submitted / finished / failed / lost, rows
wrong, rows duplicated, staging tables left and each leader failover's time (median, max); exit 0
when nothing was lost, failed, wrong, duplicated or left behind.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

from sparkmill.client import ClusterClient
from sparkmill.common.core.errors import NotFoundError, SparkmillError
from sparkmill.common.v1 import common_pb2
from tests.testbed import ha_data
from tests.testbed.bed import STATE, TestBed, parse_inventory
from tests.testbed.cluster import (
    TERMINAL,
    HaJob,
    LeaderWatch,
    answer,
    cluster_client,
    host_of,
    status_name,
    submit_ha,
    wait_cluster,
)
from tests.testbed.faults import Fault, Faults, wait_services
from tests.testbed.soak_append import check_append, next_day, submit_append
from tests.testbed.soak_jdbc import SoakDatabase
from tests.testbed.soak_jdbc import available as database_available

FAULT_S = (10.0, 25.0)  # how long each fault lasts
CALM_S = (5.0, 15.0)  # between the cluster being whole again and the next fault
DRAIN_S = 300.0  # at most this long for the jobs still running at the end
# How often the running jobs are asked for their status: a slot of the soak stays empty from
# a job's end until the next poll sees it (at 2 s, about a fifth of the jobs' time).
POLL_S = 0.5


@dataclass
class SoakReport:
    submitted: int = 0
    finished: int = 0
    failed: int = 0
    lost: int = 0
    rows_checked: int = 0
    rows_wrong: int = 0
    rows_duplicated: int = 0
    database_jobs: int = 0
    auto_parallelism_jobs: int = 0  # HA jobs whose parallelism the JobMaster decided
    speculative_attempts: int = 0  # started in the jobs that ended (their last JobMaster's)
    speculative_wins: int = 0
    staging_left: int = 0
    password_in_journals: int = 0
    faults: list[str] = field(default_factory=list)
    failovers: dict[str, list[float]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # For each job that was lost or failed: every journal line of the bed that names it.
    job_logs: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (
            self.failed
            or self.lost
            or self.rows_wrong
            or self.rows_duplicated
            or self.staging_left
            or self.password_in_journals
        )

    def summary(self) -> str:
        lines = [
            f"jobs: {self.submitted} submitted, {self.finished} finished, {self.failed} failed,"
            f" {self.lost} lost; {self.auto_parallelism_jobs} with automatic parallelism"
            f" and speculation ({self.speculative_attempts} speculative attempts,"
            f" {self.speculative_wins} won)",
            f"rows: {self.rows_checked} checked, {self.rows_wrong} wrong,"
            f" {self.rows_duplicated} duplicated",
            f"database: {self.database_jobs} jobs, {self.staging_left} staging tables left,"
            f" password in {self.password_in_journals} journal lines",
            f"faults ({len(self.faults)}): {', '.join(self.faults) or '-'}",
        ]
        every = [t for times in self.failovers.values() for t in times]
        for name, times in [*sorted(self.failovers.items()), ("all failovers", every)]:
            if times:
                lines.append(
                    f"{name}: {len(times)}, median {statistics.median(times):.2f} s,"
                    f" max {max(times):.2f} s"
                )
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines)


class Soak:
    def __init__(
        self,
        bed: TestBed,
        minutes: float,
        seed: int,
        concurrent: int,
        calm_s: tuple[float, float] = CALM_S,
    ) -> None:
        self.bed = bed
        self.deadline = time.monotonic() + minutes * 60
        self.calm_s = calm_s
        self.rng = random.Random(seed)
        self.concurrent = concurrent
        self.faults = Faults(bed)
        self.report = SoakReport()
        self.jobs: list[HaJob] = []
        self.results: dict[str, int] = {}  # job id -> terminal status
        self.last_seen: dict[str, str] = {}  # job id -> what its last status query said
        self.auto_jobs: set[str] = set()  # HA jobs submitted without a parallelism
        self.appends: dict[str, int] = {}  # job id -> the day an appending job writes
        self.writes: dict[str, str] = {}  # job id -> the name a database job writes
        self.database: SoakDatabase | None = None
        self.stop = threading.Event()
        self.answer = answer(bed)

    # -- jobs --------------------------------------------------------------------------------

    def _poll(self, client: ClusterClient, job: HaJob) -> None:
        try:
            details = client.status(job.job_id, timeout=30)
        except NotFoundError:
            self.results[job.job_id] = -1  # the cluster forgot it: lost
            return
        except SparkmillError as exc:
            self.last_seen[job.job_id] = f"{type(exc).__name__}: {exc}"
            return  # a failover under way: ask again later
        status = details.status
        self.last_seen[job.job_id] = status_name(status)
        if status == common_pb2.FAILED:
            # Why, for the report: the failure and every root cause the JobMaster recorded.
            causes = [
                f"{e.vertex_name} ({e.subtask_index + 1}) attempt #{e.attempt_number}: "
                f"{e.error.message[:300]}"
                for e in details.exceptions
            ]
            self.last_seen[job.job_id] = "; ".join([details.failure.message[:1000], *causes[-3:]])
        if status in TERMINAL:
            self.results[job.job_id] = status
            self.report.speculative_attempts += sum(
                v.speculative_attempts for v in details.vertices
            )
            self.report.speculative_wins += sum(v.speculative_wins for v in details.vertices)

    def _running(self) -> list[HaJob]:
        return [j for j in self.jobs if j.job_id not in self.results]

    def run_jobs(self, client: ClusterClient, watch: LeaderWatch) -> None:
        while time.monotonic() < self.deadline:
            for job in self._running():
                self._poll(client, job)
            if len(self._running()) < self.concurrent:
                name = f"soak-{int(time.time())}-{len(self.jobs)}"
                try:
                    if len(self.jobs) % 4 == 2:
                        day = next_day()
                        job_id = submit_append(client, self.bed, name, day)
                        self.appends[job_id] = day
                        job = HaJob(job_id, self.bed.shared, None, time.time())
                    elif len(self.jobs) % 4 == 1 and self.database is not None:
                        job_id = self.database.submit(client, name)
                        self.writes[job_id] = name
                        job = HaJob(job_id, self.bed.shared, None, time.time())
                    else:
                        # Every other HA job leaves its parallelism to the JobMaster.
                        auto = len(self.jobs) % 4 == 3
                        job = submit_ha(client, self.bed, name, auto=auto)
                        self.report.auto_parallelism_jobs += auto
                        if auto:
                            self.auto_jobs.add(job.job_id)
                except SparkmillError as exc:
                    self.report.problems.append(f"submit {name}: {type(exc).__name__}: {exc}")
                else:
                    self.jobs.append(job)
                    watch.watch(f"job-{job.job_id}")
                    continue
            time.sleep(POLL_S)

    def drain(self, client: ClusterClient) -> None:
        deadline = time.monotonic() + DRAIN_S
        while self._running() and time.monotonic() < deadline:
            for job in self._running():
                self._poll(client, job)
            if self._running():
                time.sleep(POLL_S)

    # -- faults ------------------------------------------------------------------------------

    def _pick(self) -> tuple[str, str]:
        kind = self.rng.choice(["poweroff", "partition", "pause", "zk-stop"])
        hosts = self.bed.groups["zookeeper"] if kind == "zk-stop" else list(self.bed.addresses)
        return kind, self.rng.choice(hosts)

    def inject_faults(self, watch: LeaderWatch) -> None:
        while not self.stop.is_set():
            self.stop.wait(self.rng.uniform(*self.calm_s))
            if self.stop.is_set() or time.monotonic() >= self.deadline:
                return
            kind, host = self._pick()
            before = {role: watch.leader(role) for role in list(watch.roles)}
            fault = self.faults.inject(kind, host)
            self.report.faults.append(f"{kind} {host}")
            print(f"[soak] {time.strftime('%H:%M:%S')} {kind} {host}", flush=True)
            self.stop.wait(self.rng.uniform(*FAULT_S))
            self.faults.undo(fault)
            self._failovers(watch, fault, before)
            try:
                wait_services(self.bed)
                wait_cluster(self.bed)
            except AssertionError as exc:
                self.report.problems.append(f"after {kind} {host}: {exc}")
                self.faults.heal_all()

    def _failovers(self, watch: LeaderWatch, fault: Fault, before: dict[str, str | None]) -> None:
        """A failover per leader that was on the faulted host (a ZooKeeper stop moves none)."""
        if fault.kind == "zk-stop":
            return
        for role, leader in before.items():
            if leader is None or host_of_or_none(self.bed, leader) != fault.host:
                continue
            took = watch.failover_after(role, fault.at, leader)
            kind = "job-master" if role.startswith("job-") else role
            if took is not None:
                self.report.failovers.setdefault(f"{kind} after {fault.kind}", []).append(took)

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> SoakReport:
        with ExitStack() as stack:
            if database_available():
                self.database = stack.enter_context(SoakDatabase(self.bed))
            else:
                self.report.problems.append(
                    "no database job: Debian's postgresql or libpostgresql-jdbc-java is missing"
                )
            self._run()
            self.check()
        return self.report

    def _run(self) -> None:
        with cluster_client(self.bed) as client, LeaderWatch(self.bed) as watch:
            injector = threading.Thread(target=self.inject_faults, args=(watch,), daemon=True)
            injector.start()
            try:
                self.run_jobs(client, watch)
            finally:
                self.stop.set()
                injector.join(timeout=FAULT_S[1] + 400)
                self.faults.heal_all()
            wait_services(self.bed)
            wait_cluster(self.bed)
            self.drain(client)
            if self.database is not None and self.database.staging_tables_now():
                self._last_database_job(client)

    def _last_database_job(self, client: ClusterClient) -> None:
        """One more database job once every fault has healed, when staging tables are left: its
        commit drops those that attempts killed in the middle of a write left behind (their
        sessions held them until the database's keepalive probes found them dead)."""
        assert self.database is not None
        name = f"soak-last-{int(time.time())}"
        try:
            job_id = self.database.submit(client, name)
        except SparkmillError as exc:
            self.report.problems.append(f"submit {name}: {type(exc).__name__}: {exc}")
            return
        self.writes[job_id] = name
        self.jobs.append(HaJob(job_id, self.bed.shared, None, time.time()))
        self.drain(client)

    def check(self) -> None:
        r = self.report
        r.submitted = len(self.jobs)
        for job in self.jobs:
            status = self.results.get(job.job_id)
            if status == common_pb2.FINISHED:
                r.finished += 1
                if job.job_id in self.appends or job.job_id in self.writes:
                    continue  # checked together below
                got = ha_data.check(job.output, self.answer)
                r.rows_checked += got.rows
                r.rows_wrong += got.wrong
                r.rows_duplicated += got.duplicated
                if not got.exact:
                    r.problems.append(f"job {job.job_id[:8]} ({job.output}): {got}")
            elif status is None or status == -1:
                r.lost += 1
                kind = (
                    "database "
                    if job.job_id in self.writes
                    else "appending "
                    if job.job_id in self.appends
                    else ""
                )
                seen = self.last_seen.get(job.job_id, "never answered")
                r.problems.append(
                    f"{kind}job {job.job_id} lost (status {status}; last seen: {seen})"
                )
                r.job_logs[job.job_id] = self._journal_lines_of(job.job_id)
            else:
                r.failed += 1
                kind = "automatic-parallelism " if job.job_id in self.auto_jobs else ""
                why = self.last_seen.get(job.job_id, "")
                r.problems.append(f"{kind}job {job.job_id[:8]} ended {status_name(status)}: {why}")
                r.job_logs[job.job_id] = self._journal_lines_of(job.job_id)
        done = {j: d for j, d in self.appends.items() if self.results.get(j) == common_pb2.FINISHED}
        rest = {j: d for j, d in self.appends.items() if j not in done}
        appended = check_append(self.bed, done, rest)
        r.rows_checked += appended.rows
        r.rows_wrong += appended.wrong
        r.rows_duplicated += appended.duplicated
        if appended.wrong or appended.duplicated:
            r.problems.append(f"appending jobs: {appended}")
        if self.database is not None:
            self._check_database()

    def _journal_lines_of(self, job_id: str, lines: int = 80) -> str:
        """The last ``lines`` journal lines of each host that name the job (by its short id, as
        the services log it): what a failing soak needs to say why the job went astray."""
        out = []
        for host in self.bed.addresses:
            result = self.bed.ssh(
                host,
                f"journalctl --no-pager -o short-precise | grep -F {job_id[:8]} | tail -n {lines}",
                timeout=60,
                check=False,
            )
            if result.stdout.strip():
                out.append(f"===== {host}\n{result.stdout.rstrip()}")
        return "\n".join(out) or "(no journal line names it)"

    def _check_database(self) -> None:
        assert self.database is not None
        r = self.report
        finished = {n for j, n in self.writes.items() if self.results.get(j) == common_pb2.FINISHED}
        written = self.database.check(finished)
        r.database_jobs = len(self.writes)
        r.rows_checked += written.rows
        r.rows_wrong += written.wrong
        r.rows_duplicated += written.duplicated
        r.staging_left = written.staging_left
        r.password_in_journals = written.password_in_journals
        if written != type(written)(rows=written.rows):
            r.problems.append(f"database jobs: {written}")


def host_of_or_none(bed: TestBed, address: str) -> str | None:
    try:
        return host_of(bed, address)
    except AssertionError:
        return None


def soak(
    bed: TestBed,
    minutes: float,
    seed: int = 1,
    concurrent: int = 2,
    calm_s: tuple[float, float] = CALM_S,
) -> SoakReport:
    """``calm_s``: the range of the pause between the cluster being whole again and the next
    fault (drawn from the seeded generator; the faults' kinds, hosts and lengths do not depend
    on it, so a shorter calm brings the same faults sooner)."""
    return Soak(bed, minutes, seed, concurrent, calm_s).run()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.testbed.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="also print the report as JSON")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    addresses, groups = parse_inventory(STATE / "inventory.ini")
    bed = TestBed(inventory=STATE / "inventory.ini", addresses=addresses, groups=groups)
    print(f"[soak] {args.minutes:g} min, seed {args.seed}", flush=True)
    report = soak(bed, args.minutes, args.seed, args.concurrent)
    print(report.summary())
    if args.json:
        print(json.dumps(report.__dict__, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
