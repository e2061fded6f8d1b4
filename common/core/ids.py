"""Identifiers. Every id is a 32-character lowercase hex string (128 random bits).

They are plain ``str`` at run time (cheap to hash, to log and to put on the wire) and distinct
``NewType``s for the type checker, so an AllocationID cannot be passed where a JobID is expected.
"""

from __future__ import annotations

import secrets
from typing import NewType

JobID = NewType("JobID", str)
AllocationID = NewType("AllocationID", str)
ExecutionAttemptID = NewType("ExecutionAttemptID", str)
ResourceID = NewType("ResourceID", str)  # identifies a task executor process
InstanceID = NewType("InstanceID", str)  # one registration of a task executor at an RM
JobVertexID = NewType("JobVertexID", str)
IntermediateDataSetID = NewType("IntermediateDataSetID", str)
LeaderSessionID = NewType("LeaderSessionID", str)
SharedGateID = NewType("SharedGateID", str)  # an input gate a JobMaster offloaded


def _new() -> str:
    return secrets.token_hex(16)


def new_job_id() -> JobID:
    return JobID(_new())


def new_allocation_id() -> AllocationID:
    return AllocationID(_new())


def new_attempt_id() -> ExecutionAttemptID:
    return ExecutionAttemptID(_new())


def new_resource_id() -> ResourceID:
    return ResourceID(_new())


def new_instance_id() -> InstanceID:
    return InstanceID(_new())


def new_vertex_id() -> JobVertexID:
    return JobVertexID(_new())


def new_dataset_id() -> IntermediateDataSetID:
    return IntermediateDataSetID(_new())


def new_leader_session_id() -> LeaderSessionID:
    return LeaderSessionID(_new())


def new_shared_gate_id() -> SharedGateID:
    return SharedGateID(_new())


def short(identifier: str) -> str:
    """The first 8 characters, for log lines and progress displays."""
    return identifier[:8]


_HEX = frozenset("0123456789abcdef")


def is_valid_id(identifier: object) -> bool:
    """Whether ``identifier`` has the form every sparkmill id has (32 lowercase hex digits).

    Ids become file names and ZooKeeper node names, so anything arriving from outside (the
    wire, a znode, a file name) is checked with this before it is used to build a path.
    """
    return isinstance(identifier, str) and len(identifier) == 32 and set(identifier) <= _HEX


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_NAME_ID_LENGTH = 128


def is_valid_name_id(identifier: object) -> bool:
    """Whether ``identifier`` is a generated id or a chosen name that is safe as a path segment.

    Some ids may be chosen rather than generated: a task executor's stable resource id
    (``taskmanager.resource-id``, e.g. a host name) and the vertex and data set ids of a job
    graph. They must be letters, digits, ``.``, ``_`` and ``-``, at most 128 characters,
    starting with a letter or digit, so they are never a path, ``..``, a hidden file name or a
    ZooKeeper path.
    """
    return (
        isinstance(identifier, str)
        and 0 < len(identifier) <= MAX_NAME_ID_LENGTH
        and identifier[0].isascii()
        and identifier[0].isalnum()
        and set(identifier) <= _NAME_CHARS
    )
