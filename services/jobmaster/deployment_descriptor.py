"""The task deployment descriptor of an attempt (Flink's ``TaskDeploymentDescriptorFactory``).

Everything a task executor needs to run one attempt: which operator, which subtask of how many,
which slot, and for every input the partitions to read with the attempts that wrote them and
where. The wire form is :class:`~sparkmill.common.deployment.TaskDeployment`, shared with the
task executor, which parses it with the same class.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkmill.common.deployment import TaskDeployment
from sparkmill.common.exchange.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.ids import AllocationID, JobID
from sparkmill.services.jobmaster.execution_graph import Execution


def deployment_of(
    execution: Execution,
    allocation_id: AllocationID,
    *,
    job_id: JobID,
    job_name: str,
    job_master_epoch: int,
    job_config: Mapping[str, str],
) -> TaskDeployment:
    """What deploys ``execution`` into the slot ``allocation_id``."""
    vertex = execution.vertex
    jv = vertex.job_vertex
    inputs = tuple(
        InputGateInfo(
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
        for edge, group in zip(jv.job_vertex.inputs, vertex.consumed_partition_groups, strict=True)
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
