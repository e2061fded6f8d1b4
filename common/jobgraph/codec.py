"""Converts a :class:`~sparkmill.common.jobgraph.model.JobGraph` to and from
``sparkmill.v1.JobGraph``.

The wire form differs from the in-memory one in a few places, and this module bridges them:

* a data set carries no ``producer``: it is the vertex whose ``produced`` list holds it;
* an edge carries no ``target``: it is the vertex whose ``inputs`` list holds it;
* ``max_parallelism == 0`` means :data:`~sparkmill.common.jobgraph.model.DEFAULT_MAX_PARALLELISM`,
  an empty ``slot_sharing_group`` means the default group and an empty ``partitioner`` means
  ``forward``;
* enum numbers are the same on both sides; ``0`` is the proto's *unspecified* value.

Decoding is lenient on purpose, so that the dispatcher's validator
(:func:`sparkmill.common.jobgraph.validation.validate_job_graph`) can report *every* problem of a
submitted graph in one message instead of the first one the decoder trips over:

* an unspecified distribution pattern or result partition type decodes to ``None``, an unknown
  number (e.g. from a newer client) decodes to that plain ``int``; both are outside the Python
  enum, which is how the validator recognises them;
* a resource profile with negative or non-finite values decodes to a :class:`ResourceProfile`
  carrying exactly those values (:meth:`ResourceProfile.unvalidated`), for the validator to report.

So a decoded graph must be validated before anything else uses it. Decoding itself never raises.

Encoding refuses, with :class:`~sparkmill.common.core.errors.InvalidJobGraphError`, only what the
wire cannot express: an edge whose ``target`` is not the vertex holding it, a data set whose
``producer`` is not the vertex listing it, and numbers or strings that do not fit their proto
fields. Everything else (bad parallelism, unknown operator kinds, cycles...) is encoded as is and
left to the dispatcher's validator, so a client learns about all of it from the one authoritative
place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar, cast

from sparkmill.common.core.errors import InvalidJobGraphError
from sparkmill.common.core.ids import IntermediateDataSetID, JobID, JobVertexID
from sparkmill.common.core.proto_convert import is_valid_profile, profile_to_proto
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.jobgraph.model import (
    DEFAULT_MAX_PARALLELISM,
    DEFAULT_SLOT_SHARING_GROUP,
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
    ResultPartitionType,
)
from sparkmill.common.v1 import common_pb2

DEFAULT_PARTITIONER = "forward"
"""What an empty ``JobEdge.partitioner`` on the wire means (the :class:`JobEdge` default)."""

_E = TypeVar("_E", DistributionPattern, ResultPartitionType)
_W = TypeVar("_W", common_pb2.DistributionPattern, common_pb2.ResultPartitionType)

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_PATTERN_TO_PROTO: Mapping[object, common_pb2.DistributionPattern] = {
    DistributionPattern.POINTWISE: common_pb2.POINTWISE,
    DistributionPattern.ALL_TO_ALL: common_pb2.ALL_TO_ALL,
}
_RESULT_TYPE_TO_PROTO: Mapping[object, common_pb2.ResultPartitionType] = {
    ResultPartitionType.BLOCKING: common_pb2.BLOCKING,
    ResultPartitionType.PIPELINED: common_pb2.PIPELINED,
}
_PATTERN_BY_NUMBER = {member.value: member for member in DistributionPattern}
_RESULT_TYPE_BY_NUMBER = {member.value: member for member in ResultPartitionType}


# -- resource profiles ----------------------------------------------------------------------------


def _lenient_profile_from_proto(message: common_pb2.ResourceProfile) -> ResourceProfile:
    """Like :func:`~sparkmill.common.core.proto_convert.profile_from_proto`, but keeps invalid
    values for the validator (which rejects them, naming the vertex)."""
    cpu, memory = float(message.cpu_cores), int(message.memory_mb)
    if is_valid_profile(cpu, memory):
        return ResourceProfile(cpu_cores=cpu, memory_mb=memory)
    # The validator names the offending vertex and values in its report.
    return ResourceProfile.unvalidated(cpu, memory)


# -- encoding -------------------------------------------------------------------------------------


def job_graph_to_proto(graph: JobGraph) -> common_pb2.JobGraph:
    """The wire form of ``graph``.

    Raises :class:`InvalidJobGraphError` listing everything the wire cannot represent (see the
    module docstring); all other problems are left to the dispatcher's validator.
    """
    problems: list[str] = []
    message = common_pb2.JobGraph()
    try:
        message.job_id = graph.job_id
        message.name = graph.name
    except (TypeError, ValueError) as e:
        problems.append(f"the job id or name cannot be encoded: {e}")
    for key, value in graph.config.items():
        if not _both_str(key, value):  # typed as str, but nothing stops a caller at run time
            problems.append(f"config entry {key!r}: {value!r}: keys and values must be strings")
            continue
        try:
            message.config[key] = value
        except (TypeError, ValueError) as e:
            problems.append(f"config entry {key!r} cannot be encoded: {e}")
    for position, vertex in enumerate(graph.vertices):
        vertex_message = _vertex_to_proto(vertex, position, problems)
        if vertex_message is not None:
            message.vertices.append(vertex_message)
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        lines = [f"job graph {graph.name!r} cannot be encoded: {count}"]
        lines.extend(f"  - {problem}" for problem in problems)
        raise InvalidJobGraphError("\n".join(lines))
    return message


def _both_str(key: object, value: object) -> bool:
    return isinstance(key, str) and isinstance(value, str)


def _vertex_to_proto(
    vertex: JobVertex, position: int, problems: list[str]
) -> common_pb2.JobVertex | None:
    label = f"vertex {vertex.name!r} ({vertex.id or f'no id, position {position}'})"
    before = len(problems)
    for what, number, low, high in (
        ("parallelism", vertex.parallelism, _INT32_MIN, _INT32_MAX),
        ("max parallelism", vertex.max_parallelism, _INT32_MIN, _INT32_MAX),
        ("resource profile memory", vertex.resource_profile.memory_mb, _INT64_MIN, _INT64_MAX),
    ):
        if not low <= number <= high:
            problems.append(f"{label}: {what} {number} does not fit the wire format")
    for dataset in vertex.produced:
        if dataset.producer != vertex.id:
            problems.append(
                f"{label} lists data set {dataset.id} whose producer is {dataset.producer}; "
                "a data set must be listed by the vertex that produces it"
            )
    for number, edge in enumerate(vertex.inputs):
        if edge.target != vertex.id:
            problems.append(
                f"input #{number} of {label} (reading data set {edge.source}) targets vertex "
                f"{edge.target}; an edge must be listed by the vertex that consumes it"
            )
    if len(problems) > before:
        return None
    try:
        return common_pb2.JobVertex(
            id=vertex.id,
            name=vertex.name,
            parallelism=vertex.parallelism,
            # The actual number, also for the default: the wire's 0 only means "default".
            max_parallelism=vertex.max_parallelism,
            operator=common_pb2.OperatorSpec(
                kind=vertex.operator.kind, payload=vertex.operator.payload
            ),
            resource_profile=profile_to_proto(vertex.resource_profile),
            slot_sharing_group=vertex.slot_sharing_group,
            produced=[
                common_pb2.IntermediateDataSet(
                    id=dataset.id,
                    result_type=_encode_enum(_RESULT_TYPE_TO_PROTO, dataset.result_type),
                )
                for dataset in vertex.produced
            ],
            inputs=[
                common_pb2.JobEdge(
                    source_dataset_id=edge.source,
                    pattern=_encode_enum(_PATTERN_TO_PROTO, edge.pattern),
                    partitioner=edge.partitioner,
                )
                for edge in vertex.inputs
            ],
            sink_paths=vertex.sink_paths,
            source_paths=vertex.source_paths,
            skew_splittable_inputs=vertex.skew_splittable_inputs,
        )
    except (TypeError, ValueError) as e:  # e.g. a str field holding a non-str, or bad unicode
        problems.append(f"{label} cannot be encoded: {e}")
        return None


def _encode_enum(table: Mapping[object, _W], value: object) -> _W:
    """The wire number of ``value``: a member's, a decoded marker's own, or 0 (unspecified)."""
    number = table.get(value)
    if number is not None:
        return number
    if type(value) is int and _INT32_MIN <= value <= _INT32_MAX:  # an unknown wire number
        return cast(_W, value)
    return cast(_W, 0)


# -- decoding -------------------------------------------------------------------------------------


def job_graph_from_proto(message: common_pb2.JobGraph) -> JobGraph:
    """The in-memory form of ``message``; fills in producers, edge targets and defaults.

    Never raises. Invalid content (unspecified enums, negative resources, a bad structure) is
    kept for :func:`sparkmill.common.jobgraph.validation.validate_job_graph` to report: validate the
    result before using it.
    """
    return JobGraph(
        job_id=JobID(message.job_id),
        name=message.name,
        vertices=[_vertex_from_proto(vertex) for vertex in message.vertices],
        config=dict(message.config),
    )


def _vertex_from_proto(message: common_pb2.JobVertex) -> JobVertex:
    vertex_id = JobVertexID(message.id)
    return JobVertex(
        id=vertex_id,
        name=message.name,
        parallelism=message.parallelism,
        operator=OperatorSpec(kind=message.operator.kind, payload=bytes(message.operator.payload)),
        max_parallelism=message.max_parallelism or DEFAULT_MAX_PARALLELISM,
        resource_profile=_lenient_profile_from_proto(message.resource_profile),
        slot_sharing_group=message.slot_sharing_group or DEFAULT_SLOT_SHARING_GROUP,
        produced=[
            IntermediateDataSet(
                id=IntermediateDataSetID(dataset.id),
                producer=vertex_id,
                result_type=_decode_enum(_RESULT_TYPE_BY_NUMBER, int(dataset.result_type)),
            )
            for dataset in message.produced
        ],
        inputs=[
            JobEdge(
                source=IntermediateDataSetID(edge.source_dataset_id),
                target=vertex_id,
                pattern=_decode_enum(_PATTERN_BY_NUMBER, int(edge.pattern)),
                partitioner=edge.partitioner or DEFAULT_PARTITIONER,
            )
            for edge in message.inputs
        ],
        sink_paths=list(message.sink_paths),
        source_paths=list(message.source_paths),
        skew_splittable_inputs=list(message.skew_splittable_inputs),
    )


def _decode_enum(members: dict[int, _E], number: int) -> _E:
    """The member numbered ``number``; else the marker the validator reports (module docstring).

    The return type is the enum's although a marker is not a member: the in-memory model has no
    place for "invalid", and the validator checks membership at run time.
    """
    member = members.get(number)
    if member is not None:
        return member
    marker: object = None if number == 0 else number
    return marker  # type: ignore[return-value]
