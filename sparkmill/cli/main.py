"""The ``sparkmill`` command's parser, and the dispatch of a parsed command line to its command
group; errors become a one-line message and an exit code (:mod:`sparkmill.cli.exit_codes`)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sparkmill.cli import cluster, jobs, keys, local_cluster
from sparkmill.cli.exit_codes import EXIT_INTERRUPTED, EXIT_UNREACHABLE, EXIT_USAGE
from sparkmill.cli.pipeline_loading import PipelineLoadError
from sparkmill.common.core.errors import (
    ConfigurationError,
    DeadlineExceededError,
    NotLeaderError,
    RpcError,
    SparkmillError,
    UnavailableError,
)
from sparkmill.common.runtime.service_base import ROLES

if TYPE_CHECKING:
    from sparkmill.client import ClusterClient

DESCRIPTION = (
    "A highly available, slot-based job runtime for PySpark pipelines: run a pipeline, manage "
    "a cluster and its jobs, or run one of its services."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkmill", description=DESCRIPTION)
    parser.add_argument("--config", type=Path, help="cluster configuration (YAML)")
    sub = parser.add_subparsers(dest="command", required=True)
    jobs.add_run_parser(sub)
    local_cluster.add_parser(sub)
    jobs.add_parsers(sub)
    cluster.add_parser(sub)
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
        return EXIT_INTERRUPTED


def _dispatch(args: argparse.Namespace) -> int:
    if args.command in ROLES:
        from sparkmill.services.entrypoint import run_service

        return run_service(args.command, args.service_config)
    if args.command == "run":
        return jobs.run(args)
    if args.command == "local-cluster":
        return local_cluster.local_cluster(args)
    if args.command == "keys":
        return keys.run(args)
    with _client(args) as client:
        if args.command == "submit":
            return jobs.submit(client, args.pipeline, detach=args.detach, as_json=args.json)
        if args.command == "jobs":
            return jobs.jobs(client, args)
        return cluster.cluster_status(client, as_json=args.json)


def _client(args: argparse.Namespace) -> ClusterClient:
    from sparkmill.client import ClusterClient

    if args.config is None:
        raise SparkmillError("--config FILE is required (e.g. DIR/cluster.yaml of a local cluster)")
    return ClusterClient.from_config_file(args.config)


__all__ = ["build_parser", "main"]
