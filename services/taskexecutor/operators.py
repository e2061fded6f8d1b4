"""What a task runs: operator kinds and their invokables (Flink's ``AbstractInvokable``).

A vertex's :class:`~common.jobgraph.OperatorSpec` names a ``kind`` and carries an opaque
``payload``. The task executor looks the kind up in :data:`OPERATOR_KINDS` and runs the
invokable's :meth:`Invokable.invoke` on the task's own thread, never on the event loop.

Built in:

* ``noop`` - the **test operator** (like Flink's ``NoOpInvokable``): optionally sleeps, and can
  fail its first N attempts. Used by tests and benchmarks to exercise the control plane alone.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sparkmill.common.jobgraph import NOOP_OPERATOR_KIND, SPARK_OPERATOR_KIND

NOOP_KIND = NOOP_OPERATOR_KIND


@dataclass(slots=True)
class TaskContext:
    """What an invokable knows about the attempt it runs."""

    job_id: str
    job_name: str
    vertex_id: str
    vertex_name: str
    subtask_index: int
    parallelism: int
    attempt_id: str
    attempt_number: int
    payload: bytes
    # Orders attempts across JobMasters (see TaskDeploymentDescriptor.job_master_epoch).
    job_master_epoch: int = 0
    job_config: dict[str, str] = field(default_factory=dict)
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Data-plane wiring, straight from the TaskDeploymentDescriptor: what to read (each input
    # gate names the finished producer attempts whose result partitions it consumes) and which
    # data sets to produce.
    inputs: list[InputGateInfo] = field(default_factory=list)
    produced_dataset_ids: list[str] = field(default_factory=list)
    # Set by the task executor process.
    resource_id: str = ""
    allocation_id: str = ""
    slot_index: int | None = None
    exchange_dir: str = ""
    services: dict[str, object] = field(default_factory=dict)  # e.g. the SparkSession manager


@dataclass(frozen=True, slots=True)
class InputPartitionInfo:
    dataset_id: str
    partition_number: int
    producer_attempt_id: str
    producer_resource_id: str


class PartitionNotFoundError(RuntimeError):
    """Input partitions of the task are missing or unreadable (Flink's
    ``PartitionNotFoundException``): running the task again cannot help until their producers
    have run again, so the failure names them and the JobMaster restarts those producers too."""

    def __init__(self, message: str, partitions: tuple[InputPartitionInfo, ...]) -> None:
        super().__init__(message)
        self.partitions = partitions


@dataclass(frozen=True, slots=True)
class InputGateInfo:
    dataset_id: str
    pattern: str  # "POINTWISE" | "ALL_TO_ALL"
    partitioner: str  # "forward" | "hash" | "rebalance" | "broadcast"
    producer_parallelism: int
    partitions: tuple[InputPartitionInfo, ...]


@dataclass(slots=True)
class TaskOutcome:
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    accumulator: bytes = b""


class Invokable(Protocol):
    def invoke(self, context: TaskContext) -> TaskOutcome:
        """Run the task to completion on the calling (task) thread; raise to fail it."""
        ...

    def cancel(self) -> None:
        """Called from another thread: make :meth:`invoke` return or raise soon."""
        ...


class TaskCancelledError(Exception):
    """Raised inside a task thread when it notices it was cancelled."""


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
        return TaskOutcome(records_in=0, records_out=0)

    def cancel(self) -> None:
        self._cancel.set()


@dataclass(frozen=True, slots=True)
class NoOpOptions:
    sleep_s: float = 0.0
    fail_attempts: int = 0


def encode_noop_payload(options: NoOpOptions) -> bytes:
    return json.dumps({"sleep_s": options.sleep_s, "fail_attempts": options.fail_attempts}).encode()


def decode_noop_payload(payload: bytes) -> NoOpOptions:
    if not payload:
        return NoOpOptions()
    raw = json.loads(payload)
    return NoOpOptions(float(raw.get("sleep_s", 0.0)), int(raw.get("fail_attempts", 0)))


def _spark_invokable() -> Invokable:
    # Imported on first use: the control plane (and a task executor running only noop tasks)
    # never loads the data plane.
    from sparkmill.services.taskexecutor.spark.invokable import SparkInvokable

    return SparkInvokable()


OPERATOR_KINDS: dict[str, Callable[[], Invokable]] = {
    NOOP_KIND: NoOpInvokable,
    SPARK_OPERATOR_KIND: _spark_invokable,
}
"""Operator kind → factory of a fresh invokable per attempt."""


def known_operator_kinds() -> frozenset[str]:
    return frozenset(OPERATOR_KINDS)
