"""The input gates of a task, as its deployment descriptor names them."""

from __future__ import annotations

from dataclasses import dataclass

NO_DATA_PARTITIONER = "none"
"""The partitioner of an edge that carries no records: its consumer only waits for the producer
to finish (e.g. a pipeline's final commit vertex). Such a result cannot be lost."""


@dataclass(frozen=True, slots=True)
class InputPartitionInfo:
    """One result partition a task reads: written by ``producer_attempt_id``."""

    dataset_id: str
    partition_number: int
    producer_attempt_id: str
    producer_resource_id: str


@dataclass(frozen=True, slots=True)
class InputGateInfo:
    """What a task reads for one input: the finished producer attempts' partitions."""

    dataset_id: str
    pattern: str  # "POINTWISE" | "ALL_TO_ALL"
    partitioner: str  # "forward" | "hash" | "rebalance" | "broadcast"
    producer_parallelism: int
    partitions: tuple[InputPartitionInfo, ...]
    # Sub-partitions each producer wrote for a hash or rebalance exchange; 0: one per consumer
    # subtask. More than the consumers when they were decided after the producers ran.
    subpartitions: int = 0
    # With a late consumer's ranges balanced by bytes: consumer i reads [bounds[i],
    # bounds[i+1]) (see sparkmill.common.exchange.subpartitions); () otherwise.
    subpartition_bounds: tuple[int, ...] = ()
    # With skewed sub-partitions split: per consumer subtask, the first and end sub-partition
    # and the first and end producer it reads (sparkmill.common.exchange.skewed_splits).
    read_slices: tuple[int, ...] = ()
