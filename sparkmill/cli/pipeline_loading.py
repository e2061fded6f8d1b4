"""Loading a pipeline file for ``sparkmill submit``, ``sparkmill run`` and ``sparkmill explain``.

The file runs with ``sys.argv`` set to ``[FILE, *ARGS]`` (the arguments after ``--`` on the
command line), so a pipeline may read its parameters with argparse; the arguments are then
stored in the job's configuration (:func:`attach_pipeline_args`), so the job a new leader
recovers after a failover is the job that was submitted, and the views can show them.

A pipeline file is ordinary Python that assigns a :class:`sparkmill.Pipeline` to a module
attribute ``pipeline``. It runs on the client, where there is deliberately no SparkSession, so
the errors a user meets most (a syntax error, a missing ``pipeline``, PySpark called outside a
``transform``) are reported as a :class:`PipelineLoadError` that names the file and line and says
what to do instead of printing a traceback.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparkmill.common.core.errors import ConfigurationError, PipelineError, SparkmillError
from sparkmill.common.jobgraph.job_config import PIPELINE_ARGS_KEY, encode_pipeline_args


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


def load_pipeline(path: Path, args: Sequence[str] = ()) -> Any:
    """Execute ``path`` with ``sys.argv == [path, *args]`` and return its attribute
    ``pipeline`` (``sys.argv`` is restored afterwards)."""
    if not path.exists():
        raise PipelineLoadError(f"pipeline file {path} does not exist")
    if path.is_dir():
        raise PipelineLoadError(f"pipeline file {path} is a directory, not a Python file")
    saved_argv = sys.argv
    sys.argv = [str(path), *args]
    try:
        namespace = runpy.run_path(str(path), run_name="__sparkmill_pipeline__")
    except SyntaxError as exc:
        raise PipelineLoadError(
            f"{path}:{exc.lineno}: syntax error: {exc.msg}\n    {(exc.text or '').rstrip()}"
        ) from None
    except SystemExit as exc:
        # argparse in the pipeline file: --help (code 0) has printed its text; anything else
        # has printed why the arguments were refused.
        if exc.code in (0, None):
            raise
        raise PipelineLoadError(
            f"{path}: the pipeline refused its arguments {list(args)!r} (it exited with "
            f"{exc.code!r}; its usage is above, or see: sparkmill explain {path} -- --help)"
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
    finally:
        sys.argv = saved_argv
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


def build_job_graph(pipeline: Any, path: Path) -> Any:
    """``pipeline``'s job graph; a build that fails is a :class:`PipelineLoadError` naming
    ``path`` (a sparkmill error other than a :class:`PipelineError` passes unchanged)."""
    try:
        return pipeline.build_job_graph()
    except PipelineError as exc:  # a SparkmillError, reported like any other failed build
        raise PipelineLoadError(
            f"{getattr(exc, 'origin', '') or path}: building the pipeline failed: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    except SparkmillError:
        raise
    except Exception as exc:
        raise PipelineLoadError(
            f"{getattr(exc, 'origin', '') or path}: building the pipeline failed: "
            f"{type(exc).__name__}: {exc}"
        ) from None


def attach_pipeline_args(graph: Any, args: Sequence[str]) -> None:
    """Store ``args`` in the job graph's configuration (nothing when there are none)."""
    if not args:
        return
    try:
        graph.config[PIPELINE_ARGS_KEY] = encode_pipeline_args(args)
    except ConfigurationError as exc:
        raise PipelineLoadError(str(exc)) from None


__all__ = ["PipelineLoadError", "attach_pipeline_args", "build_job_graph", "load_pipeline"]
