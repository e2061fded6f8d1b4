"""The task deployment descriptor of an attempt (Flink's ``TaskDeploymentDescriptorFactory``).

Everything a task executor needs to run one attempt: which operator, which subtask of how many,
which slot, and for every input the partitions to read with the attempts that wrote them and
where. The wire form is :class:`~sparkmill.common.deployment.TaskDeployment`, shared with the
task executor, which parses it with the same class.

Every consumer of an ALL_TO_ALL edge reads the same partitions: its input gate is the same for
all of them. Like Flink, which serializes the shuffle descriptors of a ``ConsumedPartitionGroup``
once and reuses them for every consumer, :class:`InputGateCache` builds the wire form of a
shared gate once, so deploying N consumers of M producers costs O(N + M) Python work instead
of O(N x M) (the copies into each descriptor happen in protobuf's C code).
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkmill.common.deployment import TaskDeployment, input_gate_to_proto
from sparkmill.common.exchange.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.ids import AllocationID, JobID
from sparkmill.common.jobgraph import JobEdge
from sparkmill.common.v1 import task_executor_pb2
from sparkmill.services.jobmaster.execution_graph import Execution
from sparkmill.services.jobmaster.execution_topology import ConsumedPartitionGroup

# A gate of fewer partitions is cheaper to build than to look up and keep.
_CACHED_GATE_MIN_PARTITIONS = 8


def deployment_of(
    execution: Execution,
    allocation_id: AllocationID,
    *,
    job_id: JobID,
    job_name: str,
    job_master_epoch: int,
    job_config: Mapping[str, str],
    with_inputs: bool = True,
) -> TaskDeployment:
    """What deploys ``execution`` into the slot ``allocation_id`` (without its input gates
    when ``with_inputs`` is false: :func:`deployment_proto_of` adds them from its cache)."""
    vertex = execution.vertex
    jv = vertex.job_vertex
    inputs = (
        tuple(
            gate_of(edge, group)
            for edge, group in zip(
                jv.job_vertex.inputs, vertex.consumed_partition_groups, strict=True
            )
        )
        if with_inputs
        else ()
    )
    return TaskDeployment(
        job_id=job_id,
        job_name=job_name,
        vertex_id=jv.id,
        vertex_name=jv.name,
        subtask_index=vertex.subtask_index,
        parallelism=jv.parallelism,
        attempt_id=execution.attempt_id,
        attempt_number=execution.attempt_number,
        allocation_id=allocation_id,
        operator_kind=jv.job_vertex.operator.kind,
        operator_payload=jv.job_vertex.operator.payload,
        vertex_version=vertex.vertex_version,
        job_master_epoch=job_master_epoch,
        job_config=dict(job_config),
        inputs=inputs,
        produced_dataset_ids=tuple(r.id for r in jv.produced_results),
    )


def gate_of(edge: JobEdge, group: ConsumedPartitionGroup) -> InputGateInfo:
    """The input gate reading ``group`` for ``edge``: each partition with its producer's
    current attempt and where it ran."""
    return InputGateInfo(
        dataset_id=edge.source,
        pattern=edge.pattern.name,
        partitioner=edge.partitioner,
        producer_parallelism=group.result.num_partitions,
        partitions=tuple(
            InputPartitionInfo(
                dataset_id=edge.source,
                partition_number=partition.partition_number,
                producer_attempt_id=partition.producer.current_execution.attempt_id,
                producer_resource_id=partition.producer.current_execution.task_executor_id,
            )
            for partition in group
        ),
    )


class InputGateCache:
    """The wire form of each shared input gate, built once per consumable group.

    A gate is cached only while its group is consumable (every producer's current attempt
    FINISHED): then who wrote each partition, and where, cannot change until a producer runs
    again, which makes a partition unfinished and bumps the group's ``generation``; a cached
    gate of an older generation is rebuilt.
    """

    def __init__(self) -> None:
        self._gates: dict[int, tuple[ConsumedPartitionGroup, int, task_executor_pb2.InputGate]] = {}

    def gate(self, edge: JobEdge, group: ConsumedPartitionGroup) -> task_executor_pb2.InputGate:
        if len(group) < _CACHED_GATE_MIN_PARTITIONS or not group.is_consumable:
            return input_gate_to_proto(gate_of(edge, group))
        cached = self._gates.get(id(group))
        if cached is not None and cached[0] is group and cached[1] == group.generation:
            return cached[2]
        message = input_gate_to_proto(gate_of(edge, group))
        # The group is kept with its entry: its id cannot be reused while the entry lives.
        self._gates[id(group)] = (group, group.generation, message)
        return message

    def __len__(self) -> int:
        return len(self._gates)


def deployment_proto_of(
    execution: Execution,
    allocation_id: AllocationID,
    gates: InputGateCache,
    *,
    job_id: JobID,
    job_name: str,
    job_master_epoch: int,
    job_config: Mapping[str, str],
) -> task_executor_pb2.TaskDeploymentDescriptor:
    """The wire form of :func:`deployment_of`, its shared input gates taken from ``gates``."""
    tdd = deployment_of(
        execution,
        allocation_id,
        job_id=job_id,
        job_name=job_name,
        job_master_epoch=job_master_epoch,
        job_config=job_config,
        with_inputs=False,
    ).to_proto()
    vertex = execution.vertex
    tdd.inputs.extend(
        gates.gate(edge, group)
        for edge, group in zip(
            vertex.job_vertex.job_vertex.inputs, vertex.consumed_partition_groups, strict=True
        )
    )
    return tdd
