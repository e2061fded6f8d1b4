"""What a task runs: operator kinds and their invokables (Flink's ``AbstractInvokable``).

A vertex's :class:`~sparkmill.common.jobgraph.model.OperatorSpec` names a ``kind`` and carries an
opaque ``payload``. The task executor looks the kind up in :data:`OPERATOR_KINDS` and runs the
invokable's :meth:`Invokable.invoke` on the task's own thread, never on the event loop.

Built in:

* ``noop`` - the **test operator** (like Flink's ``NoOpInvokable``): optionally sleeps, and can
  fail its first N attempts. Used by tests and benchmarks to exercise the control plane alone.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from sparkmill.common.core.errors import TaskCancelledError
from sparkmill.common.jobgraph.model import NOOP_OPERATOR_KIND, SPARK_OPERATOR_KIND
from sparkmill.common.pipeline.noop import decode_noop_payload
from sparkmill.services.taskexecutor.context import Invokable, TaskContext, TaskOutcome

NOOP_KIND = NOOP_OPERATOR_KIND


class TestOperatorFailure(Exception):
    """The deliberate failure of a ``noop`` test operator configured with ``fail_attempts``."""


class NoOpInvokable:
    """Sleeps ``sleep_s`` (interruptibly) and fails its first ``fail_attempts`` attempts."""

    def __init__(self) -> None:
        self._cancel = threading.Event()

    def invoke(self, context: TaskContext) -> TaskOutcome:
        options = decode_noop_payload(context.payload)
        if context.attempt_number < options.fail_attempts:
            raise TestOperatorFailure(
                f"test operator '{context.vertex_name}' subtask {context.subtask_index} fails "
                f"attempt {context.attempt_number} as configured "
                f"(fail_attempts={options.fail_attempts})"
            )
        if options.sleep_s > 0 and (
            self._cancel.wait(options.sleep_s) or context.cancelled.is_set()
        ):
            raise TaskCancelledError("cancelled while sleeping")
        return TaskOutcome()

    def cancel(self) -> None:
        self._cancel.set()


def _spark_invokable() -> Invokable:
    # Imported on first use: the control plane (and a task executor running only noop tasks)
    # never loads the data plane.
    from sparkmill.services.taskexecutor.spark.invokable import SparkInvokable

    return SparkInvokable()


OPERATOR_KINDS: dict[str, Callable[[], Invokable]] = {
    NOOP_KIND: NoOpInvokable,
    SPARK_OPERATOR_KIND: _spark_invokable,
}
"""Operator kind → factory of a fresh invokable per attempt (in this process)."""


def invokable_factory(kind: str, services: dict[str, object]) -> Callable[[], Invokable] | None:
    """What runs an attempt of ``kind`` here: a ``spark`` attempt runs in the task executor's
    pipeline worker when it has one (pipeline code never runs in the task executor itself)."""
    if kind == SPARK_OPERATOR_KIND:
        from sparkmill.services.taskexecutor.pipeline.link import (
            SERVICE_KEY,
            PipelineWorkerInvokable,
            PipelineWorkerLink,
        )

        link = services.get(SERVICE_KEY)
        if isinstance(link, PipelineWorkerLink):
            return functools.partial(PipelineWorkerInvokable, link)
    return OPERATOR_KINDS.get(kind)


def known_operator_kinds() -> frozenset[str]:
    return frozenset(OPERATOR_KINDS)
