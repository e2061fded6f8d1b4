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
import sys
from collections import defaultdict
from typing import Any


def summarize(path: str) -> None:
    jobs: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as lines:
        events = [json.loads(line) for line in lines]
    for event in events:
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            jobs[event["Job ID"]] = {
                "group": props.get("spark.jobGroup.id", "-"),
                "site": (props.get("callSite.short") or "?").split(" at ")[0],
                "start": event["Submission Time"],
                "stages": len(event.get("Stage IDs", [])),
                "tasks": sum(s.get("Number of Tasks", 0) for s in event.get("Stage Infos", [])),
            }
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]]["end"] = event["Completion Time"]
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
