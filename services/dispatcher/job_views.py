"""What the dispatcher answers about a job: its ``JobDetails`` and its line in the job list.

The dispatcher knows a job from three sources that it merges here: the submitted graph (the
vertices and their parallelism, all a job has before a JobMaster reports), the last details its
JobMaster reported (task counts, restarts) and its own record (status, times, the hosting
process). Flink's ``Dispatcher`` answers the same from its ``JobManagerRunner`` or, for an ended
job, from the ``ExecutionGraphInfoStore``.
"""

from __future__ import annotations

from sparkmill.common.core.proto_convert import execution_state_to_proto, job_status_to_proto
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.jobgraph.job_config import decode_pipeline_args
from sparkmill.common.v1 import dispatcher_pb2, jobs_pb2
from sparkmill.services.dispatcher.job_placement import JobMasterProcessRecord, JobRecord


def job_details(
    job: JobRecord, hosting_process: JobMasterProcessRecord | None
) -> jobs_pb2.JobDetails:
    """The job's details as the dispatcher knows them now.

    ``hosting_process`` is the registered process the job was placed on (None if none is); it
    is named as the job's JobMaster only once that JobMaster leads (it has a session).
    """
    details = jobs_pb2.JobDetails()
    if job.details is not None:
        details.CopyFrom(job.details)
    else:
        for vertex in job.graph.vertices:
            # An open parallelism is 0 ("auto") until the JobMaster has decided it.
            details.vertices.add(
                vertex_id=vertex.id,
                name=vertex.name,
                parallelism=max(0, vertex.parallelism),
                parallelism_decision="auto" if vertex.parallelism < 0 else "",
            )
    details.job_id = job.job_id
    details.name = job.name
    details.status = job_status_to_proto(job.status)
    details.submitted_at = job.submitted_at
    details.ended_at = job.ended_at
    details.job_master_address = job.address
    del details.pipeline_args[:]
    details.pipeline_args.extend(decode_pipeline_args(job.graph.config))
    if hosting_process is not None and job.session_id:
        details.job_master.CopyFrom(hosting_process.info)
    return details


def add_job_summary(reply: dispatcher_pb2.ListJobsResponse, job: JobRecord) -> None:
    """Append ``job``'s line (status, times, task counts, restarts) to a ``ListJobs`` reply."""
    summary = reply.jobs.add(
        job_id=job.job_id,
        name=job.name,
        status=job_status_to_proto(job.status),
        submitted_at=job.submitted_at,
        ended_at=job.ended_at,
    )
    known = job.details.vertices if job.details is not None else job.graph.vertices
    summary.total_tasks = sum(max(0, v.parallelism) for v in known)
    if job.details is not None:
        summary.restarts = job.details.restarts
        finished = execution_state_to_proto(ExecutionState.FINISHED)
        summary.finished_tasks = sum(
            v.tasks_by_state.get(finished, 0) for v in job.details.vertices
        )


__all__ = ["add_job_summary", "job_details"]
