"""Where a sparkmill job's Spark time goes, from a task executor's Spark event log.

    # run the cluster with spark.conf.spark.eventLog.enabled: true and
    # spark.conf.spark.eventLog.dir: file:///tmp/events, then
    python benchmarks/spark_event_summary.py /tmp/events/*

Prints, per task attempt (the job group ``sparkmill-{attempt_id}``), every Spark job it
launched: its call site, stages, tasks and wall time, and the attempt's first-job-start to
last-job-end span. Jobs outside any attempt (the session's warm-up) are listed as ``-``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _lines(path: str) -> list[str]:
    """The JSON lines of an event log: a file, or Spark 4's rolling directory
    (``eventlog_v2_*/events_N_*``), each file plain or compressed with zstd (Spark 4's
    default; decompressed with the ``zstd`` command)."""
    target = Path(path)
    files = [target]
    if target.is_dir():
        files = sorted(
            (f for f in target.iterdir() if f.name.startswith("events_")),
            key=lambda f: int(f.name.split("_")[1]),
        )
    lines: list[str] = []
    for file in files:
        if file.suffix == ".zstd":
            text = subprocess.run(
                ["zstd", "-dcq", str(file)], capture_output=True, text=True, check=True
            ).stdout
        else:
            text = file.read_text(encoding="utf-8")
        lines.extend(line for line in text.splitlines() if line.strip())
    return lines


def read_jobs(path: str) -> dict[int, dict[str, Any]]:
    """Every Spark job of the event log: its job group, call site, the stages and tasks it ran
    (a stage another job already ran - a shuffle reused, a query stage of adaptive execution -
    is skipped, not counted), times."""
    jobs: dict[int, dict[str, Any]] = {}
    ran: list[tuple[int, float, int]] = []  # stage id, submission time, tasks
    events = [json.loads(line) for line in _lines(path)]
    for event in events:
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            jobs[event["Job ID"]] = {
                "group": props.get("spark.jobGroup.id", "-"),
                "site": (props.get("callSite.short") or "?").split(" at ")[0],
                "start": event["Submission Time"],
                "stage_ids": set(event.get("Stage IDs", [])),
                "stages": 0,
                "tasks": 0,
            }
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]]["end"] = event["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            submitted = info.get("Submission Time", 0)
            ran.append((info["Stage ID"], submitted, info.get("Number of Tasks", 0)))
    for stage, submitted, tasks in ran:
        # The stage ran for the latest job that lists it and was submitted before it.
        owners = [j for j in jobs.values() if stage in j["stage_ids"] and j["start"] <= submitted]
        if owners:
            owner = max(owners, key=lambda j: j["start"])
            owner["stages"] += 1
            owner["tasks"] += tasks
    return jobs


def summarize(path: str) -> None:
    jobs = read_jobs(path)
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for job_id, job in sorted(jobs.items()):
        groups[job["group"]].append((job_id, job))
    print(f"== {path}: {len(jobs)} Spark jobs in {len(groups)} groups")
    for group, members in groups.items():
        start = min(j["start"] for _, j in members)
        end = max(j.get("end", j["start"]) for _, j in members)
        print(f"{group[:40]:<40} {len(members)} jobs, span {(end - start) / 1000:.2f}s")
        for job_id, job in members:
            took = (job.get("end", job["start"]) - job["start"]) / 1000
            print(
                f"    job {job_id:>4} {job['site']:<28} {job['stages']} stages "
                f"{job['tasks']:>4} tasks {took:6.2f}s"
            )


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        summarize(argument)
