"""Whether a failed attempt may be restarted at all, before the restart strategy is asked.

Flink's ``ExecutionFailureHandler`` asks its ``ThrowableClassifier`` first and fails the job at
once for a ``NON_RECOVERABLE_ERROR``; only the rest goes to the restart strategy. sparkmill does
the same in two places:

* on the task executor, where the exception object exists,
  :func:`sparkmill.common.core.errors.classify_task_exception` marks what no restart can fix (a
  bad input path, an ``AnalysisException``, a ``SuppressRestartsError``): the state update
  carries ``suppress_restarts``, and the report is trusted, never the exception's name;
* here, :class:`RepeatedFailureDetector` catches the deterministic failures that no type gives
  away - a user function that raises on every row raises the same error on every attempt. A
  subtask whose attempt fails with exactly the error (type and first line of the message) its
  previous failed attempt of this job had is failing deterministically, and the job fails with
  that error as its root cause instead of retrying for minutes (``restart-strategy.fail-on-
  repeated-error``).

Only errors raised by the task's own code are compared. A lost slot or task executor, a failed
deployment, lost input partitions, an executor whose Spark session died: those are the
environment's failures, and an identical one next time is a coincidence of the cluster, not a
bug of the job - they are always restarted (with back-off) and neither count nor clear a
subtask's record. A finished attempt clears it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkmill.services.jobmaster.executiongraph.execution_topology import ExecutionVertexID


@dataclass(frozen=True, slots=True)
class _Failed:
    attempt_number: int
    signature: tuple[str, str]


def error_signature(exception_type: str, message: str) -> tuple[str, str]:
    """What makes two failures "the same error": the exception type and the first line of the
    message (the rest - traces, Spark's stage and task numbers - differs between attempts)."""
    lines = message.strip().splitlines()
    return exception_type, lines[0].strip() if lines else ""


def not_restarted(
    description: str, message: str, suppress_restarts: bool, repeats: int | None
) -> str | None:
    """Why the failure of ``description`` fails the job without a restart (the job's failure
    cause), or None when the restart strategy decides."""
    if suppress_restarts:
        # Flink's SuppressRestartsException: no restart can fix this failure.
        return f"{description} failed: {message} (not restarted: restarting cannot help)"
    if repeats is not None:
        return (
            f"{description} failed: {message} (not restarted: attempt #{repeats} of this "
            "subtask failed with the same error, so it fails deterministically; see "
            "restart-strategy.fail-on-repeated-error)"
        )
    return None


class RepeatedFailureDetector:
    """Remembers each subtask's last failure raised by its own code."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._last: dict[ExecutionVertexID, _Failed] = {}

    def repeated(
        self,
        vertex_id: ExecutionVertexID,
        attempt_number: int,
        exception_type: str,
        message: str,
    ) -> int | None:
        """Record a failure raised by the task; the attempt number of the earlier attempt that
        failed the same way, or None when this one does not repeat it."""
        signature = error_signature(exception_type, message)
        previous = self._last.get(vertex_id)
        self._last[vertex_id] = _Failed(attempt_number, signature)
        if not self.enabled or previous is None:
            return None
        if previous.attempt_number < attempt_number and previous.signature == signature:
            return previous.attempt_number
        return None

    def finished(self, vertex_id: ExecutionVertexID) -> None:
        self._last.pop(vertex_id, None)


__all__ = ["RepeatedFailureDetector", "error_signature", "not_restarted"]
