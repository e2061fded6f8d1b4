"""The ``sparkmill`` command line.

::

    sparkmill run PIPELINE.py                           # embedded local cluster, run, tear down
    sparkmill local-cluster up --dir DIR [--task-executors N] [--slots N]
    sparkmill local-cluster down --dir DIR
    sparkmill --config FILE submit PIPELINE.py [--detach] [--json]
    sparkmill --config FILE jobs list|status JOB|cancel JOB|wait JOB [--json]
    sparkmill --config FILE cluster status [--json]
    sparkmill keys generate --dir DIR [--role ROLE --name NAME] | keys list --dir DIR
    sparkmill dispatcher|resource-manager|job-master|task-executor --config FILE

Exit codes: 0 success (job FINISHED), 1 the job failed or was cancelled, 2 bad usage, bad
configuration or a pipeline file that cannot be loaded, 3 the cluster could not be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from sparkmill import keys
from sparkmill.common.core.errors import (
    ConfigurationError,
    DeadlineExceededError,
    NotLeaderError,
    PipelineError,
    RpcError,
    SparkmillError,
    UnavailableError,
)
from sparkmill.common.rpc.security import INSECURE_WARNING
from sparkmill.common.runtime.service_base import ROLES
from sparkmill.common.v1 import common_pb2, jobs_pb2

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def _status_name(status: int) -> str:
    return common_pb2.JobStatus.Name(status)


def _state_name(state: int) -> str:
    name = common_pb2.ExecutionState.Name(state)
    return name.removeprefix("EXECUTION_")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkmill", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, help="cluster configuration (YAML)")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a pipeline on an embedded local cluster")
    run.add_argument("pipeline", type=Path)
    # One task executor with every slot: one Spark JVM on the machine instead of several
    # competing for its cores (each JVM costs seconds of CPU to start and hundreds of MB).
    run.add_argument("--task-executors", type=int, default=1)
    run.add_argument("--slots", type=int, default=4)
    run.add_argument("--dir", type=Path, help="cluster directory (default: a temporary one)")
    run.add_argument("--json", action="store_true")

    lc = sub.add_parser("local-cluster", help="start or stop a local cluster of processes")
    lc_sub = lc.add_subparsers(dest="action", required=True)
    up = lc_sub.add_parser("up")
    up.add_argument("--dir", type=Path, required=True)
    up.add_argument("--task-executors", type=int, default=2)
    up.add_argument("--slots", type=int, default=2)
    up.add_argument(
        "--ha",
        choices=("none", "zookeeper"),
        default="none",
        help="zookeeper: start a local ZooKeeper server and use it for leader election",
    )
    up.add_argument(
        "--standbys",
        type=int,
        default=0,
        help="standby dispatchers, resource managers and job-master processes (needs --ha)",
    )
    down = lc_sub.add_parser("down")
    down.add_argument("--dir", type=Path, required=True)

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

    cluster = sub.add_parser("cluster", help="cluster overview")
    cluster_sub = cluster.add_subparsers(dest="action", required=True)
    cs = cluster_sub.add_parser("status")
    cs.add_argument("--json", action="store_true")

    keys.add_parser(sub)

    for role in ROLES:
        svc = sub.add_parser(role, help=f"run the {role} service in the foreground")
        svc.add_argument("--config", type=Path, required=True, dest="service_config")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command not in ROLES:
        # The CLI talks to the user through its output; library chatter (kazoo's reconnects,
        # our own INFO lines) stays quiet unless something is really wrong.
        import logging

        logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _dispatch(args)
    except ConfigurationError as exc:
        print(f"sparkmill: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PipelineLoadError as exc:
        print(f"sparkmill: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (UnavailableError, DeadlineExceededError, NotLeaderError) as exc:
        hint = keys.unanswered_hint(getattr(args, "config", None))
        print(f"sparkmill: the cluster did not answer: {exc}{hint}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except RpcError as exc:  # the cluster answered, and said no
        print(f"sparkmill: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SparkmillError as exc:
        print(f"sparkmill: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command in ROLES:
        from sparkmill.services.entrypoint import run_service

        return run_service(args.command, args.service_config)
    if args.command == "run":
        return _run(args)
    if args.command == "local-cluster":
        return _local_cluster(args)
    if args.command == "keys":
        return keys.run(args)
    client = _client(args)
    with client:
        if args.command == "submit":
            return _submit(client, args.pipeline, detach=args.detach, as_json=args.json)
        if args.command == "jobs":
            return _jobs(client, args)
        return _cluster_status(client, as_json=args.json)


def _client(args: argparse.Namespace) -> Any:
    from sparkmill.client import ClusterClient

    if args.config is None:
        raise SparkmillError("--config FILE is required (e.g. DIR/cluster.yaml of a local cluster)")
    return ClusterClient.from_config_file(args.config)


# -- pipelines ----------------------------------------------------------------------------------


class PipelineLoadError(SparkmillError):
    """A pipeline file cannot be loaded (syntax error, no ``pipeline``...)."""


def _spark_outside_transform_hint(exc: BaseException) -> str:
    """Advice when the pipeline file called PySpark, which needs a session it does not have.

    ``pyspark.sql.functions`` build JVM-backed Columns, so outside a SparkSession they fail with
    ``[SESSION_OR_CONTEXT_NOT_EXISTS]`` or even a bare ``AssertionError`` from inside PySpark. A
    pipeline file runs on the client, where there is deliberately no session.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    raised_in_pyspark = bool(frames) and f"{os.sep}pyspark{os.sep}" in frames[-1].filename
    if "SESSION_OR_CONTEXT_NOT_EXISTS" not in str(exc) and not (
        raised_in_pyspark and isinstance(exc, AssertionError)
    ):
        return ""
    return (
        "\n  PySpark needs a running SparkSession, and a pipeline file has none: it only "
        "describes the job.\n  Use `from sparkmill import functions as F` for the expressions "
        "you pass to select/where/with_column/agg (the same API as pyspark.sql.functions, "
        "recorded here and run by Spark on the task executors),\n  or move the PySpark code "
        "into a function given to `.transform(fn)`, which the task executors call with a real "
        "DataFrame."
    )


def load_pipeline(path: Path) -> Any:
    """Execute ``path`` and return its module attribute ``pipeline``."""
    import runpy

    if not path.exists():
        raise PipelineLoadError(f"pipeline file {path} does not exist")
    try:
        namespace = runpy.run_path(str(path), run_name="__sparkmill_pipeline__")
    except SyntaxError as exc:
        raise PipelineLoadError(
            f"{path}:{exc.lineno}: syntax error: {exc.msg}\n    {(exc.text or '').rstrip()}"
        ) from None
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        where = next(
            (f"{f.filename}:{f.lineno}" for f in reversed(frames) if f.filename == str(path)),
            str(path),
        )
        raise PipelineLoadError(
            f"{where}: loading the pipeline raised {type(exc).__name__}: {exc}"
            + _spark_outside_transform_hint(exc)
        ) from None
    pipeline = namespace.get("pipeline")
    if pipeline is None:
        raise PipelineLoadError(
            f"{path} defines no module attribute 'pipeline' (assign your sparkmill.Pipeline "
            f"to a variable named 'pipeline')"
        )
    if not hasattr(pipeline, "build_job_graph"):
        raise PipelineLoadError(
            f"'pipeline' in {path} is a {type(pipeline).__name__}, not a sparkmill pipeline"
        )
    return pipeline


def _submit(client: Any, path: Path, *, detach: bool, as_json: bool) -> int:
    pipeline = load_pipeline(path)
    graph = pipeline.build_job_graph()
    job_id = client.submit(graph)
    if detach:
        print(json.dumps({"job_id": job_id, "status": "SUBMITTED"}) if as_json else job_id)
        return EXIT_OK
    if not as_json:
        print(f"submitted job {job_id} ('{graph.name}')", file=sys.stderr)
    return _wait(client, job_id, as_json=as_json, pipeline=pipeline)


def _wait(client: Any, job_id: str, *, as_json: bool, pipeline: Any = None) -> int:
    started = time.monotonic()
    progress = None if as_json else Progress()
    result = client.wait(job_id, progress=progress)
    if progress is not None:
        progress.done()
    duration = time.monotonic() - started
    status = _status_name(result.status)
    if as_json:
        print(json.dumps(_result_json(result, duration), indent=2))
    else:
        _print_result(result, duration, pipeline)
    return EXIT_OK if result.status == common_pb2.FINISHED else EXIT_JOB_FAILED if status else 1


def _details_json(details: jobs_pb2.JobDetails) -> dict[str, Any]:
    return {
        "job_id": details.job_id,
        "name": details.name,
        "status": _status_name(details.status),
        "submitted_at": details.submitted_at,
        "ended_at": details.ended_at or None,
        "restarts": details.restarts,
        "recovered_subtasks": details.recovered_subtasks,
        "job_master": (
            _service_json(details.job_master) if details.HasField("job_master") else None
        ),
        "vertices": [
            {
                "id": v.vertex_id,
                "name": v.name,
                "parallelism": v.parallelism,
                "tasks": {_state_name(k): n for k, n in sorted(v.tasks_by_state.items())},
                "attempts": list(v.subtask_attempts),
                "task_executors": list(v.subtask_task_executors),
            }
            for v in details.vertices
        ],
        "failure": details.failure.message or None,
        "exceptions": [
            {
                "timestamp": e.timestamp,
                "task": f"{e.vertex_name} ({e.subtask_index})",
                "attempt": e.attempt_number,
                "task_executor": e.task_executor,
                "exception": e.error.exception_type,
                "message": e.error.message,
            }
            for e in details.exceptions
        ],
    }


def _result_json(result: jobs_pb2.JobResult, duration: float) -> dict[str, Any]:
    out = _details_json(result.details)
    out.update(
        job_id=result.job_id,
        status=_status_name(result.status),
        duration_s=round(duration, 3),
        failure=result.failure.message or None,
    )
    return out


def _print_result(result: jobs_pb2.JobResult, duration: float, pipeline: Any) -> None:
    status = _status_name(result.status)
    print(
        f"job {result.job_id} {status} in {duration:.1f}s"
        + (f" after {result.details.restarts} restarts" if result.details.restarts else "")
    )
    if result.failure.message:
        print(f"cause: {result.failure.message}")
    render = getattr(pipeline, "render_result", None)
    if render is not None and result.status == common_pb2.FINISHED:
        print(render(result))


class Progress:
    """A live one-line display of tasks by state (a plain log line per change when piped)."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._last = ""

    def __call__(self, details: jobs_pb2.JobDetails) -> None:
        totals: dict[str, int] = {}
        for vertex in details.vertices:
            for state, count in vertex.tasks_by_state.items():
                name = _state_name(state)
                totals[name] = totals.get(name, 0) + count
        total = sum(totals.values())
        parts = [f"{n} {s.lower()}" for s, n in sorted(totals.items()) if n]
        line = f"{_status_name(details.status):<11} {total} tasks: " + ", ".join(parts)
        if details.restarts:
            line += f" (restarts: {details.restarts})"
        if line == self._last:
            return
        self._last = line
        if self._tty:
            sys.stderr.write("\r\x1b[2K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self._tty and self._last:
            sys.stderr.write("\n")


# -- jobs and cluster ----------------------------------------------------------------------------


def _jobs(client: Any, args: argparse.Namespace) -> int:
    if args.action == "list":
        jobs = client.list_jobs()
        if args.json:
            print(
                json.dumps(
                    [
                        {
                            "job_id": j.job_id,
                            "name": j.name,
                            "status": _status_name(j.status),
                            "submitted_at": j.submitted_at,
                            "total_tasks": j.total_tasks,
                            "finished_tasks": j.finished_tasks,
                        }
                        for j in jobs
                    ],
                    indent=2,
                )
            )
        else:
            print(f"{'JOB ID':<34}{'STATUS':<12}{'TASKS':>12}  NAME")
            for j in jobs:
                print(
                    f"{j.job_id:<34}{_status_name(j.status):<12}"
                    f"{f'{j.finished_tasks}/{j.total_tasks}':>12}  {j.name}"
                )
        return EXIT_OK
    if args.action == "status":
        details = client.status(args.job_id)
        if args.json:
            print(json.dumps(_details_json(details), indent=2))
        else:
            _print_details(details)
        return EXIT_OK
    if args.action == "cancel":
        client.cancel(args.job_id)
        print(
            json.dumps({"job_id": args.job_id, "cancel": "requested"})
            if args.json
            else f"cancellation of {args.job_id} requested"
        )
        return EXIT_OK
    return _wait(client, args.job_id, as_json=args.json)


def _print_details(details: jobs_pb2.JobDetails) -> None:
    print(
        f"job {details.job_id} ('{details.name}'): {_status_name(details.status)}"
        + (f", {details.restarts} restarts" if details.restarts else "")
        + (
            f", {details.recovered_subtasks} finished subtasks taken over from an earlier JobMaster"
            if details.recovered_subtasks
            else ""
        )
    )
    if details.HasField("job_master"):
        jm = details.job_master
        print(f"  JobMaster: process {jm.id[:8]} at {jm.address} on {jm.hostname} (pid {jm.pid})")
    for v in details.vertices:
        states = ", ".join(
            f"{n} {_state_name(s).lower()}" for s, n in sorted(v.tasks_by_state.items()) if n
        )
        rerun = sum(1 for a in v.subtask_attempts if a > 0)
        again = f"; {rerun} ran again (max attempt #{max(v.subtask_attempts)})" if rerun else ""
        print(f"  {v.name} (parallelism {v.parallelism}): {states}{again}")
    if details.failure.message:
        print(f"failure: {details.failure.message}")
    if details.exceptions:
        print("exceptions (oldest first):")
        for e in details.exceptions:
            stamp = time.strftime("%H:%M:%S", time.localtime(e.timestamp))
            print(
                f"  {stamp} {e.vertex_name} ({e.subtask_index}) attempt #{e.attempt_number}"
                f" on {e.task_executor[:8] or '-'}: {e.error.exception_type or 'error'}: "
                f"{e.error.message.splitlines()[0] if e.error.message else ''}"
            )


def _service_json(info: common_pb2.ServiceInfo) -> dict[str, Any]:
    return {
        "role": info.role,
        "id": info.id,
        "address": info.address,
        "pid": info.pid,
        "hostname": info.hostname,
        "leader": info.is_leader,
        "metrics_url": info.metrics_url or None,
        "rest_url": info.rest_url or None,
    }


def _cluster_status(client: Any, *, as_json: bool) -> int:
    view = client.cluster_status()
    # A CURVE server refuses a client without keys: if this client got in without, the cluster
    # runs with security off.
    secure = bool(client.security.enabled)
    if not secure:
        print(f"WARNING: {INSECURE_WARNING}", file=sys.stderr)
    rm = view.resource_manager
    services = [
        view.dispatcher,
        rm.resource_manager,
        *view.standbys,
        *view.job_master_process_infos,
    ]
    services += [te.info for te in rm.task_executors]
    executors = [
        {
            "resource_id": te.resource_id,
            "address": te.address,
            "slots_total": len(te.slots),
            "slots_free": sum(1 for s in te.slots if not s.allocation_id),
            "slots": [
                {
                    "index": s.slot_index,
                    "allocation_id": s.allocation_id or None,
                    "job_id": s.job_id or None,
                }
                for s in te.slots
            ],
        }
        for te in rm.task_executors
    ]
    if as_json:
        print(
            json.dumps(
                {
                    "services": [_service_json(s) for s in services],
                    "task_executors": executors,
                    "slots": {
                        "total": rm.slots_total,
                        "free": rm.slots_free,
                        "allocated": rm.slots_allocated,
                        "pending": rm.slots_pending,
                    },
                    "pending_slot_requests": rm.pending_slot_requests,
                    "jobs_with_job_master": list(rm.registered_jobs),
                    "security": {"curve": secure},
                },
                indent=2,
            )
        )
        return EXIT_OK
    print(f"{'ROLE':<18}{'ID':<10}{'ADDRESS':<28}{'PID':>8}  LEADER")
    for s in services:
        leader = (
            "leader"
            if s.is_leader
            else ("standby" if s.role in ("dispatcher", "resource-manager") else "-")
        )
        print(f"{s.role:<18}{s.id[:8]:<10}{s.address:<28}{s.pid:>8}  {leader}")
    if view.dispatcher.rest_url:
        print(f"\ndashboard and REST API: {view.dispatcher.rest_url}")
    print(
        f"\nslots: {rm.slots_total} total, {rm.slots_free} free, {rm.slots_allocated} "
        f"allocated, {rm.slots_pending} pending; {rm.pending_slot_requests} requests waiting"
    )
    for te in executors:
        print(
            f"  task executor {te['resource_id'][:8]} {te['address']}: "
            f"{te['slots_free']}/{te['slots_total']} free"
        )
    print("\nsecurity: CurveZMQ on" if secure else "\nsecurity: OFF (see docs/security.md)")
    return EXIT_OK


# -- local clusters ------------------------------------------------------------------------------


def _local_cluster(args: argparse.Namespace) -> int:
    from sparkmill.local_cluster import LocalCluster

    if args.action == "up":
        if args.standbys and args.ha != "zookeeper":
            raise SparkmillError(
                "--standbys needs --ha zookeeper (standbys find their leader through ZooKeeper)"
            )
        cluster = LocalCluster(
            args.dir.resolve(),
            task_executors=args.task_executors,
            slots=args.slots,
            ha=args.ha == "zookeeper",
            standbys=args.standbys,
        )
        try:
            cluster.start()
        except (TimeoutError, RuntimeError) as exc:
            cluster.stop()
            print(f"sparkmill: the local cluster did not come up: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        print(
            f"local cluster up: {len(cluster.processes)} processes, "
            f"{args.task_executors} x {args.slots} slots"
        )
        print(f"client config: {cluster.config_path}")
        print(f"logs:          {cluster.log_dir}")
        print(f"dashboard:     {cluster.rest_url() or '(rest.enabled is false)'}")
        print(f"rest tokens:   {keys.rest_tokens_note(cluster.config_path)}")
        return EXIT_OK
    cluster = LocalCluster.attach(args.dir.resolve())
    cluster.stop()
    print(f"local cluster in {args.dir} stopped")
    return EXIT_OK


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


def _run(args: argparse.Namespace) -> int:
    from sparkmill.client import ClusterClient
    from sparkmill.local_cluster import LocalCluster

    pipeline = load_pipeline(args.pipeline)  # fail fast, before starting any process
    try:
        graph = pipeline.build_job_graph()
    except PipelineError as exc:  # a SparkmillError, reported like any other failed build
        raise PipelineLoadError(
            f"{args.pipeline}: building the pipeline failed: {type(exc).__name__}: {exc}"
        ) from None
    except SparkmillError:
        raise
    except Exception as exc:
        raise PipelineLoadError(
            f"{args.pipeline}: building the pipeline failed: {type(exc).__name__}: {exc}"
        ) from None
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
                return _wait(client, job_id, as_json=args.json, pipeline=pipeline)
        except (TimeoutError, RuntimeError) as exc:
            print(f"sparkmill: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        finally:
            cluster.stop()
