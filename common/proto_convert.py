"""Conversions between protobuf messages and the in-memory types services reason about.

Kept in one module so every service converts slot reports, resource profiles and errors the same
way (the job graph has its own codec, :mod:`common.jobgraph_codec`).
"""

from __future__ import annotations

import traceback
from typing import Any, cast

from sparkmill.common.errors import ErrorCode, RpcError, error_from_code
from sparkmill.common.ids import AllocationID, JobID
from sparkmill.common.resources import ResourceProfile
from sparkmill.common.slots import SlotReport, SlotStatus
from sparkmill.common.v1 import common_pb2


def profile_to_proto(profile: ResourceProfile) -> common_pb2.ResourceProfile:
    return common_pb2.ResourceProfile(cpu_cores=profile.cpu_cores, memory_mb=profile.memory_mb)


def profile_from_proto(message: common_pb2.ResourceProfile) -> ResourceProfile:
    return ResourceProfile(max(0.0, message.cpu_cores), max(0, int(message.memory_mb)))


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


def error_to_proto(error: BaseException) -> common_pb2.ErrorInfo:
    code = error.code if isinstance(error, RpcError) else ErrorCode.INTERNAL
    details = error.details if isinstance(error, RpcError) else ""
    if not details and error.__traceback__ is not None:
        details = "".join(traceback.format_exception(error))
    return common_pb2.ErrorInfo(
        code=cast(Any, int(code)),
        message=str(error),
        details=details,
        exception_type=type(error).__name__,
    )


def error_from_proto(info: common_pb2.ErrorInfo) -> RpcError:
    return error_from_code(int(info.code), info.message, info.details)
