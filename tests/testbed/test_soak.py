"""HA across hosts, scenario 6: a soak with random faults of every kind (tests/testbed/soak.py).

SPARKMILL_SOAK_MINUTES sets its length: 1.75 minutes in the suite (every job checked row by row,
the database jobs' rows in PostgreSQL too); the 10-minute soak with its failover statistics is a
benchmark, ``benchmarks/soak.py``, running the same code.

The faults are drawn from a seeded generator (SPARKMILL_SOAK_SEED): the suite's seed, 36, opens
with every kind a host can suffer, the most severe first: a power-off of h3 (a ZooKeeper server,
a JobMaster process and a task executor at once), a partition of h2 (a dispatcher and a resource
manager, a leader or a standby), a pause of h5, then a ZooKeeper server stopped.
(The earlier seed, 13, spent its first two minutes on two partitions of one host and a pause.)
The suite's soak waits 2-6 s between the cluster being whole again and the next fault (the
benchmark 5-15 s): the same faults come sooner, and all four kinds fit into the shorter soak -
the test checks that they did, with the suite's seed and length.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.testbed.bed import CACHE, TestBed
from tests.testbed.cluster import skip_when_scenarios_off, wait_cluster
from tests.testbed.soak import soak
from tests.testbed.soak_jdbc import available as database_available

MINUTES = float(os.environ.get("SPARKMILL_SOAK_MINUTES", "1.75"))
SEED = int(os.environ.get("SPARKMILL_SOAK_SEED", "36"))
CALM_S = (2.0, 6.0)
EVERY_KIND = {"poweroff", "partition", "pause", "zk-stop"}

pytestmark = [pytest.mark.timeout(int(MINUTES * 60) + 1800), skip_when_scenarios_off]


def test_soak_random_faults_lose_no_job_and_write_no_row_wrong_or_twice(bed: TestBed) -> None:
    wait_cluster(bed)
    report = soak(bed, MINUTES, seed=SEED, calm_s=CALM_S)
    print(f"\nsoak of {MINUTES:g} min:\n{report.summary()}")
    # A lost or failed job's own journal lines go into the failure message: they are what
    # says why, and CI keeps only the end of the output.
    why = report.summary() + "".join(
        f"\n----- the journals on job {job}:\n{lines}" for job, lines in report.job_logs.items()
    )
    (CACHE / "soak-report.json").write_text(json.dumps(report.__dict__, default=str) + "\n")
    assert report.submitted >= 2 and report.faults, report.summary()
    assert report.auto_parallelism_jobs >= 1, report.summary()
    if SEED == 36 and MINUTES >= 1.75:  # the suite's soak: every kind of fault, none left out
        assert {fault.split()[0] for fault in report.faults} == EVERY_KIND, report.summary()
    if database_available():  # scripts/bootstrap.sh --test installs it
        assert report.database_jobs >= 1, report.summary()
    assert report.staging_left == 0 and report.password_in_journals == 0, report.summary()
    assert report.lost == 0, why
    assert report.rows_wrong == 0 and report.rows_duplicated == 0, report.summary()
    assert report.failed == 0, why
    assert report.finished == report.submitted, report.summary()
