"""The RPC server's id and enum checks (``common/rpc/request_checks.py``).

Every id-looking field of every request message must be classified in the check's tables, so a
new RPC cannot forget to have its ids checked; and the checks refuse what they must, naming the
field, while accepting what the services really send.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from sparkmill.common.core.errors import InvalidArgumentError
from sparkmill.common.core.ids import new_allocation_id, new_attempt_id, new_job_id, new_resource_id
from sparkmill.common.rpc.request_checks import (
    GENERATED_ID_FIELDS,
    NAME_ID_FIELDS,
    SKIPPED_MESSAGES,
    check_request,
    is_id_field,
)
from sparkmill.common.v1 import (
    common_pb2,
    dispatcher_pb2,
    gateways,
    job_master_pb2,
    resource_manager_pb2,
    task_executor_pb2,
)

ALL_METHODS = [
    spec
    for name in dir(gateways)
    if name.endswith("_METHODS")
    for spec in getattr(gateways, name).values()
]


def _string_fields(descriptor: Any, seen: set[str]) -> Iterator[tuple[str, str]]:
    if descriptor.full_name in seen or descriptor.full_name in SKIPPED_MESSAGES:
        return
    seen.add(descriptor.full_name)
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            yield from _string_fields(field.message_type, seen)
        elif field.type == FieldDescriptor.TYPE_STRING:
            yield f"{descriptor.name}.{field.name}", field.name


def test_the_gateways_have_methods_to_walk() -> None:
    assert len(ALL_METHODS) > 30


def test_every_id_field_of_every_request_is_classified() -> None:
    unclassified = set()
    for spec in ALL_METHODS:
        for label, name in _string_fields(spec.request_type.DESCRIPTOR, set()):
            known = GENERATED_ID_FIELDS | NAME_ID_FIELDS
            if is_id_field(name) and label not in known and name not in known:
                unclassified.add(f"{spec.name}: {label}")
    assert not unclassified, (
        "id fields with no declared format; add them to GENERATED_ID_FIELDS or "
        f"NAME_ID_FIELDS in common/rpc/request_checks.py: {sorted(unclassified)}"
    )


def refusal(request: Message) -> str:
    with pytest.raises(InvalidArgumentError) as caught:
        check_request("Method", request)
    return caught.value.message


def test_a_job_id_that_is_a_path_is_refused_naming_the_field() -> None:
    message = refusal(job_master_pb2.JobMasterCancelJobRequest(job_id="/etc"))
    assert "JobMasterCancelJobRequest.job_id" in message and "'/etc'" in message


def test_a_missing_required_id_is_refused() -> None:
    message = refusal(dispatcher_pb2.GetJobStatusRequest())
    assert "GetJobStatusRequest.job_id is missing" in message


def test_nested_and_repeated_ids_are_checked() -> None:
    request = job_master_pb2.UpdateTaskExecutionStateRequest(
        job_id=new_job_id(), resource_id=new_resource_id()
    )
    request.updates.add(attempt_id=new_attempt_id(), state=common_pb2.EXECUTION_FINISHED)
    check_request("Method", request)
    request.updates.add(attempt_id="../../x")
    assert "updates[1].attempt_id" in refusal(request)


def test_out_of_range_enums_are_refused_before_any_handler() -> None:
    report = dispatcher_pb2.RegisterJobMasterProcessRequest(process_id=new_resource_id())
    report.jobs.add(job_id=new_job_id(), status=common_pb2.RUNNING)
    check_request("Method", report)
    report.jobs.add(job_id=new_job_id(), status=99)
    assert "jobs[1].status is 99, not a JobStatus value" in refusal(report)


def test_configured_resource_ids_are_accepted_and_paths_are_not() -> None:
    request = resource_manager_pb2.DisconnectTaskExecutorRequest(resource_id="worker7.lab-te-0")
    check_request("Method", request)
    for bad in ("../x", ".hidden", "a/b", "x" * 129, "a b"):
        request.resource_id = bad
        assert "resource_id" in refusal(request)


def test_a_real_task_deployment_passes_and_a_hostile_one_does_not() -> None:
    request = task_executor_pb2.SubmitTaskRequest(job_master_address="tcp://127.0.0.1:1")
    tdd = request.tdd
    tdd.job_id, tdd.vertex_id = new_job_id(), new_job_id()
    tdd.attempt_id, tdd.allocation_id = new_attempt_id(), new_allocation_id()
    gate = tdd.inputs.add(dataset_id=new_job_id(), pattern=common_pb2.ALL_TO_ALL)
    gate.partitions.add(producer_attempt_id=new_attempt_id(), producer_resource_id="te-1")
    check_request("SubmitTask", request)
    gate.pattern = 7  # type: ignore[assignment]
    assert "SubmitTaskRequest.tdd.inputs[0].pattern is 7" in refusal(request)


def test_a_job_graph_is_left_to_the_job_graph_validation() -> None:
    # Its problems are reported all at once, as INVALID_JOB_GRAPH, by the validation.
    request = dispatcher_pb2.SubmitJobRequest()
    request.job_graph.job_id = "../../etc"
    check_request("SubmitJob", request)


def test_addresses_a_service_dials_back_must_be_tcp_host_port() -> None:
    request = job_master_pb2.OfferSlotsRequest(job_id=new_job_id(), resource_id="te-1")
    for good in ("tcp://127.0.0.1:6123", "tcp://worker7.lab:1", "tcp://[::1]:65535", ""):
        request.address = good
        check_request("OfferSlots", request)
    for bad in ("ipc:///tmp/x", "tcp://h:99999", "tcp://h", "x" * 300, "tcp://a b:1"):
        request.address = bad
        assert "OfferSlotsRequest.address" in refusal(request)


def test_error_text_is_clipped_before_it_travels() -> None:
    from sparkmill.common.core.proto_convert import MAX_ERROR_MESSAGE_CHARS, error_to_proto

    info = error_to_proto(ValueError("z" * 10_000_000))
    assert len(info.message) < MAX_ERROR_MESSAGE_CHARS + 100
    assert info.message.endswith("(9983616 more characters cut)")
    assert error_to_proto(ValueError("short")).message == "short"


def test_the_fast_name_check_agrees_with_is_valid_name_id() -> None:
    from sparkmill.common.core.ids import is_valid_name_id
    from sparkmill.common.rpc.request_checks import _is_name_id

    samples = ["a", "A1", "0", "w7.lab-te_0", "x" * 128, "x" * 129, "", ".a", "-a", "_a", "a/b"]
    samples += ["a b", "é", "aé", "a\n", "..", "a..b", "\u0661", new_job_id()]
    for sample in samples:
        assert _is_name_id(sample) == is_valid_name_id(sample), sample


def test_strings_are_length_limited_short_ones_more() -> None:
    request = resource_manager_pb2.RegisterTaskExecutorRequest(resource_id="te-1")
    request.info.hostname = "h" * 2000
    message = refusal(request)
    assert "RegisterTaskExecutorRequest.info.hostname 'hhhh" in message
    assert "(2000 chars) is not valid (at most 1024 characters)" in message
    request.info.hostname = "worker7"
    check_request("RegisterTaskExecutor", request)
    cause = resource_manager_pb2.DisconnectTaskExecutorRequest(resource_id="te-1")
    cause.cause = "c" * (256 * 1024)
    check_request("DisconnectTaskExecutor", cause)
    cause.cause += "c"
    assert "is not valid (at most 262144 characters)" in refusal(cause)
