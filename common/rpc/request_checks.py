"""Checks every id, address and enum field of a request before any handler sees it.

Ids become dictionary keys, file names and ZooKeeper node names, and an enum value outside its
declaration breaks the state machine that reads it (protobuf's open enums accept any int). So
the RPC server runs :func:`check_request` on every decoded request, before the fencing check and
the handler: a bad value is answered ``INVALID_ARGUMENT`` naming the field, and nothing changed.

The tables below are the one place that says which format each id field has. A field counts as
an id when its name is ``id`` or ends with ``_id`` / ``_ids``; such a field not listed here is
held to the strictest format (a generated id), and ``tests/unit/test_request_checks.py`` walks
every request message of the protos and fails on one that is not listed, so a new RPC cannot
forget its ids.

Fields named ``address`` or ``*_address`` are addresses the service may dial back: they must
be ``tcp://host:port`` (or empty).

The job graph (``sparkmill.v1.JobGraph``) is not walked here: it is validated as a whole, with
every problem named, by :mod:`sparkmill.common.jobgraph.validation` at submission and at
``StartJob``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from sparkmill.common.core.errors import InvalidArgumentError

__all__ = [
    "GENERATED_ID_FIELDS",
    "NAME_ID_FIELDS",
    "check_request",
    "is_id_field",
]

# Ids the services generate (``common/core/ids.py``): 32 lowercase hex digits. Keys are a field name
# (any message) or ``Message.field``.
GENERATED_ID_FIELDS = frozenset(
    {
        "job_id",
        "attempt_id",
        "allocation_id",
        "allocation_ids",
        "received_allocation_ids",
        "instance_id",
        "producer_attempt_id",
        "shared_gate_id",
        "hosted_attempt_ids",
        "session_id",
        "job_master_session_id",
        "leader_session_id",
    }
)
# Ids that may be chosen names (a task executor's ``taskmanager.resource-id``, the vertex and
# data set ids of a job graph): safe path segments, see
# :func:`sparkmill.common.core.ids.is_valid_name_id`.
NAME_ID_FIELDS = frozenset(
    {
        "vertex_id",
        "dataset_id",
        "source_dataset_id",
        "produced_dataset_ids",
        "resource_id",
        "producer_resource_id",
        "job_master_resource_id",
        "resource_manager_id",
        "dispatcher_id",
        "process_id",
        "job_master_process_id",
        "sender_id",
        "ServiceInfo.id",
        "VertexDetails.subtask_task_executors",  # a resource id per subtask ("" while none)
    }
)
# Must be present (an empty id would address nothing, or everything). Top-level fields with
# these names are required in every request; ``Message.field`` entries wherever they occur.
REQUIRED_TOP_LEVEL = frozenset({"job_id", "resource_id", "instance_id", "attempt_id"})
REQUIRED_NESTED = frozenset(
    {
        "TaskExecutionState.attempt_id",
        "SlotOffer.allocation_id",
        "HostedJob.job_id",
        "TaskDeploymentDescriptor.job_id",
        "TaskDeploymentDescriptor.vertex_id",
        "TaskDeploymentDescriptor.attempt_id",
        "TaskDeploymentDescriptor.allocation_id",
        "GetInputGateRequest.shared_gate_id",
    }
)
# Every other string is length-limited: it may be stored and echoed to every caller of a listing
# or a status (a 9 MB job name once broke `jobs list` for everyone). Errors are clipped well below
# the general limit where they are made (common/core/proto_convert.py).
MAX_STRING_CHARS = 256 * 1024
SHORT_STRING_FIELDS = frozenset(
    {
        "ServiceInfo.role",
        "ServiceInfo.hostname",
        "ServiceInfo.metrics_url",
        "ServiceInfo.rest_url",
        "ServiceInfo.spark_ui_url",
        "SlotReport.spark_ui_url",
    }
)
MAX_SHORT_STRING_CHARS = 1024
# Validated as a whole elsewhere (see the module docstring).
SKIPPED_MESSAGES = frozenset({"sparkmill.v1.JobGraph"})

_HEX_ID = re.compile(r"[0-9a-f]{32}")
# Addresses a service dials back (a registering member's, a JobMaster's): tcp://host:port.
_ADDRESS = re.compile(r"tcp://(\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9.-]{1,253}):[0-9]{1,5}")
_NAME_FORMAT = "letters, digits, '.', '_', '-'; at most 128 characters"
# sparkmill.common.core.ids.is_valid_name_id as one regular expression (cheaper on the hot path; a
# unit test holds the two to the same answers).
_NAME_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _is_name_id(value: str) -> bool:
    return _NAME_ID.fullmatch(value) is not None


_SHORT_TEXT = f"at most {MAX_SHORT_STRING_CHARS} characters"
_HUGE_TEXT = f"at most {MAX_STRING_CHARS} characters"


def _is_short(value: str) -> bool:
    return len(value) <= MAX_SHORT_STRING_CHARS


def _is_not_huge(value: str) -> bool:
    return len(value) <= MAX_STRING_CHARS


def is_address_field(name: str) -> bool:
    return name == "address" or name.endswith("_address")


def _is_address(value: str) -> bool:
    return _ADDRESS.fullmatch(value) is not None and int(value.rpartition(":")[2]) <= 65535


def is_id_field(name: str) -> bool:
    return name == "id" or name.endswith(("_id", "_ids"))


def _is_generated_id(value: str) -> bool:
    return _HEX_ID.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class _FieldCheck:
    name: str
    label: str  # "Message.field", for the tables
    repeated: bool
    required: bool
    id_check: Callable[[str], bool] | None = None  # for ids, addresses and plain strings
    id_format: str = ""
    enum_values: frozenset[int] | None = None
    enum_name: str = ""
    message: Any = None  # a protobuf Descriptor (untyped in the stubs' union)
    plan: tuple[_FieldCheck, ...] = ()  # the nested message's checks


_PLANS: dict[str, tuple[_FieldCheck, ...]] = {}


def _plan(descriptor: Any, top_level: bool) -> tuple[_FieldCheck, ...]:
    key = f"{descriptor.full_name}:{top_level}"
    plan = _PLANS.get(key)
    if plan is None:
        _PLANS[key] = ()  # a recursive message type stops here
        plan = tuple(c for f in descriptor.fields if (c := _field(descriptor, f, top_level)))
        _PLANS[key] = plan
    return plan


def _field(owner: Any, field: Any, top_level: bool) -> _FieldCheck | None:
    label = f"{owner.name}.{field.name}"
    repeated = field.is_repeated
    required = label in REQUIRED_NESTED or (top_level and field.name in REQUIRED_TOP_LEVEL)
    if field.type == FieldDescriptor.TYPE_ENUM:
        values = frozenset(v.number for v in field.enum_type.values)
        return _FieldCheck(
            field.name, label, repeated, False, enum_values=values, enum_name=field.enum_type.name
        )
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        message = field.message_type
        if message.full_name in SKIPPED_MESSAGES or message.GetOptions().map_entry:
            return None  # maps here hold names, numbers and opaque bytes, never ids
        nested = _plan(message, False)
        if not nested:
            return None  # nothing to check inside (or a recursive type, none in our protos)
        return _FieldCheck(field.name, label, repeated, False, message=message, plan=nested)
    if field.type != FieldDescriptor.TYPE_STRING:
        return None
    if is_address_field(field.name):
        return _FieldCheck(field.name, label, repeated, False, _is_address, "tcp://host:port")
    if label in NAME_ID_FIELDS or field.name in NAME_ID_FIELDS:
        return _FieldCheck(field.name, label, repeated, required, _is_name_id, _NAME_FORMAT)
    if label in GENERATED_ID_FIELDS or field.name in GENERATED_ID_FIELDS or is_id_field(field.name):
        return _FieldCheck(
            field.name, label, repeated, required, _is_generated_id, "32 lowercase hex digits"
        )
    if label in SHORT_STRING_FIELDS:
        return _FieldCheck(field.name, label, repeated, False, _is_short, _SHORT_TEXT)
    return _FieldCheck(field.name, label, repeated, False, _is_not_huge, _HUGE_TEXT)


def check_request(method: str, request: Message) -> None:
    """Raise :class:`InvalidArgumentError` naming the first bad id, address or enum field."""
    try:
        _walk(request, _plan(request.DESCRIPTOR, True))
    except _BadField as bad:
        raise InvalidArgumentError(
            f"{method} refused: {request.DESCRIPTOR.name}.{bad.path} {bad.problem}"
        ) from None


class _BadField(Exception):
    """Raised inside the walk; the field's path is assembled on the way out (only then)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path, self.problem = path, problem

    def under(self, parent: str) -> _BadField:
        return _BadField(f"{parent}.{self.path}", self.problem)


def _walk(message: Any, plan: tuple[_FieldCheck, ...]) -> None:
    # Hot path: a task deployment holds a partition per producer, tens of thousands of them.
    for check in plan:
        value = getattr(message, check.name)
        if not check.repeated:
            if check.message is None or message.HasField(check.name):
                _check_value(check, value, -1)
            continue
        for index, item in enumerate(value):
            _check_value(check, item, index)


def _check_value(check: _FieldCheck, value: Any, index: int) -> None:
    """Check one value of ``check``'s field (``index``: its position if repeated, else -1)."""
    if check.message is not None:
        try:
            _walk(value, check.plan)
        except _BadField as bad:
            raise bad.under(_where(check, index)) from None
    elif check.enum_values is not None:
        if value not in check.enum_values:
            raise _BadField(_where(check, index), f"is {value}, not a {check.enum_name} value")
    elif check.id_check is not None:
        if not value:
            if check.required:
                raise _BadField(_where(check, index), "is missing")
        elif not check.id_check(value):
            shown = repr(value) if len(value) <= 40 else f"{value[:40]!r}... ({len(value)} chars)"
            raise _BadField(_where(check, index), f"{shown} is not valid ({check.id_format})")


def _where(check: _FieldCheck, index: int) -> str:
    return check.name if index < 0 else f"{check.name}[{index}]"
