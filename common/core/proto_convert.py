"""Conversions between protobuf messages and the in-memory types services reason about.

Kept in one module so every service converts slot reports, resource profiles, errors and the
state enums the same way (the job graph has its own codec,
:mod:`sparkmill.common.jobgraph.codec`, which decodes resource profiles with the codec here; a
task's state update has :mod:`sparkmill.common.deployment.state_update`).

protoc's type stubs declare an enum field as the enum's wrapper class, so a plain number (an
enum member's ``value``) does not type-check where a message wants one. The ``*_to_proto``
functions below are the one place that says "this number is that wire enum's"; they hold because
:mod:`sparkmill.common.core.states` and :class:`~sparkmill.common.core.errors.ErrorCode` mirror
the proto enums number for number (``tests/unit/test_states.py`` checks it).
"""

from __future__ import annotations

import math
import traceback
from typing import cast

from sparkmill.common.core.errors import ErrorCode, InvalidArgumentError, RpcError, error_from_code
from sparkmill.common.core.ids import AllocationID, JobID
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.slots import SlotReport, SlotStatus
from sparkmill.common.core.states import (
    ExecutionState,
    JobStatus,
    execution_state_of,
    job_status_of,
)
from sparkmill.common.v1 import common_pb2


def job_status_to_proto(status: JobStatus) -> common_pb2.JobStatus:
    """The wire number of ``status`` (for a message field)."""
    return cast(common_pb2.JobStatus, status.value)


def execution_state_to_proto(state: ExecutionState) -> common_pb2.ExecutionState:
    """The wire number of ``state`` (for a message field)."""
    return cast(common_pb2.ExecutionState, state.value)


def error_code_to_proto(code: ErrorCode) -> common_pb2.ErrorCode:
    """The wire number of ``code`` (for a message field)."""
    return cast(common_pb2.ErrorCode, int(code))


def job_status_from_proto(
    number: int, *, field: str = "status", error: type[InvalidArgumentError] = InvalidArgumentError
) -> JobStatus:
    """The job status ``number`` names; raises ``error`` naming ``field`` for 0 (unspecified) or
    a number outside the enum."""
    status = job_status_of(number)
    if status is None:
        raise error(f"{field}: {number} is not a job status")
    return status


def execution_state_from_proto(
    number: int, *, field: str = "state", error: type[InvalidArgumentError] = InvalidArgumentError
) -> ExecutionState:
    """The execution state ``number`` names; raises ``error`` naming ``field`` for 0
    (unspecified) or a number outside the enum."""
    state = execution_state_of(number)
    if state is None:
        raise error(f"{field}: {number} is not an execution state")
    return state


def profile_to_proto(profile: ResourceProfile) -> common_pb2.ResourceProfile:
    """The wire form of ``profile`` (``UNKNOWN_PROFILE`` becomes ``0``/``0``)."""
    return common_pb2.ResourceProfile(cpu_cores=profile.cpu_cores, memory_mb=profile.memory_mb)


def is_valid_profile(cpu: float, memory: int) -> bool:
    return math.isfinite(cpu) and cpu >= 0 and memory >= 0


def profile_from_proto(
    message: common_pb2.ResourceProfile,
    *,
    field: str = "resource_profile",
    error: type[InvalidArgumentError] = InvalidArgumentError,
) -> ResourceProfile:
    """The profile ``message`` describes; ``0``/``0`` (or an unset message) is UNKNOWN.

    Raises ``error`` naming ``field`` when a value is negative or not finite: a bad request is
    refused, never clamped into a different one.
    """
    cpu, memory = float(message.cpu_cores), int(message.memory_mb)
    if not is_valid_profile(cpu, memory):
        raise error(
            f"{field}: invalid resource profile (cpu={cpu:g}, memory={memory}MiB): cpu cores "
            "and memory must be finite and not negative"
        )
    return ResourceProfile(cpu_cores=cpu, memory_mb=memory)


def slot_status_to_proto(status: SlotStatus) -> common_pb2.SlotStatus:
    return common_pb2.SlotStatus(
        slot_index=status.slot_index,
        resource_profile=profile_to_proto(status.resource_profile),
        allocation_id=status.allocation_id or "",
        job_id=status.job_id or "",
    )


def slot_status_from_proto(message: common_pb2.SlotStatus) -> SlotStatus:
    return SlotStatus(
        slot_index=message.slot_index,
        resource_profile=profile_from_proto(message.resource_profile),
        allocation_id=AllocationID(message.allocation_id) if message.allocation_id else None,
        job_id=JobID(message.job_id) if message.job_id else None,
    )


def slot_report_to_proto(resource_id: str, report: SlotReport) -> common_pb2.SlotReport:
    return common_pb2.SlotReport(
        resource_id=resource_id, slots=[slot_status_to_proto(s) for s in report.slots]
    )


def slot_report_from_proto(message: common_pb2.SlotReport) -> SlotReport:
    return SlotReport(tuple(slot_status_from_proto(s) for s in message.slots))


# An error travels from a task to its JobMaster, the dispatcher, every status query and the
# client: a task's exception text (say, the repr of a huge object) must not travel whole.
MAX_ERROR_MESSAGE_CHARS = 16 * 1024
MAX_ERROR_DETAILS_CHARS = 64 * 1024


def clip_text(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and a note of how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters cut)"


def error_to_proto(error: BaseException) -> common_pb2.ErrorInfo:
    code = error.code if isinstance(error, RpcError) else ErrorCode.INTERNAL
    details = error.details if isinstance(error, RpcError) else ""
    if not details and error.__traceback__ is not None:
        details = "".join(traceback.format_exception(error))
    return common_pb2.ErrorInfo(
        code=error_code_to_proto(code),
        message=clip_text(str(error), MAX_ERROR_MESSAGE_CHARS),
        details=clip_text(details, MAX_ERROR_DETAILS_CHARS),
        exception_type=type(error).__name__,
    )


def refusal_to_proto(error: RpcError) -> common_pb2.ErrorInfo:
    """An expected refusal of one item of a batch (a slot request, a task): its code and
    message, never a traceback (the caller is another process)."""
    return common_pb2.ErrorInfo(
        code=error_code_to_proto(error.code),
        message=clip_text(error.message, MAX_ERROR_MESSAGE_CHARS),
        exception_type=type(error).__name__,
    )


def error_from_proto(info: common_pb2.ErrorInfo) -> RpcError:
    return error_from_code(int(info.code), info.message, info.details)
