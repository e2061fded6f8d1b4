"""What a JobMaster tells the dispatcher about its job: status reports, the final result, and
handing the job back when it stops leading it."""

from __future__ import annotations

import asyncio
import logging

from sparkmill.common.core.ids import JobID, short
from sparkmill.common.core.proto_convert import job_status_to_proto
from sparkmill.common.core.states import JobStatus
from sparkmill.common.pipeline.collect import pack_accumulators
from sparkmill.common.runtime.service_base import ServiceIdentity
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, jobs_pb2
from sparkmill.services.jobmaster.host import JobMasterHost

log = logging.getLogger(__name__)
# How long a suspended JobMaster keeps trying to hand its job back to the dispatcher.
HAND_BACK_TIMEOUT_S = 30.0


def status_report(
    job_id: JobID,
    session_id: str,
    identity: ServiceIdentity,
    status: JobStatus,
    details: jobs_pb2.JobDetails,
    result: jobs_pb2.JobResult | None = None,
) -> dispatcher_pb2.JobStatusReport:
    report = dispatcher_pb2.JobStatusReport(
        job_id=job_id,
        status=job_status_to_proto(status),
        job_master_session_id=session_id,
        details=details,
        job_master_process_id=identity.id,
        job_master_address=identity.address,
    )
    if result is not None:
        report.result.CopyFrom(result)
    return report


def job_result(
    job_id: JobID,
    status: JobStatus,
    cause: str,
    details: jobs_pb2.JobDetails,
    accumulators: dict[str, dict[int, bytes]],
) -> jobs_pb2.JobResult:
    result = jobs_pb2.JobResult(job_id=job_id, status=job_status_to_proto(status), details=details)
    if cause and status is not JobStatus.FINISHED:
        result.failure.code = common_pb2.INTERNAL
        result.failure.message = cause
    for name, parts in accumulators.items():
        result.accumulators[name] = pack_accumulators(parts)
    return result


async def hand_job_back(
    host: JobMasterHost, report: dispatcher_pb2.JobStatusReport, rpc_timeout_s: float
) -> None:
    """Tell the dispatcher this JobMaster no longer leads the job (``report`` says SUSPENDED).
    Without a word it would only notice if the whole process died (not after, e.g., a
    ZooKeeper blip on this host alone); it starts the job again - here or elsewhere - and the
    new JobMaster keeps what finished."""
    # The report is retried until the dispatcher leader takes or refuses it; the bound only
    # keeps a dispatcher that stays unreachable from holding this JobMaster forever (its
    # heartbeat to this process then finds out instead).
    deadline = max(HAND_BACK_TIMEOUT_S, rpc_timeout_s)
    try:
        async with asyncio.timeout(deadline):
            await host.report_job_status(report)
    except TimeoutError:
        log.warning(
            "job %s: the dispatcher did not take the SUSPENDED report within %g s; it will "
            "learn of it only when it loses this job-master process",
            short(report.job_id),
            deadline,
        )


__all__ = ["HAND_BACK_TIMEOUT_S", "hand_job_back", "job_result", "status_report"]
