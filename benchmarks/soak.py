#!/usr/bin/env python3
"""The test bed's soak at full length: HA pipelines under random faults for 10 minutes.

    sudo PYTHONPATH=. .venv/bin/python benchmarks/soak.py [--minutes 10] [--seed 13] [--reuse]

The test suite runs the same soak (tests/testbed/soak.py) for 3 minutes, enough to check that a
few faults lose no job and write no row wrong or twice; this runs it long enough for failover
statistics (median and max per kind of fault, docs/performance.md). It brings the test bed up
(scripts/testbed.sh up: five systemd-nspawn hosts on a /24 of 198.18.0.0/15), converges
ansible/site.yml once, soaks, prints the report and removes the bed again; ``--reuse`` soaks a
bed that is already up and converged and leaves it up. Needs root, like the test bed. Exit 0
when no job was lost or failed and no row was wrong or duplicated.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.testbed.bed import CACHE, CannotRun, existing_bed, running_bed  # noqa: E402
from tests.testbed.cluster import wait_cluster  # noqa: E402
from tests.testbed.soak import SoakReport, soak  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--concurrent", type=int, default=2, help="HA pipelines at a time")
    parser.add_argument("--reuse", action="store_true", help="a bed already up and converged")
    args = parser.parse_args()
    if args.minutes <= 0:
        parser.error("--minutes must be positive")

    def run(bed_report: list[SoakReport]) -> None:
        print(f"[soak] {args.minutes:g} min, seed {args.seed}", flush=True)
        began = time.monotonic()
        bed_report.append(soak(bed, args.minutes, args.seed, args.concurrent))
        print(f"[soak] {time.monotonic() - began:.0f} s in all", flush=True)

    reports: list[SoakReport] = []
    if args.reuse:
        bed = existing_bed()
        wait_cluster(bed)
        run(reports)
    else:
        try:
            with running_bed(second_converge=False) as bed:
                converge = bed.converges[0]
                if converge.returncode != 0:
                    print(converge.stdout[-6000:], converge.stderr[-2000:], file=sys.stderr)
                    return 1
                print(f"[soak] bed up and converged: {bed.timings}", flush=True)
                wait_cluster(bed)
                run(reports)
        except CannotRun as exc:
            print(f"[soak] {exc}", file=sys.stderr)
            return 77
    report = reports[0]
    print(report.summary())
    (CACHE / "soak-report.json").write_text(json.dumps(report.__dict__, default=str) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
