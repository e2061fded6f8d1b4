"""Unit tests of common/jobgraph/codec.py: round trips, wire defaults and lenient decoding."""

from __future__ import annotations

import math
import random

import pytest

from sparkmill.common.core.errors import InvalidArgumentError, InvalidJobGraphError
from sparkmill.common.core.ids import IntermediateDataSetID, JobID, JobVertexID
from sparkmill.common.core.proto_convert import profile_from_proto, profile_to_proto
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.jobgraph.codec import (
    job_graph_from_proto,
    job_graph_to_proto,
)
from sparkmill.common.jobgraph.model import (
    DEFAULT_MAX_PARALLELISM,
    DEFAULT_SLOT_SHARING_GROUP,
    KNOWN_OPERATOR_KINDS,
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
    ResultPartitionType,
)
from sparkmill.common.jobgraph.validation import validate_job_graph
from sparkmill.common.v1 import common_pb2

V_SRC, V_MAP, V_SINK = JobVertexID("v-source"), JobVertexID("v-map"), JobVertexID("v-sink")
DS_SRC, DS_MAP = IntermediateDataSetID("ds-source"), IntermediateDataSetID("ds-map")


def sample_graph() -> JobGraph:
    """Three vertices using every field, every enum member and non-default values."""
    return JobGraph(
        job_id=JobID("0123456789abcdef0123456789abcdef"),
        name="wordcount",
        vertices=[
            JobVertex(
                id=V_SRC,
                name="source",
                parallelism=2,
                operator=OperatorSpec("noop", b"\x00\x01payload"),
                max_parallelism=128,
                resource_profile=ResourceProfile(cpu_cores=0.5, memory_mb=256),
                slot_sharing_group="group-a",
                produced=[IntermediateDataSet(DS_SRC, V_SRC, ResultPartitionType.PIPELINED)],
            ),
            JobVertex(
                id=V_MAP,
                name="map",
                parallelism=4,
                operator=OperatorSpec("spark", b"pickled"),
                produced=[IntermediateDataSet(DS_MAP, V_MAP, ResultPartitionType.BLOCKING)],
                inputs=[JobEdge(DS_SRC, V_MAP, DistributionPattern.ALL_TO_ALL, "hash")],
            ),
            JobVertex(
                id=V_SINK,
                name="sink",
                parallelism=1,
                operator=OperatorSpec("noop"),
                inputs=[JobEdge(DS_MAP, V_SINK, DistributionPattern.POINTWISE, "rebalance")],
            ),
        ],
        config={
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": "3",
        },
    )


def decode_bytes(data: bytes) -> JobGraph:
    message = common_pb2.JobGraph()
    message.ParseFromString(data)
    return job_graph_from_proto(message)


def validation_error(graph: JobGraph) -> str:
    with pytest.raises(InvalidJobGraphError) as info:
        validate_job_graph(graph, known_operator_kinds=KNOWN_OPERATOR_KINDS)
    return str(info.value)


# -- round trips ----------------------------------------------------------------------------------


def test_round_trip_preserves_every_field() -> None:
    graph = sample_graph()
    assert job_graph_from_proto(job_graph_to_proto(graph)) == graph


def test_round_trip_through_serialized_bytes() -> None:
    graph = sample_graph()
    assert decode_bytes(job_graph_to_proto(graph).SerializeToString()) == graph


def test_round_trip_of_defaults_and_empty_graph() -> None:
    vertex = JobVertex(id=V_SRC, name="only", parallelism=1, operator=OperatorSpec("noop"))
    graph = JobGraph(job_id=JobID("j"), name="n", vertices=[vertex])
    decoded = job_graph_from_proto(job_graph_to_proto(graph))
    assert decoded == graph
    assert decoded.vertices[0].resource_profile == UNKNOWN_PROFILE
    empty = JobGraph(job_id=JobID(""), name="")
    assert job_graph_from_proto(job_graph_to_proto(empty)) == empty


def test_decoded_sample_graph_is_valid() -> None:
    graph = job_graph_from_proto(job_graph_to_proto(sample_graph()))
    validate_job_graph(graph, known_operator_kinds=KNOWN_OPERATOR_KINDS)
    assert [v.name for v in graph.topological_order()] == ["source", "map", "sink"]


def test_resource_profile_round_trip() -> None:
    for profile in (UNKNOWN_PROFILE, ResourceProfile(1.5, 2048), ResourceProfile(0.0, 1)):
        assert profile_from_proto(profile_to_proto(profile)) == profile
    assert profile_from_proto(common_pb2.ResourceProfile()) == UNKNOWN_PROFILE


@pytest.mark.parametrize(
    ("cpu", "memory"), [(-1.0, 0), (0.0, -5), (math.nan, 0), (math.inf, 10), (-math.inf, 0)]
)
def test_resource_profile_decoding_rejects_invalid_values(cpu: float, memory: int) -> None:
    message = common_pb2.ResourceProfile(cpu_cores=cpu, memory_mb=memory)
    with pytest.raises(InvalidArgumentError, match=r"^resource_profile: invalid resource profile"):
        profile_from_proto(message)
    with pytest.raises(InvalidJobGraphError, match=r"^total_resources: invalid resource profile"):
        profile_from_proto(message, field="total_resources", error=InvalidJobGraphError)


# -- the wire's implicit fields and defaults ------------------------------------------------------


def test_proto_has_no_producer_or_target_and_decoding_fills_them() -> None:
    message = job_graph_to_proto(sample_graph())
    assert "producer" not in common_pb2.IntermediateDataSet.DESCRIPTOR.fields_by_name
    assert "target" not in common_pb2.JobEdge.DESCRIPTOR.fields_by_name
    decoded = job_graph_from_proto(message)
    for vertex in decoded.vertices:
        assert all(ds.producer == vertex.id for ds in vertex.produced)
        assert all(edge.target == vertex.id for edge in vertex.inputs)
    assert decoded.datasets()[DS_MAP].producer == V_MAP


def test_zero_and_empty_wire_values_mean_defaults() -> None:
    message = common_pb2.JobGraph(
        job_id="0123456789abcdef0123456789abcdef",
        name="n",
        vertices=[
            common_pb2.JobVertex(
                id="a",
                name="a",
                parallelism=3,
                operator=common_pb2.OperatorSpec(kind="noop"),
                produced=[common_pb2.IntermediateDataSet(id="d", result_type=common_pb2.BLOCKING)],
            ),
            common_pb2.JobVertex(
                id="b",
                name="b",
                parallelism=3,
                operator=common_pb2.OperatorSpec(kind="noop"),
                inputs=[common_pb2.JobEdge(source_dataset_id="d", pattern=common_pb2.POINTWISE)],
            ),
        ],
    )
    graph = job_graph_from_proto(message)
    a, b = graph.vertices
    assert a.max_parallelism == DEFAULT_MAX_PARALLELISM
    assert a.slot_sharing_group == DEFAULT_SLOT_SHARING_GROUP
    assert a.resource_profile == UNKNOWN_PROFILE
    assert a.operator == OperatorSpec("noop", b"")
    assert b.inputs[0].partitioner == "forward"
    assert graph.config == {}
    validate_job_graph(graph, known_operator_kinds=KNOWN_OPERATOR_KINDS)


def test_default_max_parallelism_is_encoded_explicitly_and_decodes_equal() -> None:
    message = job_graph_to_proto(sample_graph())
    assert message.vertices[1].max_parallelism == DEFAULT_MAX_PARALLELISM
    assert message.vertices[0].max_parallelism == 128


@pytest.mark.parametrize("enum_type", [DistributionPattern, ResultPartitionType])
def test_enum_numbers_and_names_match_the_proto(
    enum_type: type[DistributionPattern] | type[ResultPartitionType],
) -> None:
    proto_enum = getattr(common_pb2, enum_type.__name__)
    for member in enum_type:
        assert proto_enum.Value(member.name) == member.value
    # Every proto value but UNSPECIFIED has a Python member.
    assert {n for n in proto_enum.values() if n != 0} == {m.value for m in enum_type}


# -- lenient decoding: markers the validator reports ----------------------------------------------


def _edge_message(pattern: int, result_type: int) -> common_pb2.JobGraph:
    message = job_graph_to_proto(sample_graph())
    message.vertices[1].inputs[0].pattern = pattern  # type: ignore[assignment]
    message.vertices[0].produced[0].result_type = result_type  # type: ignore[assignment]
    return message


def markers(graph: JobGraph) -> tuple[object, object]:
    """The (typed as enum, but possibly marker) pattern and result type _edge_message set."""
    return graph.vertices[1].inputs[0].pattern, graph.vertices[0].produced[0].result_type


def test_unspecified_enums_decode_to_none_and_the_validator_reports_them() -> None:
    graph = job_graph_from_proto(_edge_message(0, 0))
    assert markers(graph) == (None, None)
    text = validation_error(graph)
    assert "2 problems" in text
    assert (
        "edge from data set ds-source to vertex 'map' (v-map) (input #0) has an unspecified "
        "distribution pattern; it must be one of POINTWISE, ALL_TO_ALL" in text
    )
    assert (
        "data set ds-source of vertex 'source' (v-source) has an unspecified result partition "
        "type" in text
    )


def test_unknown_enum_numbers_decode_to_the_number_and_the_validator_reports_them() -> None:
    message = _edge_message(7, 42)
    graph = decode_bytes(message.SerializeToString())  # unknown values survive the wire
    assert markers(graph) == (7, 42)
    text = validation_error(graph)
    assert "(input #0) has an unknown (7) distribution pattern" in text
    assert "data set ds-source of vertex 'source' (v-source) has an unknown (42) result" in text
    # Re-encoding keeps the unknown numbers rather than silently turning them into 0.
    again = job_graph_to_proto(graph)
    assert again.vertices[1].inputs[0].pattern == 7
    assert again.vertices[0].produced[0].result_type == 42


def test_python_none_pattern_encodes_as_unspecified() -> None:
    graph = sample_graph()
    graph.vertices[2].inputs[0].pattern = None  # type: ignore[assignment]
    message = job_graph_to_proto(graph)
    assert message.vertices[2].inputs[0].pattern == common_pb2.DISTRIBUTION_PATTERN_UNSPECIFIED


@pytest.mark.parametrize(("cpu", "memory"), [(-2.0, 100), (1.0, -1), (math.nan, 0)])
def test_invalid_wire_resource_profile_is_kept_for_the_validator(cpu: float, memory: int) -> None:
    message = job_graph_to_proto(sample_graph())
    message.vertices[1].resource_profile.cpu_cores = cpu
    message.vertices[1].resource_profile.memory_mb = memory
    graph = job_graph_from_proto(message)
    profile = graph.vertices[1].resource_profile
    assert profile.memory_mb == memory
    assert profile.cpu_cores == cpu or (math.isnan(cpu) and math.isnan(profile.cpu_cores))
    text = validation_error(graph)
    assert "vertex 'map' (v-map) has an invalid resource profile" in text
    assert f"memory={memory}MiB" in text


def test_resource_profile_constructor_refuses_what_only_unvalidated_keeps() -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        ResourceProfile(-1.0, 0)
    kept = ResourceProfile.unvalidated(-1.0, -5)
    assert (kept.cpu_cores, kept.memory_mb) == (-1.0, -5)
    # The switch is not a field: it changes neither equality nor the repr.
    assert ResourceProfile.unvalidated(1.0, 5) == ResourceProfile(1.0, 5)
    assert repr(kept) == "ResourceProfile(cpu_cores=-1.0, memory_mb=-5)"


def test_decoding_random_garbage_never_raises_and_validation_raises_only_invalid_job_graph() -> (
    None
):
    rng = random.Random(1234)
    ids = ["", "a", "b", "c", "d1", "d2"]

    def pick() -> str:
        return rng.choice(ids)

    for _ in range(300):
        message = common_pb2.JobGraph(job_id=pick(), name=pick())
        for _ in range(rng.randint(0, 5)):
            vertex = message.vertices.add(
                id=pick(),
                name=pick(),
                parallelism=rng.randint(-3, 5),
                max_parallelism=rng.choice([-1, 0, 1, 4, 40000]),
                slot_sharing_group=rng.choice(["", "g"]),
            )
            vertex.operator.kind = rng.choice(["", "noop", "spark", "bogus"])
            vertex.resource_profile.cpu_cores = rng.choice([0.0, 1.0, -1.0, math.nan])
            vertex.resource_profile.memory_mb = rng.choice([0, 64, -64])
            for _ in range(rng.randint(0, 2)):
                vertex.produced.add(id=pick(), result_type=rng.randint(0, 3))
            for _ in range(rng.randint(0, 2)):
                vertex.inputs.add(source_dataset_id=pick(), pattern=rng.randint(0, 3))
        graph = job_graph_from_proto(message)
        try:
            validate_job_graph(graph, known_operator_kinds=KNOWN_OPERATOR_KINDS)
        except InvalidJobGraphError as e:
            assert str(e).startswith(f"job graph {graph.name!r} is invalid: ")


# -- encoding refuses what the wire cannot express ------------------------------------------------


def test_encoding_refuses_an_edge_whose_target_is_not_its_holder() -> None:
    graph = sample_graph()
    graph.vertices[2].inputs[0].target = V_MAP
    with pytest.raises(InvalidJobGraphError) as info:
        job_graph_to_proto(graph)
    text = str(info.value)
    assert text.startswith("job graph 'wordcount' cannot be encoded: 1 problem")
    assert "input #0 of vertex 'sink' (v-sink) (reading data set ds-map) targets vertex v-map" in (
        text
    )


def test_encoding_refuses_a_data_set_whose_producer_is_not_its_holder() -> None:
    graph = sample_graph()
    graph.vertices[0].produced[0].producer = V_SINK
    with pytest.raises(InvalidJobGraphError, match=r"vertex 'source' .* data set ds-source"):
        job_graph_to_proto(graph)


def test_encoding_refuses_numbers_that_do_not_fit_and_reports_them_together() -> None:
    graph = sample_graph()
    graph.vertices[0].parallelism = 2**31
    graph.vertices[1].max_parallelism = -(2**40)
    with pytest.raises(InvalidJobGraphError) as info:
        job_graph_to_proto(graph)
    text = str(info.value)
    assert "2 problems" in text
    assert "vertex 'source' (v-source): parallelism 2147483648 does not fit" in text
    assert "vertex 'map' (v-map): max parallelism -1099511627776 does not fit" in text


def test_encoding_refuses_non_string_config() -> None:
    graph = sample_graph()
    graph.config["parallelism.default"] = 4  # type: ignore[assignment]
    with pytest.raises(InvalidJobGraphError, match=r"config entry 'parallelism\.default'"):
        job_graph_to_proto(graph)


def test_encoding_reports_wrongly_typed_fields_as_invalid_job_graph() -> None:
    graph = sample_graph()
    graph.vertices[1].operator.kind = 5  # type: ignore[assignment]
    with pytest.raises(InvalidJobGraphError, match=r"vertex 'map' \(v-map\) cannot be encoded"):
        job_graph_to_proto(graph)


def test_encoding_keeps_semantic_problems_for_the_validator() -> None:
    graph = sample_graph()
    graph.vertices[1].parallelism = 0
    graph.vertices[1].operator.kind = "bogus"
    decoded = job_graph_from_proto(job_graph_to_proto(graph))
    assert decoded == graph
    text = validation_error(decoded)
    assert "vertex 'map' (v-map) has parallelism 0" in text
    assert "vertex 'map' (v-map) runs unknown operator kind 'bogus'" in text
