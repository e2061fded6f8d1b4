"""A new dispatcher leader's recovered jobs: released early only when no JobMaster contends."""

from __future__ import annotations

import asyncio

from sparkmill.common.core.ids import JobID, new_job_id
from sparkmill.common.v1 import common_pb2
from sparkmill.services.dispatcher import job_recovery
from sparkmill.services.dispatcher.job_placement import JobPlacement, JobRecord


def _recovered(name: str) -> JobRecord:
    return job_recovery.recovered_job(common_pb2.JobGraph(job_id=new_job_id(), name=name))


def test_only_jobs_without_contenders_are_released_before_the_grace_period() -> None:
    lost, alive = _recovered("lost"), _recovered("alive")
    jobs = {lost.job_id: lost, alive.job_id: alive}
    released_rounds: list[int] = []

    async def contenders(job_id: JobID) -> int | None:
        return 0 if job_id == lost.job_id else 1

    async def main() -> None:
        await job_recovery.release_uncontended_jobs(
            jobs,
            contenders,
            still_leading=lambda: True,
            on_released=lambda: released_rounds.append(1),
            grace_s=0.2,
            poll_s=0.02,
        )

    asyncio.run(main())
    assert lost.placement is JobPlacement.WAITING
    assert alive.placement is JobPlacement.RECOVERED  # its JobMaster may still claim it
    assert released_rounds == [1]
    job_recovery.end_recovery_grace(jobs.values())
    assert [j.placement for j in jobs.values()] == [JobPlacement.WAITING, JobPlacement.WAITING]


def test_nothing_is_released_once_leadership_is_lost() -> None:
    job = _recovered("lost")

    async def contenders(job_id: JobID) -> int | None:
        return 0

    async def main() -> None:
        await job_recovery.release_uncontended_jobs(
            {job.job_id: job},
            contenders,
            still_leading=lambda: False,
            on_released=lambda: None,
            grace_s=0.2,
            poll_s=0.02,
        )

    asyncio.run(main())
    assert job.placement is JobPlacement.RECOVERED
