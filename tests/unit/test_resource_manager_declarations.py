"""ResourceManager.DeclareRequiredResources: only the registered JobMaster session of a job may
declare, a declaration out of bounds is refused whole, and what it declares shows where a
waiting job is shown (the heartbeat's reason, the cluster's waiting count) until the JobMaster
goes away."""

from __future__ import annotations

import asyncio

import pytest

from sparkmill.common.core.errors import (
    FailedPreconditionError,
    FencingMismatchError,
    InvalidArgumentError,
)
from sparkmill.common.core.ids import JobID, new_job_id
from sparkmill.common.v1 import resource_manager_pb2
from sparkmill.services.resourcemanager.declared_requirements import (
    MAX_DECLARED_SLOTS,
    MAX_REQUIREMENTS,
)
from sparkmill.services.resourcemanager.job_master_registration import JobMasterRegistration
from sparkmill.services.resourcemanager.slot_wait import slot_wait_reason
from tests.unit.resource_manager_harness import call_context, leading_resource_manager

SESSION = "a" * 32


def _declaration(job_id: str, count: int, version: int = 1, session: str = SESSION) -> object:
    request = resource_manager_pb2.DeclareRequiredResourcesRequest(
        job_id=job_id, job_master_session_id=session, version=version
    )
    request.requirements.add(count=count)
    return request


def test_declarations_are_fenced_bounded_and_counted_until_the_job_master_leaves() -> None:
    async def scenario() -> None:
        rm = leading_resource_manager()
        job = JobID(new_job_id())
        declare = rm.declare_required_resources
        with pytest.raises(FailedPreconditionError, match="register first"):
            await declare(_declaration(job, 2), call_context())  # type: ignore[arg-type]
        rm.job_masters[job] = JobMasterRegistration(job, "tcp://jm:1", SESSION, None)  # type: ignore[arg-type]
        with pytest.raises(FencingMismatchError):
            await declare(_declaration(job, 2, session="b" * 32), call_context())  # type: ignore[arg-type]
        too_many = resource_manager_pb2.DeclareRequiredResourcesRequest(
            job_id=job, job_master_session_id=SESSION, version=1
        )
        for _ in range(MAX_REQUIREMENTS + 1):
            too_many.requirements.add(count=1)
        with pytest.raises(InvalidArgumentError, match="at most 1024"):
            await declare(too_many, call_context())
        with pytest.raises(InvalidArgumentError, match="slots; at most 1000000"):
            await declare(_declaration(job, MAX_DECLARED_SLOTS + 1), call_context())  # type: ignore[arg-type]
        assert rm.waiting_slot_requests() == 0  # nothing changed

        reply = await declare(_declaration(job, 2), call_context())  # type: ignore[arg-type]
        assert list(reply.refused) == []
        assert rm.waiting_slot_requests() == 2  # no task executor: both unmet
        assert slot_wait_reason(job, rm.slot_manager, None, rm.requirements).startswith(
            "waiting for 2 slot(s): no free slot fits"
        )
        status = await rm.get_cluster_status(
            resource_manager_pb2.GetClusterStatusRequest(), call_context()
        )
        assert status.pending_slot_requests == 2
        await declare(_declaration(job, 5, version=1), call_context())  # type: ignore[arg-type]
        assert rm.waiting_slot_requests() == 2  # a stale version: ignored

        rm._close_job_master(job, "the job ended")
        assert rm.waiting_slot_requests() == 0
        await asyncio.sleep(0)
        await rm.clients.close()

    asyncio.run(scenario())


def test_a_declaration_riding_on_the_registration_is_taken_with_it() -> None:
    async def scenario() -> None:
        rm = leading_resource_manager()
        job = JobID(new_job_id())

        def registration(declaration: object | None) -> object:
            request = resource_manager_pb2.RegisterJobMasterRequest(
                job_id=job, job_master_address="tcp://127.0.0.1:1", job_master_session_id=SESSION
            )
            if declaration is not None:
                request.declaration.CopyFrom(declaration)  # type: ignore[arg-type]
            return request

        # Checked before anything changes: another job's or session's, or out of bounds.
        other_job = _declaration(JobID(new_job_id()), 1)
        with pytest.raises(InvalidArgumentError, match="must be the registration's"):
            await rm.register_job_master(registration(other_job), call_context())  # type: ignore[arg-type]
        too_big = _declaration(job, MAX_DECLARED_SLOTS + 1)
        with pytest.raises(InvalidArgumentError, match="slots; at most"):
            await rm.register_job_master(registration(too_big), call_context())  # type: ignore[arg-type]
        assert job not in rm.job_masters and rm.waiting_slot_requests() == 0

        reply = await rm.register_job_master(
            registration(_declaration(job, 3)),  # type: ignore[arg-type]
            call_context(),
        )
        assert reply.HasField("declaration")  # answered, though nothing was refused
        assert list(reply.declaration.refused) == []
        assert rm.job_masters[job].session_id == SESSION
        assert rm.waiting_slot_requests() == 3
        # Without one, the answer says nothing was read (a JobMaster then declares on its own).
        plain = await rm.register_job_master(registration(None), call_context())  # type: ignore[arg-type]
        assert not plain.HasField("declaration")
        assert rm.waiting_slot_requests() == 3
        rm._close_job_master(job, "the job ended")
        await asyncio.sleep(0)
        await rm.clients.close()

    asyncio.run(scenario())
