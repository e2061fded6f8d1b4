"""The task deployment descriptor (Flink's ``TaskDeploymentDescriptor``), built and read in one
place.

The JobMaster describes an attempt as a :class:`TaskDeployment` and sends it as the protobuf
``TaskDeploymentDescriptor`` (:meth:`TaskDeployment.to_proto`); the task executor turns the
message back into the same value (:meth:`TaskDeployment.from_proto`).

A large input gate that many consumers share (every consumer of an ALL_TO_ALL edge reads all
of its producers' partitions) is *offloaded*: the descriptor carries only a reference to it
(``InputGate.shared_gate_id`` and ``generation``, no partitions), and the task executor fetches
the gate once from the JobMaster and caches it for the job, the way Flink's TaskManager fetches
offloaded shuffle descriptors from the blob server. Without it a 10,000 x 10,000 job would ship
10,000 partition entries in each of its 10,000 consumers' descriptors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import SharedGateID
from sparkmill.common.core.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.v1 import common_pb2, task_executor_pb2

# An offloaded input gate: its id and generation (Flink's offloaded shuffle descriptors of a
# ConsumedPartitionGroup, fetched from the blob server by key).
SharedGateKey = tuple[SharedGateID, int]


@dataclass(frozen=True, slots=True)
class TaskDeployment:
    """Everything a task executor needs to run one attempt of one subtask."""

    job_id: str
    job_name: str
    vertex_id: str
    vertex_name: str
    subtask_index: int
    parallelism: int
    attempt_id: str
    attempt_number: int
    allocation_id: str
    operator_kind: str
    operator_payload: bytes
    vertex_version: int = 0
    # The deploying JobMaster's leader epoch (from its election, never a clock): (epoch,
    # attempt number) orders the attempts of successive JobMasters.
    job_master_epoch: int = 0
    job_config: Mapping[str, str] = field(default_factory=dict)
    # What to read: each gate names the finished producer attempts whose partitions it reads.
    inputs: tuple[InputGateInfo, ...] = ()
    produced_dataset_ids: tuple[str, ...] = ()
    # Consumer subtasks of each produced data set (the split to write), aligned with
    # produced_dataset_ids; empty: the numbers in the operator's plan.
    consumer_parallelism: tuple[int, ...] = ()

    def to_proto(self) -> task_executor_pb2.TaskDeploymentDescriptor:
        tdd = task_executor_pb2.TaskDeploymentDescriptor(
            job_id=self.job_id,
            job_name=self.job_name,
            vertex_id=self.vertex_id,
            vertex_name=self.vertex_name,
            subtask_index=self.subtask_index,
            parallelism=self.parallelism,
            attempt_id=self.attempt_id,
            attempt_number=self.attempt_number,
            allocation_id=self.allocation_id,
            operator=common_pb2.OperatorSpec(
                kind=self.operator_kind, payload=self.operator_payload
            ),
            produced_dataset_ids=list(self.produced_dataset_ids),
            consumer_parallelism=list(self.consumer_parallelism),
            vertex_version=self.vertex_version,
            job_config=dict(self.job_config),
            job_master_epoch=self.job_master_epoch,
        )
        tdd.inputs.extend(input_gate_to_proto(gate) for gate in self.inputs)
        return tdd

    @classmethod
    def from_proto(
        cls,
        tdd: task_executor_pb2.TaskDeploymentDescriptor,
        shared_gates: Mapping[SharedGateKey, InputGateInfo] | None = None,
    ) -> TaskDeployment:
        """The deployment ``tdd`` describes; its offloaded gates (see :func:`shared_gate_key`)
        taken from ``shared_gates``, which the task executor fetched for it."""
        return cls(
            job_id=tdd.job_id,
            job_name=tdd.job_name,
            vertex_id=tdd.vertex_id,
            vertex_name=tdd.vertex_name,
            subtask_index=tdd.subtask_index,
            parallelism=tdd.parallelism,
            attempt_id=tdd.attempt_id,
            attempt_number=tdd.attempt_number,
            allocation_id=tdd.allocation_id,
            operator_kind=tdd.operator.kind,
            operator_payload=tdd.operator.payload,
            vertex_version=tdd.vertex_version,
            job_master_epoch=tdd.job_master_epoch,
            job_config=dict(tdd.job_config),
            inputs=tuple(_gate_of(gate, shared_gates) for gate in tdd.inputs),
            produced_dataset_ids=tuple(tdd.produced_dataset_ids),
            consumer_parallelism=tuple(tdd.consumer_parallelism),
        )


def input_gate_to_proto(gate: InputGateInfo) -> task_executor_pb2.InputGate:
    """The wire form of one input gate (the JobMaster caches it for a gate many consumers
    share)."""
    message = task_executor_pb2.InputGate(
        dataset_id=gate.dataset_id,
        pattern=cast(Any, common_pb2.DistributionPattern.Value(gate.pattern)),
        partitioner=gate.partitioner,
        producer_parallelism=gate.producer_parallelism,
        subpartitions=gate.subpartitions,
        subpartition_bounds=gate.subpartition_bounds,
        read_slices=gate.read_slices,
    )
    add = message.partitions.add
    for part in gate.partitions:
        add(
            dataset_id=part.dataset_id,
            partition_number=part.partition_number,
            producer_attempt_id=part.producer_attempt_id,
            producer_resource_id=part.producer_resource_id,
        )
    return message


def input_gate_from_proto(gate: task_executor_pb2.InputGate) -> InputGateInfo:
    """The input gate ``gate`` carries inline (an offloaded gate's fetched wire form too)."""
    return InputGateInfo(
        dataset_id=gate.dataset_id,
        pattern=common_pb2.DistributionPattern.Name(gate.pattern),
        partitioner=gate.partitioner,
        producer_parallelism=gate.producer_parallelism,
        partitions=tuple(
            InputPartitionInfo(
                p.dataset_id, p.partition_number, p.producer_attempt_id, p.producer_resource_id
            )
            for p in gate.partitions
        ),
        subpartitions=gate.subpartitions,
        subpartition_bounds=tuple(gate.subpartition_bounds),
        read_slices=tuple(gate.read_slices),
    )


def shared_gate_key(gate: task_executor_pb2.InputGate) -> SharedGateKey | None:
    """The key of an offloaded gate (None for a gate carried inline)."""
    if not gate.shared_gate_id:
        return None
    return SharedGateID(gate.shared_gate_id), gate.generation


def shared_gate_keys(tdd: task_executor_pb2.TaskDeploymentDescriptor) -> list[SharedGateKey]:
    """The offloaded gates ``tdd`` refers to, which must be fetched before it can run."""
    return [key for gate in tdd.inputs if (key := shared_gate_key(gate)) is not None]


def shared_gate_reference(
    gate: task_executor_pb2.InputGate, gate_id: SharedGateID, generation: int
) -> task_executor_pb2.InputGate:
    """What a descriptor carries instead of ``gate`` when the gate is offloaded."""
    return task_executor_pb2.InputGate(
        dataset_id=gate.dataset_id,
        pattern=gate.pattern,
        partitioner=gate.partitioner,
        producer_parallelism=gate.producer_parallelism,
        subpartitions=gate.subpartitions,
        subpartition_bounds=gate.subpartition_bounds,
        read_slices=gate.read_slices,
        shared_gate_id=gate_id,
        generation=generation,
    )


def _gate_of(
    gate: task_executor_pb2.InputGate, shared_gates: Mapping[SharedGateKey, InputGateInfo] | None
) -> InputGateInfo:
    if not gate.shared_gate_id:
        return input_gate_from_proto(gate)
    key = (SharedGateID(gate.shared_gate_id), gate.generation)
    resolved = None if shared_gates is None else shared_gates.get(key)
    if resolved is None:
        raise IllegalStateBug(
            f"input gate {gate.shared_gate_id[:8]} (generation {gate.generation}) is offloaded "
            "but was not fetched before the deployment was read"
        )
    return resolved
