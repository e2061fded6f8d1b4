"""``sparkmill local-cluster up|down``: a cluster of real service processes on this machine,
in a directory that holds its configuration, keys and logs (for trying sparkmill out and for
the integration tests; :mod:`sparkmill.local_cluster` does the work)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkmill.cli import keys
from sparkmill.cli.exit_codes import EXIT_OK, EXIT_UNREACHABLE
from sparkmill.cli.jobs import positive
from sparkmill.cli.options import SubParsers
from sparkmill.common.core.errors import SparkmillError


def add_parser(sub: SubParsers[argparse.ArgumentParser]) -> None:
    lc = sub.add_parser("local-cluster", help="start or stop a local cluster of processes")
    lc_sub = lc.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = lc_sub.add_parser("up", help="start a cluster's processes in the background")
    up.add_argument(
        "--dir", type=Path, required=True, help="its directory (configuration, keys, logs)"
    )
    up.add_argument(
        "--task-executors", type=positive, default=2, help="task executor processes to start"
    )
    up.add_argument("--slots", type=positive, default=2, help="slots per task executor")
    up.add_argument(
        "--elastic",
        action="store_true",
        help="start no task executor up front: the resource manager starts them when jobs "
        "need slots and stops them once idle (resourcemanager.taskmanager-timeout)",
    )
    up.add_argument(
        "--max-task-executors",
        type=positive,
        default=4,
        help="with --elastic: at most this many task executors at once (default 4)",
    )
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
    down = lc_sub.add_parser("down", help="stop the cluster that `up` started in DIR")
    down.add_argument("--dir", type=Path, required=True, help="the directory given to `up`")


def local_cluster(args: argparse.Namespace) -> int:
    from sparkmill.local_cluster import LocalCluster

    if args.action == "up":
        if args.standbys < 0:
            raise SparkmillError(f"--standbys must be 0 or more, not {args.standbys}")
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
            elastic=args.elastic,
            max_task_executors=args.max_task_executors,
        )
        try:
            cluster.start()
        except (TimeoutError, RuntimeError) as exc:
            cluster.stop()
            print(f"sparkmill: the local cluster did not come up: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        executors = (
            f"task executors on demand, up to {args.max_task_executors} x {args.slots} slots"
            if args.elastic
            else f"{args.task_executors} x {args.slots} slots"
        )
        print(f"local cluster up: {len(cluster.processes)} processes, {executors}")
        print(f"client config: {cluster.config_path}")
        print(f"logs:          {cluster.log_dir}")
        print(f"dashboard:     {cluster.rest_url() or '(rest.enabled is false)'}")
        print(f"rest tokens:   {keys.rest_tokens_note(cluster.config_path)}")
        return EXIT_OK
    try:
        cluster = LocalCluster.attach(args.dir.resolve())
    except FileNotFoundError:
        raise SparkmillError(
            f"no local cluster in {args.dir}: there is no {args.dir / 'processes.json'} "
            "(was it started with `sparkmill local-cluster up --dir` this directory?)"
        ) from None
    cluster.stop()
    print(f"local cluster in {args.dir} stopped")
    return EXIT_OK


__all__ = ["add_parser", "local_cluster"]
