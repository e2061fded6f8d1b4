"""The job commands: ``sparkmill submit``, ``sparkmill jobs list|status|cancel|wait`` and
``sparkmill run`` (a pipeline on an embedded local cluster that lives for one job).

Waiting for a job shows a live progress line and ends with the job's outcome; the exit code says
how the job ended (:mod:`sparkmill.cli.exit_codes`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkmill.cli import keys
from sparkmill.cli.exit_codes import EXIT_JOB_FAILED, EXIT_OK, EXIT_UNREACHABLE
from sparkmill.cli.output import (
    Progress,
    details_json,
    print_details,
    print_result,
    result_json,
)
from sparkmill.cli.pipeline_loading import build_job_graph, load_pipeline
from sparkmill.common.core.states import JobStatus, job_status_name, job_status_of

if TYPE_CHECKING:
    from sparkmill.client import ClusterClient


def add_run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="run a pipeline on an embedded local cluster")
    run.add_argument("pipeline", type=Path)
    # One task executor with every slot: one Spark JVM on the machine instead of several
    # competing for its cores (each JVM costs seconds of CPU to start and hundreds of MB).
    run.add_argument("--task-executors", type=int, default=1)
    run.add_argument("--slots", type=int, default=4)
    run.add_argument("--dir", type=Path, help="cluster directory (default: a temporary one)")
    run.add_argument("--json", action="store_true")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``submit`` and ``jobs``."""
    submit = sub.add_parser("submit", help="submit a pipeline file to a cluster")
    submit.add_argument("pipeline", type=Path)
    submit.add_argument("--detach", action="store_true", help="return once submitted")
    submit.add_argument("--json", action="store_true")

    jobs = sub.add_parser("jobs", help="list, inspect, cancel or wait for jobs")
    jobs_sub = jobs.add_subparsers(dest="action", required=True)
    jobs_list = jobs_sub.add_parser("list")
    jobs_list.add_argument("--json", action="store_true")
    for action in ("status", "cancel", "wait"):
        p = jobs_sub.add_parser(action)
        p.add_argument("job_id")
        p.add_argument("--json", action="store_true")


def submit(client: ClusterClient, path: Path, *, detach: bool, as_json: bool) -> int:
    pipeline = load_pipeline(path)
    graph = pipeline.build_job_graph()
    job_id = client.submit(graph)
    if detach:
        print(json.dumps({"job_id": job_id, "status": "SUBMITTED"}) if as_json else job_id)
        return EXIT_OK
    if not as_json:
        print(f"submitted job {job_id} ('{graph.name}')", file=sys.stderr)
    return wait(client, job_id, as_json=as_json, pipeline=pipeline)


def wait(client: ClusterClient, job_id: str, *, as_json: bool, pipeline: Any = None) -> int:
    """Wait for the job to end, showing its progress; its outcome decides the exit code."""
    started = time.monotonic()
    progress = None if as_json else Progress()
    result = client.wait(job_id, progress=progress)
    if progress is not None:
        progress.done()
    duration = time.monotonic() - started
    if as_json:
        print(json.dumps(result_json(result, duration), indent=2))
    else:
        print_result(result, duration, pipeline)
    return EXIT_OK if job_status_of(result.status) is JobStatus.FINISHED else EXIT_JOB_FAILED


def jobs(client: ClusterClient, args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list(client, as_json=args.json)
    if args.action == "status":
        details = client.status(args.job_id)
        if args.json:
            print(json.dumps(details_json(details), indent=2))
        else:
            print_details(details)
        return EXIT_OK
    if args.action == "cancel":
        client.cancel(args.job_id)
        print(
            json.dumps({"job_id": args.job_id, "cancel": "requested"})
            if args.json
            else f"cancellation of {args.job_id} requested"
        )
        return EXIT_OK
    return wait(client, args.job_id, as_json=args.json)


def _list(client: ClusterClient, *, as_json: bool) -> int:
    listed = client.list_jobs()
    if as_json:
        rows = [
            {
                "job_id": j.job_id,
                "name": j.name,
                "status": job_status_name(j.status),
                "submitted_at": j.submitted_at,
                "total_tasks": j.total_tasks,
                "finished_tasks": j.finished_tasks,
            }
            for j in listed
        ]
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    print(f"{'JOB ID':<34}{'STATUS':<12}{'TASKS':>12}  NAME")
    for j in listed:
        print(
            f"{j.job_id:<34}{job_status_name(j.status):<12}"
            f"{f'{j.finished_tasks}/{j.total_tasks}':>12}  {j.name}"
        )
    return EXIT_OK


# -- sparkmill run --------------------------------------------------------------------------------


def run_cluster_config(pipeline: Any) -> dict[str, Any]:
    """What ``sparkmill run`` sets on its local cluster for ``pipeline``."""
    from sparkmill.pipeline import Pipeline

    if not isinstance(pipeline, Pipeline):
        return {}  # test operators need no Spark at all
    # A PySpark pipeline needs a Spark session: start it with the task executor, in parallel,
    # instead of on the first task. No warm-up job: the job is submitted while the session
    # starts, so a warm-up would only take cores from its tasks (which warm the JVM up
    # themselves).
    return {"spark.session.start": "eager", "spark.session.warm-up": False}


def run(args: argparse.Namespace) -> int:
    from sparkmill.client import ClusterClient
    from sparkmill.local_cluster import LocalCluster

    pipeline = load_pipeline(args.pipeline)  # fail fast, before starting any process
    graph = build_job_graph(pipeline, args.pipeline)
    with tempfile.TemporaryDirectory(prefix="sparkmill-run-") as tmp:
        directory = (args.dir or Path(tmp)).resolve()
        cluster = LocalCluster(
            directory,
            task_executors=args.task_executors,
            slots=args.slots,
            extra_config=run_cluster_config(pipeline),
        )
        print(
            f"starting a local cluster ({args.task_executors} task executors x {args.slots} "
            f"slots) in {directory}",
            file=sys.stderr,
        )
        try:
            cluster.start()
            with ClusterClient.from_config_file(cluster.config_path) as client:
                job_id = client.submit(graph)
                print(f"submitted job {job_id} ('{graph.name}')", file=sys.stderr)
                rest_url = client.cluster_status().dispatcher.rest_url
                if rest_url:
                    print(f"dashboard: {rest_url}/#/jobs/{job_id}", file=sys.stderr)
                    tokens = keys.rest_tokens_note(cluster.config_path)
                    print(f"rest tokens: {tokens}", file=sys.stderr)
                return wait(client, job_id, as_json=args.json, pipeline=pipeline)
        except (TimeoutError, RuntimeError) as exc:
            print(f"sparkmill: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        finally:
            cluster.stop()


__all__ = ["add_parsers", "add_run_parser", "jobs", "run", "run_cluster_config", "submit", "wait"]
