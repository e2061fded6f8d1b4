"""The task deployment descriptor of an attempt (Flink's ``TaskDeploymentDescriptorFactory``).

Everything a task executor needs to run one attempt: which operator, which subtask of how many,
which slot, and for every input the partitions to read with the attempts that wrote them and
where. The wire form is :class:`~sparkmill.common.deployment.descriptor.TaskDeployment`, shared
with the task executor, which parses it with the same class.

Every consumer of an ALL_TO_ALL edge reads the same partitions: its input gate is the same for
all of them. Like Flink, which serializes the shuffle descriptors of a ``ConsumedPartitionGroup``
once and reuses them for every consumer, :class:`InputGateCache` builds the wire form of a
shared gate once, so deploying N consumers of M producers costs O(N + M) Python work instead
of O(N x M) (the copies into each descriptor happen in protobuf's C code). A large shared
gate is not even copied: it is offloaded (see :mod:`sparkmill.common.deployment.descriptor`), each
descriptor carries a reference, and each task executor fetches the gate once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkmill.common.config.options import DEPLOYMENT_OFFLOAD_MIN_PARTITIONS
from sparkmill.common.core.errors import FailedPreconditionError, NotFoundError
from sparkmill.common.core.ids import AllocationID, JobID, SharedGateID, new_shared_gate_id, short
from sparkmill.common.core.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.deployment.descriptor import (
    TaskDeployment,
    input_gate_to_proto,
    shared_gate_reference,
)
from sparkmill.common.jobgraph.model import JobEdge
from sparkmill.common.v1 import task_executor_pb2
from sparkmill.services.jobmaster.executiongraph.execution_graph import Execution
from sparkmill.services.jobmaster.executiongraph.execution_topology import (
    ConsumedPartitionGroup,
    IntermediateResult,
)

# A gate of fewer partitions is cheaper to build than to look up and keep.
_CACHED_GATE_MIN_PARTITIONS = 8
DEFAULT_OFFLOAD_MIN_PARTITIONS = DEPLOYMENT_OFFLOAD_MIN_PARTITIONS.default


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
        consumer_parallelism=tuple(consumer_parallelism(r) for r in jv.produced_results),
    )


def consumer_parallelism(result: IntermediateResult) -> int:
    """The split the producers of ``result`` write (0 when nothing reads it): as many parts as
    its consumer has subtasks, or, for a consumer decided after they ran, the most it may get
    (each of its subtasks then reads a range of parts)."""
    return result.subpartitions


def gate_of(edge: JobEdge, group: ConsumedPartitionGroup) -> InputGateInfo:
    """The input gate reading ``group`` for ``edge``: each partition with its producer's
    current attempt and where it ran."""
    return InputGateInfo(
        dataset_id=edge.source,
        pattern=edge.pattern.name,
        partitioner=edge.partitioner,
        producer_parallelism=group.result.num_partitions,
        subpartitions=group.result.subpartitions,
        subpartition_bounds=group.result.subpartition_bounds,
        read_slices=group.result.read_slices,
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


@dataclass(slots=True)
class _CachedGate:
    group: ConsumedPartitionGroup
    gate_id: SharedGateID
    generation: int
    message: task_executor_pb2.InputGate  # the whole gate
    reference: task_executor_pb2.InputGate | None  # what descriptors carry when it is offloaded


class InputGateCache:
    """The wire form of each shared input gate, built once per consumable group, and the
    offloaded gates task executors fetch (``JobMasterGateway.GetInputGate``).

    A gate is cached only while its group is consumable (every producer's current attempt
    FINISHED): then who wrote each partition, and where, cannot change until a producer runs
    again, which makes a partition unfinished and bumps the group's ``generation``; a cached
    gate of an older generation is rebuilt. A gate of at least ``offload_min_partitions``
    partitions is offloaded: descriptors carry a reference (its id and generation) and the
    task executors fetch the gate itself once. Only the current generation is served, so a
    consumer deployed with an older one can never read what a superseded producer wrote.
    """

    def __init__(self, offload_min_partitions: int = DEFAULT_OFFLOAD_MIN_PARTITIONS) -> None:
        self._offload_min_partitions = offload_min_partitions
        self._gates: dict[int, _CachedGate] = {}
        self._by_id: dict[SharedGateID, _CachedGate] = {}

    def gate(self, edge: JobEdge, group: ConsumedPartitionGroup) -> task_executor_pb2.InputGate:
        """What a consumer's descriptor carries for its input ``edge`` reading ``group``."""
        offload = len(group) >= self._offload_min_partitions
        if not group.is_consumable or (len(group) < _CACHED_GATE_MIN_PARTITIONS and not offload):
            return input_gate_to_proto(gate_of(edge, group))
        cached = self._gates.get(id(group))
        if cached is None or cached.group is not group:
            message = input_gate_to_proto(gate_of(edge, group))
            # The group is kept with its entry: its id cannot be reused while the entry lives.
            cached = _CachedGate(group, new_shared_gate_id(), group.generation, message, None)
            self._gates[id(group)] = cached
            self._by_id[cached.gate_id] = cached
        elif cached.generation != group.generation:
            cached.message = input_gate_to_proto(gate_of(edge, group))
            cached.generation = group.generation
            cached.reference = None
        if not offload:
            return cached.message
        if cached.reference is None:
            cached.reference = shared_gate_reference(
                cached.message, cached.gate_id, cached.generation
            )
        return cached.reference

    def shared_gate(self, gate_id: SharedGateID, generation: int) -> task_executor_pb2.InputGate:
        """The offloaded gate ``gate_id`` at ``generation``, for a task executor to cache.

        Raises NotFoundError for a gate never offloaded here, FailedPreconditionError when the
        gate is at another generation (or being re-produced) now.
        """
        cached = self._by_id.get(gate_id)
        if cached is None:
            raise NotFoundError(f"no offloaded input gate {short(gate_id)} in this job")
        group = cached.group
        if generation != cached.generation or generation != group.generation:
            raise FailedPreconditionError(
                f"input gate {short(gate_id)} is at generation {group.generation}, not "
                f"{generation}: a producer of its partitions ran again since the deployment "
                "was made"
            )
        if not group.is_consumable:
            raise FailedPreconditionError(
                f"input gate {short(gate_id)}: a producer of its partitions is running again"
            )
        return cached.message

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
