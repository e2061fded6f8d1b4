"""A job-master process that registers again keeps the jobs it still hosts.

A process registers again when it stops hearing the dispatcher, and a registration it queued
while cut off from the network can arrive late, after the one that counted. Neither may send
its jobs to another process: they would start there beside the JobMaster that leads them. Jobs
the process no longer hosts do start elsewhere.
"""

from __future__ import annotations

import asyncio

from sparkmill.common.core.ids import JobID
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, jobs_pb2
from sparkmill.services.dispatcher.job_placement import JobRecord
from tests.unit.dispatcher_harness import (
    RecordingStartsDispatcher,
    call_context,
    leading_dispatcher,
    submission,
)


def registration(
    process_id: str, *jobs: JobRecord
) -> dispatcher_pb2.RegisterJobMasterProcessRequest:
    return dispatcher_pb2.RegisterJobMasterProcessRequest(
        process_id=process_id,
        address=f"tcp://127.0.0.1:{9 if process_id == 'p1' else 10}",
        info=common_pb2.ServiceInfo(),
        jobs=[
            jobs_pb2.HostedJob(
                job_id=job.job_id,
                status=common_pb2.RUNNING,
                job_master_session_id=job.session_id,
            )
            for job in jobs
        ],
    )


def _scenario(hosted_again: bool, times: int) -> tuple[list[tuple[str, str]], str]:
    async def main() -> tuple[list[tuple[str, str]], str]:
        dispatcher = leading_dispatcher(dispatcher_class=RecordingStartsDispatcher)
        assert isinstance(dispatcher, RecordingStartsDispatcher)
        dispatcher.starts = []
        job_id = (await dispatcher.submit_job(submission(), call_context())).job_id
        await dispatcher.register_job_master_process(registration("p1"), call_context())
        await asyncio.sleep(0)  # the spawned StartJob
        await dispatcher.register_job_master_process(registration("p2"), call_context())
        job = dispatcher.jobs[JobID(job_id)]
        again = registration("p1", job) if hosted_again else registration("p1")
        for _ in range(times):
            await dispatcher.register_job_master_process(again, call_context())
            await asyncio.sleep(0)
        return [(j[:8], p) for j, p in dispatcher.starts], job.process_id

    return asyncio.run(main())


def test_a_process_registering_again_keeps_the_jobs_it_hosts() -> None:
    # The registration that counts, then two the process had queued.
    starts, process = _scenario(hosted_again=True, times=3)
    assert [p for _, p in starts] == ["p1"]
    assert process == "p1"


def test_the_jobs_a_process_no_longer_hosts_start_elsewhere() -> None:
    starts, process = _scenario(hosted_again=False, times=1)
    assert len(starts) == 2 and process == starts[-1][1]
