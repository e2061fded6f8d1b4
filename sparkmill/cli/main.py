"""The ``sparkmill`` command's parser, and the dispatch of a parsed command line to its command
group; errors become a one-line message and an exit code (:mod:`sparkmill.cli.exit_codes`),
and with ``--json`` a JSON document on stdout (``{"error": ..., "exit_code": ...}``)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, cast

from sparkmill.cli import cluster, explain, jobs, keys, local_cluster
from sparkmill.cli.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from sparkmill.cli.options import (
    CONFIG_ENV,
    PIPELINE_COMMANDS,
    Parser,
    SubParsers,
    UsageError,
    add_config_options,
    config_source,
    split_pipeline_args,
)
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
    "a cluster and its jobs, or run one of its services. A pipeline file's own arguments go "
    "after `--` (sparkmill submit FILE -- --input data/)."
)
# How long a command waits for a cluster that has not answered yet before it says so (a
# cluster that answered once is then followed through failovers for much longer).
CONTACT_TIMEOUT_S = 3.0


def _version() -> str:
    try:
        return metadata.version("sparkmill")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="sparkmill", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"sparkmill {_version()}")
    add_config_options(parser, top_level=True)
    sub = cast(
        "SubParsers[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True, metavar="COMMAND"),
    )
    jobs.add_run_parser(sub)
    explain.add_parser(sub)
    local_cluster.add_parser(sub)
    jobs.add_parsers(sub)
    cluster.add_parser(sub)
    keys.add_parser(sub)
    worker = sub.add_parser(
        "pipeline-worker",
        help="run a task executor's pipeline code (started by the task executor, or by systemd "
        "socket activation)",
    )
    worker.add_argument(
        "--fd", type=int, help="a connected socket inherited from the task executor"
    )
    worker.add_argument(
        "--peer-user", default="", help="socket activation: the only user that may connect"
    )
    for role in ROLES:
        svc = sub.add_parser(role, help=f"run the {role} service in the foreground")
        svc.add_argument(
            "--config",
            type=Path,
            required=True,
            dest="service_config",
            help="the service's configuration (YAML)",
        )
        # Flink's dynamic properties: what one instance of a shared configuration adds, e.g.
        # the resource id of a template unit's instance (sparkmill-task-executor-elastic@ID).
        svc.add_argument(
            "-D",
            dest="service_overrides",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override one configuration key (repeatable; checked like the file)",
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    command_line, pipeline_args = split_pipeline_args(raw)
    as_json = "--json" in command_line
    try:
        args = build_parser().parse_args(command_line)
    except UsageError as exc:
        hint = ""
        if "unrecognized arguments" in str(exc) and any(c in raw for c in PIPELINE_COMMANDS):
            hint = (
                "\n(a pipeline's own arguments go after `--`: "
                "sparkmill submit FILE [OPTIONS] -- --input x)"
            )
        return _fail(f"{exc}{hint}", EXIT_USAGE, as_json=as_json)
    args.pipeline_args = pipeline_args
    if pipeline_args and args.command not in PIPELINE_COMMANDS:
        return _fail(
            f"only {', '.join(PIPELINE_COMMANDS)} take pipeline arguments after `--`",
            EXIT_USAGE,
            as_json=as_json,
        )
    as_json = bool(getattr(args, "json", False))
    if args.command not in (*ROLES, "pipeline-worker"):
        # The CLI talks to the user through its output; library chatter (kazoo's reconnects,
        # our own INFO lines) stays quiet unless something is really wrong.
        logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _dispatch(args)
    except ConfigurationError as exc:
        return _fail(f"invalid configuration: {exc}", EXIT_USAGE, as_json=as_json)
    except PipelineLoadError as exc:
        return _fail(str(exc), EXIT_USAGE, as_json=as_json)
    except (UnavailableError, DeadlineExceededError, NotLeaderError) as exc:
        hint = keys.unanswered_hint(_config_path_or_none(args))
        return _fail(f"the cluster did not answer: {exc}{hint}", EXIT_UNREACHABLE, as_json=as_json)
    except RpcError as exc:  # the cluster answered, and said no
        return _fail(f"{type(exc).__name__}: {exc}", EXIT_USAGE, as_json=as_json)
    except SparkmillError as exc:
        return _fail(str(exc), EXIT_USAGE, as_json=as_json)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Output piped into `head` and the like: stop quietly (and keep Python's flush at exit
        # from failing again on the closed pipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _fail(message: str, code: int, *, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": message, "exit_code": code}, indent=2))
    else:
        print(f"sparkmill: {message}", file=sys.stderr)
    return code


def _config_path_or_none(args: argparse.Namespace) -> Path | None:
    try:
        return config_source(args)[0]
    except ConfigurationError:
        return None


def _dispatch(args: argparse.Namespace) -> int:
    if args.command in ROLES:
        from sparkmill.services.entrypoint import run_service

        overrides: dict[str, str] = {}
        for item in args.service_overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigurationError(item, "-D needs KEY=VALUE")
            overrides[key.strip()] = value
        return run_service(args.command, args.service_config, overrides)
    if args.command == "pipeline-worker":
        from sparkmill.services.entrypoint import run_pipeline_worker

        fd = [] if args.fd is None else ["--fd", str(args.fd)]
        return run_pipeline_worker([*fd, "--peer-user", args.peer_user])
    if args.command == "run":
        return jobs.run(args)
    if args.command == "explain":
        return explain.explain(args)
    if args.command == "local-cluster":
        return local_cluster.local_cluster(args)
    if args.command == "keys":
        return keys.run(args)
    with _client(args) as client:
        if args.command == "submit":
            return jobs.submit(
                client,
                args.pipeline,
                args.pipeline_args,
                detach=args.detach,
                as_json=args.json,
            )
        if args.command == "jobs":
            return jobs.jobs(client, args)
        return cluster.cluster_status(client, as_json=args.json)


def _client(args: argparse.Namespace) -> ClusterClient:
    from sparkmill.client import ClusterClient

    path, overrides = config_source(args)
    if path is None:
        raise SparkmillError(
            f"no cluster configuration: give --config FILE or set {CONFIG_ENV} (for a local "
            "cluster: DIR/cluster.yaml, printed by `sparkmill local-cluster up`)"
        )
    if not path.is_file():
        raise SparkmillError(f"the configuration file {path} does not exist")
    return ClusterClient.from_config_file(
        path, overrides=overrides, contact_timeout=CONTACT_TIMEOUT_S
    )


__all__ = ["CONTACT_TIMEOUT_S", "build_parser", "main"]
