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
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkmill.cli import job_logs, keys
from sparkmill.cli.exit_codes import EXIT_JOB_FAILED, EXIT_OK, EXIT_UNREACHABLE
from sparkmill.cli.explain import expected_parallelism
from sparkmill.cli.options import CONFIG_ENV, SubParsers, add_config_options, config_source
from sparkmill.cli.output import (
    Progress,
    details_json,
    print_details,
    print_result,
    result_json,
)
from sparkmill.cli.pipeline_loading import attach_pipeline_args, build_job_graph, load_pipeline
from sparkmill.common.core.errors import ConfigurationError, SparkmillError
from sparkmill.common.core.states import JobStatus, job_status_name, job_status_of

if TYPE_CHECKING:
    from sparkmill.client import ClusterClient
    from sparkmill.common.jobgraph.model import JobGraph


PIPELINE_HELP = "the pipeline file (its own arguments go after `--`: FILE -- --input x)"
JSON_HELP = "print a JSON document instead of text (errors too)"


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_run_parser(sub: SubParsers[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run",
        help="run a pipeline on an embedded local cluster",
        description="Start a local cluster, run the pipeline on it, show the result and stop "
        "the cluster: sparkmill run FILE [-- ARGS...]",
    )
    run.add_argument("pipeline", type=Path, metavar="FILE", help=PIPELINE_HELP)
    # One task executor with every slot by default: one Spark JVM on the machine instead of
    # several competing for its cores (each JVM costs seconds of CPU to start and hundreds of MB).
    run.add_argument(
        "--elastic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the resource manager starts the task executors the job needs (its slots, known "
        "before submission) through its local driver, up to --max-task-executors (the "
        "default); --no-elastic: start --task-executors up front",
    )
    run.add_argument(
        "--max-task-executors",
        type=positive,
        default=1,
        help="elastic: at most this many task executors (default 1)",
    )
    run.add_argument(
        "--task-executors",
        type=positive,
        default=None,
        help="start this many task executors up front instead (implies --no-elastic; "
        "default 1 with --no-elastic)",
    )
    run.add_argument("--slots", type=positive, default=4, help="slots per task executor")
    run.add_argument("--dir", type=Path, help="cluster directory (default: a temporary one)")
    run.add_argument("--json", action="store_true", help=JSON_HELP)
    add_config_options(
        run,
        config_help="configuration keys (YAML) for the local cluster, e.g. spark.master or "
        f"restart-strategy.type (${CONFIG_ENV} is not read: it names a running cluster)",
    )


def add_parsers(sub: SubParsers[argparse.ArgumentParser]) -> None:
    """``submit`` and ``jobs``."""
    submit = sub.add_parser(
        "submit",
        help="submit a pipeline file to a cluster",
        description="Submit a pipeline to a running cluster and wait for its outcome: "
        "sparkmill submit FILE [-- ARGS...]",
    )
    submit.add_argument("pipeline", type=Path, metavar="FILE", help=PIPELINE_HELP)
    submit.add_argument("--detach", action="store_true", help="return once submitted")
    submit.add_argument("--json", action="store_true", help=JSON_HELP)
    add_config_options(submit)

    jobs = sub.add_parser("jobs", help="list, inspect, cancel or wait for jobs")
    jobs_sub = jobs.add_subparsers(dest="action", required=True, metavar="ACTION")
    jobs_list = jobs_sub.add_parser("list", help="every job the cluster knows")
    jobs_list.add_argument("--json", action="store_true", help=JSON_HELP)
    add_config_options(jobs_list)
    for action, text in (
        ("status", "a job's state, tasks, arguments and failures"),
        ("cancel", "ask the cluster to cancel a job"),
        ("wait", "wait for a job to end; the exit code says how it ended"),
    ):
        p = jobs_sub.add_parser(action, help=text)
        p.add_argument("job_id", metavar="JOB_ID", help="the job's id (see jobs list)")
        p.add_argument("--json", action="store_true", help=JSON_HELP)
        add_config_options(p)
    job_logs.add_parser(jobs_sub)


def submit(
    client: ClusterClient,
    path: Path,
    pipeline_args: list[str] | None = None,
    *,
    detach: bool,
    as_json: bool,
) -> int:
    pipeline = load_pipeline(path, pipeline_args or ())
    graph = build_job_graph(pipeline, path)
    attach_pipeline_args(graph, pipeline_args or ())
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
    duration = job_duration(result, waited=time.monotonic() - started)
    if as_json:
        print(json.dumps(result_json(result, duration), indent=2))
    else:
        print_result(result, duration, pipeline)
    return EXIT_OK if job_status_of(result.status) is JobStatus.FINISHED else EXIT_JOB_FAILED


def job_duration(result: Any, *, waited: float) -> float:
    """How long the job ran (end - submission), not how long this command waited for it;
    ``waited`` only when the result lacks the times."""
    details = result.details
    if details.submitted_at > 0 and details.ended_at >= details.submitted_at:
        return float(details.ended_at - details.submitted_at)
    return waited


def jobs(client: ClusterClient, args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list(client, as_json=args.json)
    if args.action == "logs":
        return job_logs.logs(client, args)
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
    # The pipeline worker runs as the user who runs this command: the cluster lives only for
    # this one pipeline, which is the user's own code (a cluster others submit to - the
    # playbook's, `local-cluster up` as root - runs it as a user of its own, away from the
    # cluster's keys). Another user could not read the user's files or write their output.
    return {
        "spark.session.start": "eager",
        "spark.session.warm-up": False,
        "taskmanager.pipeline-worker.user": "same-user",
    }


def run_user_config(args: argparse.Namespace) -> dict[str, str]:
    """The keys ``--config FILE`` and ``-D KEY=VALUE`` set for ``run``'s local cluster, checked
    like any configuration (so a typo stops ``run`` before it starts a process).

    ``$SPARKMILL_CONFIG`` is not read: it names a running cluster's configuration, whose
    addresses and keys are not this cluster's. Keys that lay the local cluster out (addresses,
    slots, high availability, CurveZMQ and token files) are refused rather than silently
    replaced: ``run`` generates them, and an address or key from another cluster would only
    stop its processes from finding each other.
    """
    from sparkmill.common.config.configuration import Configuration

    path: Path | None = getattr(args, "config_after", None) or getattr(args, "config", None)
    _, overrides = config_source(args)  # only the -D part: `path` above skips the variable
    if path is not None and not path.is_file():
        raise SparkmillError(f"the configuration file {path} does not exist")
    _refuse_run_owned(overrides)  # before the merge, whose cross-key checks would say less
    config = Configuration.load(path) if path is not None else Configuration()
    if overrides:
        config = config.with_overrides(overrides, source="-D")
    values = config.to_strings()
    _refuse_run_owned(values)
    return values


def _refuse_run_owned(keys: Iterable[str]) -> None:
    for key in keys:
        reason = run_owned_key(key)
        if reason:
            raise ConfigurationError(key, f"is set by `sparkmill run` itself: {reason}")


# Keys `sparkmill run` generates for its local cluster, and what to use instead.
_RUN_OWNED_KEYS = {
    "taskmanager.numberOfTaskSlots": "use --slots",
    "rest.auth.token-file": "run generates the REST tokens in its directory (see --dir)",
    "security.zookeeper.digest-file": "run starts no ZooKeeper",
}
_RUN_OWNED_PREFIXES = {
    "high-availability.": "run starts a cluster without high availability "
    "(use `sparkmill local-cluster up --ha zookeeper`)",
    "security.curve.": "run generates the cluster's CurveZMQ keys in its directory (see --dir)",
}


def run_owned_key(key: str) -> str:
    """Why ``run`` does not take ``key`` from the user, or ``""`` when it does."""
    if key.endswith(".rpc-address"):
        return "run binds every service to a free loopback port"
    if key in _RUN_OWNED_KEYS:
        return _RUN_OWNED_KEYS[key]
    for prefix, reason in _RUN_OWNED_PREFIXES.items():
        if key.startswith(prefix):
            return reason
    return ""


def job_slot_need(graph: JobGraph) -> int:
    """The slots the job uses at once at most: per slot sharing group, its largest vertex
    (Flink's slot sharing puts one subtask of each vertex of a group into one slot)."""
    largest: dict[str, int] = {}
    decisions, _ = expected_parallelism(graph)  # a late vertex counts with its bound
    for vertex in graph.vertices:
        group = vertex.slot_sharing_group
        decision = decisions.get(vertex.id)
        parallelism = decision.parallelism if decision is not None else vertex.parallelism
        largest[group] = max(largest.get(group, 0), parallelism)
    return sum(largest.values())


def run_layout(args: argparse.Namespace, graph: JobGraph) -> tuple[dict[str, Any], str]:
    """The ``LocalCluster`` arguments for ``run``'s task executors, and how to say them.

    Elastic: the resource manager's local driver starts the task executors, and
    ``slotmanager.number-of-slots.min`` is the job's slot need (within the maximum) so that it
    starts them as soon as it leads, beside the other services and before the job is
    submitted, as the static layout does: waiting for the job's slot requests would add the
    services' start-up to the job's time. It is the default: measured no slower than one task
    executor started up front (docs/performance.md). ``--task-executors`` or ``--no-elastic``
    choose the fixed layout.
    """
    layout: dict[str, Any]
    if args.elastic and args.task_executors is not None:
        raise SparkmillError(
            "--task-executors starts a fixed number of task executors: it does not go with "
            "--elastic (use --max-task-executors)"
        )
    if args.elastic is False or args.task_executors is not None:
        count = args.task_executors or 1
        return {"task_executors": count}, f"{count} task executors x {args.slots} slots"
    most = args.max_task_executors * args.slots
    wanted = job_slot_need(graph)
    need = min(wanted, most)
    layout = {
        "elastic": True,
        "max_task_executors": args.max_task_executors,
        "extra_config": {"slotmanager.number-of-slots.min": need},
    }
    workers = -(-need // args.slots)
    capped = (
        f" (it could use {wanted}: its subtasks take turns; raise --max-task-executors or "
        "--slots to run more at once)"
        if wanted > most
        else ""
    )
    return layout, (
        f"task executors on demand: {workers} x {args.slots} slots for the job's {need}, "
        f"at most {args.max_task_executors}{capped}"
    )


def run(args: argparse.Namespace) -> int:
    from sparkmill.client import ClusterClient
    from sparkmill.local_cluster import LocalCluster

    # Fail fast, before starting any process: the configuration, then the pipeline.
    user_config = run_user_config(args)
    pipeline = load_pipeline(args.pipeline, args.pipeline_args)
    graph = build_job_graph(pipeline, args.pipeline)
    attach_pipeline_args(graph, args.pipeline_args)
    layout, described = run_layout(args, graph)
    config = {**layout.pop("extra_config", {}), **run_cluster_config(pipeline), **user_config}
    with tempfile.TemporaryDirectory(prefix="sparkmill-run-") as tmp:
        directory = (args.dir or Path(tmp)).resolve()
        cluster = LocalCluster(directory, slots=args.slots, extra_config=config, **layout)
        print(f"starting a local cluster ({described}) in {directory}", file=sys.stderr)
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


__all__ = [
    "add_parsers",
    "add_run_parser",
    "job_duration",
    "job_slot_need",
    "jobs",
    "positive",
    "run",
    "run_cluster_config",
    "run_layout",
    "run_owned_key",
    "run_user_config",
    "submit",
    "wait",
]
