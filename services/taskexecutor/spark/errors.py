"""Turn what PySpark raises into task failures a person can read.

A Python UDF that raises surfaces as a Py4J error wrapping a JVM exception wrapping the Python
worker's traceback; an unknown column as an ``AnalysisException`` followed by the whole logical
plan. The task's failure *message* starts with what the user needs - the user's exception type
and message, or Spark's error condition - and the full trace stays in the failure's details
(the exception's ``__cause__``). The exception classes themselves are in ``common/core/errors.py``.
"""

from __future__ import annotations

import re

_MAX_TRACEBACK_LINES = 25
_PY_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b.*)$")


def _python_traceback(text: str) -> tuple[str, list[str]] | None:
    """The final ``Type: message`` line of a Python traceback in ``text`` and the trace."""
    start = text.rfind(_PY_TRACEBACK)
    if start < 0:
        return None
    lines = text[start:].splitlines()
    trace: list[str] = []
    for line in lines:
        if line.startswith(("\tat ", "\t... ")) or line.startswith("at org."):
            break
        trace.append(line)
    for line in reversed(trace):
        stripped = line.strip()
        if stripped and not line.startswith(" ") and _EXCEPTION_LINE.match(stripped):
            return stripped, trace
    return None


def _first_jvm_line(text: str) -> str:
    """``org.apache.spark.SparkException: [COND] message`` without the Py4J preamble."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(": "):
            line = line[2:]
        if not line or line.startswith(("An error occurred while calling", "at ", "\tat ")):
            continue
        return line
    return text.strip().splitlines()[0] if text.strip() else ""


def summarize(exc: BaseException) -> str:
    """A short, useful description of ``exc`` (first line: what went wrong)."""
    text = str(exc)
    python = _python_traceback(text)
    if python is not None:
        last, trace = python
        if len(trace) > _MAX_TRACEBACK_LINES:
            trace = [*trace[:3], "  ...", *trace[-(_MAX_TRACEBACK_LINES - 4) :]]
        return f"{last}\n(raised in a Python function run by Spark)\n" + "\n".join(trace)
    condition = _condition(exc)
    if condition is not None:
        # AnalysisException & co: the message, without the logical plan after ";\n".
        message = text.split(";\n", 1)[0].strip()
        return f"{type(exc).__name__}: {message}"
    if type(exc).__name__ == "Py4JJavaError":
        return _first_jvm_line(text)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _condition(exc: BaseException) -> str | None:
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    if get is None:
        return None
    try:
        value = get()
    except Exception:
        return None
    return str(value) if value else None
