"""Hand-written fakes of the REST API's unit tests: the dispatcher handlers it calls
(:class:`TestingGateway`, one known job :data:`JOB`), the cluster view it reads, an authorizer
that refuses one action, and a few static files."""

from __future__ import annotations

from collections.abc import Mapping

from sparkmill.common.core.errors import FailedPreconditionError, NotFoundError
from sparkmill.common.rpc.server import CallContext
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, jobs_pb2, resource_manager_pb2
from sparkmill.services.dispatcher.http_server import HttpRequest, StaticFiles
from sparkmill.services.dispatcher.rest_api import Action, Refusal

JOB = "a" * 32


class TestingGateway:
    """The dispatcher handlers the REST API calls: one known job, calls recorded."""

    __test__ = False

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.submitted: list[common_pb2.JobGraph] = []
        self.status = common_pb2.RUNNING
        self.list_requests: list[dispatcher_pb2.ListJobsRequest] = []
        self.log_requests: list[jobs_pb2.GetAttemptLogRequest] = []

    def _check(self, job_id: str) -> None:
        if job_id != JOB:
            raise NotFoundError(f"no job {job_id}")

    async def submit_job(
        self, request: dispatcher_pb2.SubmitJobRequest, context: CallContext
    ) -> dispatcher_pb2.SubmitJobResponse:
        self.submitted.append(request.job_graph)
        return dispatcher_pb2.SubmitJobResponse(job_id=request.job_graph.job_id)

    async def list_jobs(
        self, request: dispatcher_pb2.ListJobsRequest, context: CallContext
    ) -> dispatcher_pb2.ListJobsResponse:
        self.list_requests.append(request)
        reply = dispatcher_pb2.ListJobsResponse()
        reply.jobs.add(job_id=JOB, name="demo", status=self.status, submitted_at=100.0)
        if request.page_size == 1 and not request.page_token:  # a second page follows
            reply.next_page_token = "second-page"
        return reply

    async def get_job_status(
        self, request: dispatcher_pb2.GetJobStatusRequest, context: CallContext
    ) -> jobs_pb2.JobDetails:
        self._check(request.job_id)
        details = jobs_pb2.JobDetails(job_id=JOB, name="demo", status=self.status)
        details.vertices.add(
            vertex_id="v1", name="read", parallelism=2, tasks_by_state={6: 1, 5: 1}
        )
        details.vertices.add(vertex_id="v2", name="write", parallelism=1)
        details.exceptions.add(
            timestamp=5.0,
            vertex_name="read",
            error=common_pb2.ErrorInfo(message="first", exception_type="ValueError"),
        )
        details.exceptions.add(
            timestamp=6.0,
            vertex_name="read",
            error=common_pb2.ErrorInfo(message="second", exception_type="KeyError"),
        )
        return details

    async def cancel_job(
        self, request: dispatcher_pb2.CancelJobRequest, context: CallContext
    ) -> common_pb2.Empty:
        self._check(request.job_id)
        if self.status == common_pb2.FINISHED:
            raise FailedPreconditionError(f"job {request.job_id} already ended FINISHED")
        self.cancelled.append(request.job_id)
        return common_pb2.Empty()

    async def get_job_result(
        self, request: dispatcher_pb2.GetJobResultRequest, context: CallContext
    ) -> jobs_pb2.JobResult:
        self._check(request.job_id)
        return jobs_pb2.JobResult(job_id=JOB, status=self.status)

    async def get_cluster_services(
        self, request: dispatcher_pb2.GetClusterServicesRequest, context: CallContext
    ) -> dispatcher_pb2.ClusterServices:
        return dispatcher_pb2.ClusterServices(
            dispatcher=common_pb2.ServiceInfo(role="dispatcher", id="d1", is_leader=True)
        )

    async def list_attempt_logs(
        self, request: jobs_pb2.ListAttemptLogsRequest, context: CallContext
    ) -> jobs_pb2.AttemptLogIndex:
        self._check(request.job_id)
        index = jobs_pb2.AttemptLogIndex()
        index.logs.add(job_id=JOB, vertex_id="v1", vertex_name="read", task_executor="te1")
        return index

    async def get_attempt_log(
        self, request: jobs_pb2.GetAttemptLogRequest, context: CallContext
    ) -> jobs_pb2.AttemptLogChunk:
        self._check(request.job_id)
        self.log_requests.append(request)
        if request.vertex != "v1":
            raise NotFoundError(f"no log of {request.vertex}")
        chunk = jobs_pb2.AttemptLogChunk(text="line one\nline two\n", offset=10, next_offset=28)
        chunk.ref.job_id, chunk.ref.vertex_id = JOB, "v1"
        chunk.dropped_bytes = 10
        return chunk

    def job_graph(self, job_id: str) -> common_pb2.JobGraph:
        self._check(job_id)
        graph = common_pb2.JobGraph(job_id=JOB, name="demo")
        source = graph.vertices.add(id="v1", name="read", parallelism=2)
        source.produced.add(id="ds1", result_type=common_pb2.BLOCKING)
        sink = graph.vertices.add(id="v2", name="write", parallelism=1)
        sink.inputs.add(source_dataset_id="ds1", pattern=common_pb2.ALL_TO_ALL)
        return graph


class TestingClusterView:
    """The cluster as the REST API reads it: leader or standby, one task executor with one
    slot taken, two dispatchers, and the resource manager's own workers when given."""

    __test__ = False

    def __init__(
        self,
        leader: bool = True,
        leader_rest_url: str = "",
        workers: resource_manager_pb2.WorkerStats | None = None,
    ) -> None:
        self.leading = leader
        self.leader_rest_url = leader_rest_url
        self.workers = workers  # the resource manager's own task executors (a driver runs)

    def is_leader(self) -> bool:
        return self.leading

    async def leader(self) -> tuple[str, str]:
        return self.leader_rest_url, "tcp://10.0.0.9:6123"

    async def resource_manager_status(self) -> resource_manager_pb2.ClusterStatus | None:
        status = resource_manager_pb2.ClusterStatus(slots_total=4, slots_free=3)
        te = status.task_executors.add(resource_id="te1", address="tcp://h:1")
        te.slots.add(slot_index=0, allocation_id="x", job_id=JOB)
        te.slots.add(slot_index=1)
        if self.workers is not None:
            status.workers.CopyFrom(self.workers)
        return status

    async def members(self) -> list[common_pb2.ServiceInfo]:
        return [
            common_pb2.ServiceInfo(role="dispatcher", id="d1", is_leader=True),
            common_pb2.ServiceInfo(role="dispatcher", id="d2", is_leader=True),
        ]

    def zookeeper_state(self) -> str:
        return "CONNECTED"


class TestingAuthorizer:
    """Lets every request in but refuses to cancel a job."""

    __test__ = False
    name = "testing"

    def authenticate(self, headers: Mapping[str, str]) -> Refusal | None:
        return None

    def authorize(self, request: HttpRequest, action: Action) -> Refusal | None:
        return Refusal(401, "credentials required") if action is Action.CANCEL_JOB else None


STATIC = StaticFiles({"index.html": (b"<html>", "text/html"), "app.js": (b"x", "text/js")})
