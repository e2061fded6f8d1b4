"""The shared data-plane contract: what the JobMaster builds, the task executor reads back."""

from __future__ import annotations

from sparkmill.common.core.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.deployment.descriptor import TaskDeployment
from sparkmill.common.pipeline.collect import (
    decode_rows,
    encode_rows,
    pack_accumulators,
    unpack_accumulators,
)
from sparkmill.common.pipeline.noop import NoOpOptions, decode_noop_payload, encode_noop_payload
from sparkmill.common.v1 import common_pb2


def sample_deployment() -> TaskDeployment:
    gate = InputGateInfo(
        dataset_id="ds-1",
        pattern="POINTWISE",
        partitioner="forward",
        producer_parallelism=5,
        partitions=(
            InputPartitionInfo("ds-1", 2, "att-2", "te-a"),
            InputPartitionInfo("ds-1", 3, "att-3", "te-b"),
        ),
    )
    broadcast = InputGateInfo(
        "ds-2", "ALL_TO_ALL", "broadcast", 1, (InputPartitionInfo("ds-2", 0, "att-x", "te-c"),)
    )
    return TaskDeployment(
        job_id="job",
        job_name="name",
        vertex_id="vertex",
        vertex_name="map",
        subtask_index=1,
        parallelism=2,
        attempt_id="attempt",
        attempt_number=3,
        allocation_id="allocation",
        operator_kind="spark",
        operator_payload=b"\x00payload",
        vertex_version=4,
        job_master_epoch=1_700_000_000_000,
        job_config={"k": "v"},
        inputs=(gate, broadcast),
        produced_dataset_ids=("out-1", "out-2"),
    )


def test_a_deployment_survives_the_wire() -> None:
    deployment = sample_deployment()
    message = deployment.to_proto()
    assert message.inputs[0].pattern == common_pb2.POINTWISE
    assert message.inputs[1].pattern == common_pb2.ALL_TO_ALL
    decoded = type(deployment).from_proto(type(message).FromString(message.SerializeToString()))
    assert decoded == deployment


def test_collected_rows_are_packed_per_subtask_in_subtask_order() -> None:
    parts = {1: encode_rows(["a"], [(2,)], False), 0: encode_rows(["a"], [(1,)], True), 2: b""}
    unpacked = unpack_accumulators(pack_accumulators(parts))
    assert unpacked == [parts[0], parts[1], b""]
    first = decode_rows(unpacked[0])
    assert (first.columns, first.rows, first.truncated) == (("a",), ((1,),), True)


def test_noop_payload_round_trip() -> None:
    options = NoOpOptions(sleep_s=1.5, fail_attempts=2)
    assert decode_noop_payload(encode_noop_payload(options)) == options
    assert decode_noop_payload(b"") == NoOpOptions()
