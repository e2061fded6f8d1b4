"""A JobMaster's ``DeclareRequiredResources`` checked and decoded, before anything changes.

Bounds first (entries, slots in all, acknowledged allocation ids, excluded task executors), then
each entry
on its own: one no registered task executor could ever serve is refused in the reply with the
reason (the JobMaster fails the requests waiting for it), the others are taken. Two entries of
the same profile and exclusions add up.
"""

from __future__ import annotations

from collections.abc import Iterable

from sparkmill.common.core.errors import InvalidArgumentError, ResourceExhaustedError
from sparkmill.common.core.ids import AllocationID, JobID
from sparkmill.common.core.proto_convert import profile_from_proto, refusal_to_proto
from sparkmill.common.core.resources import RequirementKey
from sparkmill.common.v1 import resource_manager_pb2
from sparkmill.services.resourcemanager.declared_requirements import (
    MAX_DECLARED_SLOTS,
    MAX_RECEIVED,
    MAX_REQUIREMENTS,
)
from sparkmill.services.resourcemanager.slot_requests import excluded_task_executors
from sparkmill.services.resourcemanager.task_executor_registration import (
    TaskExecutorRegistration,
    no_slot_large_enough,
)


def declaration_from_proto(
    request: resource_manager_pb2.DeclareRequiredResourcesRequest,
    registered: Iterable[TaskExecutorRegistration],
) -> tuple[
    dict[RequirementKey, int],
    list[AllocationID],
    resource_manager_pb2.DeclareRequiredResourcesResponse,
]:
    """The declared counts per key, the acknowledged allocation ids, and the reply naming the
    refused entries. Raises :class:`InvalidArgumentError` for a declaration out of bounds."""
    if len(request.requirements) > MAX_REQUIREMENTS:
        raise InvalidArgumentError(
            f"a declaration lists {len(request.requirements)} requirements; at most "
            f"{MAX_REQUIREMENTS} are allowed"
        )
    if len(request.received_allocation_ids) > MAX_RECEIVED:
        raise InvalidArgumentError(
            f"a declaration acknowledges {len(request.received_allocation_ids)} allocations; "
            f"at most {MAX_RECEIVED} are allowed"
        )
    slots = sum(requirement.count for requirement in request.requirements)
    if slots > MAX_DECLARED_SLOTS:
        raise InvalidArgumentError(
            f"a declaration asks for {slots} slots; at most {MAX_DECLARED_SLOTS} are allowed"
        )
    job_id = JobID(request.job_id)
    registrations = list(registered)
    declared: dict[RequirementKey, int] = {}
    reply = resource_manager_pb2.DeclareRequiredResourcesResponse()
    for index, requirement in enumerate(request.requirements):
        profile = profile_from_proto(requirement.resource_profile)
        key = RequirementKey(profile, excluded_task_executors(requirement.excluded_task_executors))
        unsatisfiable = no_slot_large_enough(job_id, profile, registrations)
        if unsatisfiable:
            reply.refused.add(
                index=index, error=refusal_to_proto(ResourceExhaustedError(unsatisfiable))
            )
            continue
        declared[key] = declared.get(key, 0) + requirement.count
    received = [AllocationID(a) for a in request.received_allocation_ids]
    return declared, received, reply


__all__ = ["declaration_from_proto"]
