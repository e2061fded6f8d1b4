"""Conventions every ``sparkmill`` command shares: the parser class (help with defaults and the
exit codes), ``--config``/``-D``/``SPARKMILL_CONFIG`` and splitting a pipeline's own arguments
off the command line.

``--config`` and ``-D`` are accepted before the subcommand and after it (the value given after
it wins; ``-D`` options add up); without ``--config`` the file named by ``SPARKMILL_CONFIG`` is
used. ``-D key=value`` overrides one key of that file and is validated like the file.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from sparkmill.common.core.errors import ConfigurationError, SparkmillError

CONFIG_ENV = "SPARKMILL_CONFIG"
# Commands whose positional FILE may be followed by `-- ARGS` for the pipeline itself.
PIPELINE_COMMANDS = ("run", "submit", "explain")

EXIT_CODES_EPILOG = """exit codes:
  0  success (for a job: it FINISHED)
  1  the job failed or was cancelled
  2  bad usage, bad configuration, or a pipeline file that cannot be loaded or built
  3  the cluster could not be reached (or a local cluster did not come up)
  130  interrupted (Ctrl-C)"""


class UsageError(SparkmillError):
    """The command line cannot be parsed (argparse's message, with the usage line)."""


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help; the epilog (exit codes) kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        # "(default: None)" says nothing: show a default only when there is one.
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An argument parser with the shared help format whose errors raise :class:`UsageError`
    (so ``--json`` can report them as JSON); subcommand parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        kwargs.setdefault("epilog", EXIT_CODES_EPILOG)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}\n{self.format_usage().rstrip()}")


# argparse has no public name for what add_subparsers returns.
SubParsers = argparse._SubParsersAction


def add_config_options(
    parser: argparse.ArgumentParser, *, top_level: bool = False, config_help: str = ""
) -> None:
    """``--config FILE`` and ``-D KEY=VALUE``; after a subcommand they use their own
    destinations, merged by :func:`config_source`."""
    suffix = "" if top_level else "_after"
    parser.add_argument(
        "--config",
        dest=f"config{suffix}",
        type=Path,
        default=None,
        metavar="FILE",
        help=config_help
        or f"cluster configuration (YAML), e.g. DIR/cluster.yaml of a local cluster; "
        f"without it, ${CONFIG_ENV}",
    )
    parser.add_argument(
        "-D",
        dest=f"overrides{suffix}",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one configuration key (repeatable; checked like the file)",
    )


def config_source(args: argparse.Namespace) -> tuple[Path | None, dict[str, str]]:
    """The configuration file (``--config`` after, then before the subcommand, then
    ``$SPARKMILL_CONFIG``) and the ``-D`` overrides, in order."""
    path: Path | None = getattr(args, "config_after", None) or getattr(args, "config", None)
    if path is None and os.environ.get(CONFIG_ENV):
        path = Path(os.environ[CONFIG_ENV])
    overrides: dict[str, str] = {}
    for item in [*getattr(args, "overrides", []), *getattr(args, "overrides_after", [])]:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(item, "-D needs KEY=VALUE, e.g. -D rpc.ask-timeout=5s")
        overrides[key.strip()] = value
    return path, overrides


def split_pipeline_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``argv`` without the pipeline's own arguments, and those arguments: everything after
    the first ``--`` of a ``run``/``submit``/``explain`` command line."""
    args = list(argv)
    if "--" not in args or not any(c in args[: args.index("--")] for c in PIPELINE_COMMANDS):
        return args, []
    cut = args.index("--")
    return args[:cut], args[cut + 1 :]


__all__ = [
    "CONFIG_ENV",
    "EXIT_CODES_EPILOG",
    "PIPELINE_COMMANDS",
    "Parser",
    "SubParsers",
    "UsageError",
    "add_config_options",
    "config_source",
    "split_pipeline_args",
]
