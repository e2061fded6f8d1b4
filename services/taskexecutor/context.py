"""What an invokable is given and what it returns (Flink's ``Environment`` and the task's
outcome), shared by the task, the built-in operators and the data plane."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

from sparkmill.common.core.io_counters import NO_IO, IOCounters
from sparkmill.common.core.partitions import InputGateInfo
from sparkmill.common.deployment.state_update import Written


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
    # Consumer subtasks per produced data set, as the JobMaster decided them (the split to
    # write; it overrides the operator's plan, which was compiled before the decision).
    consumer_parallelism: dict[str, int] = field(default_factory=dict)
    # Set by the task executor process.
    resource_id: str = ""
    allocation_id: str = ""
    slot_index: int | None = None
    exchange_dir: str = ""
    # The cluster's own directories (exchange, HA storage): no sink may write there.
    protected_dirs: tuple[str, ...] = ()
    services: dict[str, object] = field(default_factory=dict)  # e.g. the SparkSession manager


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """What a finished attempt did, and what it returns to the JobMaster (e.g. collected rows)."""

    io: IOCounters = NO_IO
    accumulator: bytes = b""
    # Per hash or rebalance output: (data set id, bytes written into each sub-partition).
    written: Written = ()


class Invokable(Protocol):
    def invoke(self, context: TaskContext) -> TaskOutcome:
        """Run the task to completion on the calling (task) thread; raise to fail it."""
        ...

    def cancel(self) -> None:
        """Called from another thread: make :meth:`invoke` return or raise soon."""
        ...
