"""A task executor's registration is decoded once, when it arrives, into a
:class:`TaskExecutorRegistration` that the resource manager and its slot manager use afterwards."""

from __future__ import annotations

import asyncio
import math

import pytest

from sparkmill.common.core.errors import InvalidArgumentError
from sparkmill.common.core.ids import JobID, ResourceID, new_job_id
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from sparkmill.services.resourcemanager.task_executor_registration import (
    TaskExecutorRegistration,
    no_slot_large_enough,
)
from tests.unit.resource_manager_harness import (
    call_context,
    leading_resource_manager,
    registration_request,
)

SLOT = ResourceProfile(2.0, 2048)


def test_the_request_is_decoded_into_typed_values() -> None:
    registration = TaskExecutorRegistration.from_proto(registration_request())
    assert registration.resource_id == ResourceID("worker-1")
    assert registration.address == "tcp://127.0.0.1:1"
    assert registration.number_slots == 4
    assert registration.total_resources == ResourceProfile(8.0, 8192)
    assert registration.default_slot_profile == SLOT
    assert registration.info.id == "worker-1"


@pytest.mark.parametrize("field", ["total_resources", "default_slot_profile"])
def test_a_bad_profile_is_refused_naming_its_field(field: str) -> None:
    request = registration_request()
    getattr(request, field).cpu_cores = -1.0
    with pytest.raises(InvalidArgumentError, match=field):
        TaskExecutorRegistration.from_proto(request)
    getattr(request, field).cpu_cores = math.inf
    with pytest.raises(InvalidArgumentError, match=field):
        TaskExecutorRegistration.from_proto(request)


def test_the_diagnostic_reads_the_registered_profiles() -> None:
    registration = TaskExecutorRegistration.from_proto(registration_request())
    job: JobID = new_job_id()
    assert no_slot_large_enough(job, SLOT, [registration]) == ""
    assert no_slot_large_enough(job, UNKNOWN_PROFILE, [registration]) == ""
    assert no_slot_large_enough(job, ResourceProfile(4.0, 1024), []) == ""  # none registered yet
    message = no_slot_large_enough(job, ResourceProfile(4.0, 1024), [registration])
    assert "can never be served" in message
    assert "4 x " in message and "1 task executors registered" in message


def test_the_resource_manager_keeps_the_decoded_registration_not_theregistration_request() -> None:
    """Slots reported with an unknown profile get the default slot profile the task executor
    registered with, read from the decoded record: the request message the task executor sent
    is not consulted again (here it is cleared after registering, which would turn every
    profile read from it into UNKNOWN)."""

    async def scenario() -> None:
        rm = leading_resource_manager()
        context = call_context()
        request = registration_request()
        reply = await rm.register_task_executor(request, context)
        request.Clear()
        worker = rm.task_executors[ResourceID("worker-1")]
        assert worker.registration == TaskExecutorRegistration.from_proto(registration_request())

        report = common_pb2.SlotReport(slots=[common_pb2.SlotStatus(slot_index=0)])
        await rm.send_slot_report(
            resource_manager_pb2.SendSlotReportRequest(
                instance_id=reply.instance_id, slot_report=report
            ),
            context,
        )
        assert rm.slot_manager is not None
        [slot] = rm.slot_manager.task_executor_slots(worker.instance_id)
        assert slot.resource_profile == SLOT
        status = await rm.get_cluster_status(
            resource_manager_pb2.GetClusterStatusRequest(), context
        )
        assert status.task_executors[0].total_resources.memory_mb == 8192
        rm.te_heartbeats.unmonitor("worker-1")
        await rm.clients.close()

    asyncio.run(scenario())
