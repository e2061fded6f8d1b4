"""The REST API (``/v1/...``) and the dashboard's files: a thin facade over the dispatcher.

Every job answer comes from the same handlers the ZeroMQ ``DispatcherGateway`` servicer runs
(``list_jobs``, ``get_job_status``, ``cancel_job``, ``submit_job``, ...), converted to JSON by
:mod:`.rest_json`; the REST layer keeps no job state of its own. What lies outside the
dispatcher (the resource manager's slots, standbys, ZooKeeper, the leader's address when this
dispatcher is a standby) comes through a :class:`ClusterView`.

A standby answers every request with ``307 Temporary Redirect`` to the same path on the
leader's REST URL, or ``503`` with the leader's RPC address when its REST URL is unknown (Flink
redirects from standby JobManagers the same way).

Access control: every route names the :class:`Action` it performs and asks the
:class:`RestAuthorizer` before running: :class:`.rest_auth.BearerTokenAuthorizer` with
``rest.auth.token-file``, :class:`AllowAll` without (an open API; the dispatcher warns).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf.message import DecodeError

from sparkmill.common.core.errors import ErrorCode, RpcError
from sparkmill.common.rpc.server import CallContext
from sparkmill.common.v1 import (
    common_pb2,
    dispatcher_pb2,
    envelope_pb2,
    jobs_pb2,
    resource_manager_pb2,
)
from sparkmill.services.dispatcher import rest_json
from sparkmill.services.dispatcher.http_server import (
    HttpError,
    HttpRequest,
    HttpResponse,
    StaticFiles,
)
from sparkmill.services.dispatcher.job_listing import MAX_PAGE_SIZE

API_VERSION = "v1"
CALL_TIMEOUT_S = 30.0
PROTOBUF_TYPES = frozenset({"application/x-protobuf", "application/protobuf"})

# RpcError codes -> HTTP statuses (anything else is a 500).
STATUS_BY_CODE = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.INVALID_JOB_GRAPH: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.ALREADY_EXISTS: 409,
    ErrorCode.FAILED_PRECONDITION: 409,
    ErrorCode.RESOURCE_EXHAUSTED: 429,
    ErrorCode.NOT_LEADER: 503,
    ErrorCode.FENCING_MISMATCH: 503,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.TIMEOUT: 504,
}


class DispatcherGatewayLike(Protocol):
    """The dispatcher methods the REST API calls (the gateway servicer's handlers)."""

    async def submit_job(
        self, request: dispatcher_pb2.SubmitJobRequest, context: CallContext
    ) -> dispatcher_pb2.SubmitJobResponse: ...

    async def list_jobs(
        self, request: dispatcher_pb2.ListJobsRequest, context: CallContext
    ) -> dispatcher_pb2.ListJobsResponse: ...

    async def get_job_status(
        self, request: dispatcher_pb2.GetJobStatusRequest, context: CallContext
    ) -> jobs_pb2.JobDetails: ...

    async def cancel_job(
        self, request: dispatcher_pb2.CancelJobRequest, context: CallContext
    ) -> common_pb2.Empty: ...

    async def get_job_result(
        self, request: dispatcher_pb2.GetJobResultRequest, context: CallContext
    ) -> jobs_pb2.JobResult: ...

    async def get_cluster_services(
        self, request: dispatcher_pb2.GetClusterServicesRequest, context: CallContext
    ) -> dispatcher_pb2.ClusterServices: ...

    def job_graph(self, job_id: str) -> common_pb2.JobGraph: ...

    async def list_attempt_logs(
        self, request: jobs_pb2.ListAttemptLogsRequest, context: CallContext
    ) -> jobs_pb2.AttemptLogIndex: ...

    async def get_attempt_log(
        self, request: jobs_pb2.GetAttemptLogRequest, context: CallContext
    ) -> jobs_pb2.AttemptLogChunk: ...


class ClusterView(Protocol):
    """What the REST API needs to know beyond the dispatcher's own state."""

    def is_leader(self) -> bool: ...

    async def leader(self) -> tuple[str, str]:
        """The leading dispatcher's (REST URL, RPC address); empty strings when unknown."""
        ...

    async def resource_manager_status(self) -> resource_manager_pb2.ClusterStatus | None: ...

    async def members(self) -> list[common_pb2.ServiceInfo]:
        """Every announced dispatcher, resource manager and job-master process."""
        ...

    def zookeeper_state(self) -> str:
        """CONNECTED / SUSPENDED / LOST, or "standalone" without ZooKeeper."""
        ...


class Action(enum.Enum):
    READ_CLUSTER = "read-cluster"
    READ_JOB = "read-job"  # job details, plan, exceptions, results
    SUBMIT_JOB = "submit-job"
    CANCEL_JOB = "cancel-job"


@dataclass(frozen=True)
class Refusal:
    """Why an authorizer refuses a request: 401 (no or unknown credentials) or 403 (known
    credentials that may not perform the action)."""

    status: int
    message: str


class RestAuthorizer(Protocol):
    """The hook for credentials: None allows the request, a :class:`Refusal` refuses it."""

    name: str

    def authenticate(self, headers: Mapping[str, str]) -> Refusal | None:
        """Whether the request carries valid credentials of any role. Asked before the body
        of a request is read, so that a client without them never makes the server buffer
        one."""
        ...

    def authorize(self, request: HttpRequest, action: Action) -> Refusal | None: ...


class AllowAll:
    """No authentication (``rest.auth.token-file`` unset; see docs/rest-api.md, "Access")."""

    name = "none"

    def authenticate(self, headers: Mapping[str, str]) -> Refusal | None:
        return None

    def authorize(self, request: HttpRequest, action: Action) -> Refusal | None:
        return None


@dataclass(frozen=True)
class WebSettings:
    grafana_url: str = ""
    refresh_interval_ms: int = 2000


RouteHandler = Callable[[HttpRequest, dict[str, str]], Awaitable[HttpResponse]]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    action: Action
    handler: RouteHandler


class RestApi:
    def __init__(
        self,
        gateway: DispatcherGatewayLike,
        cluster: ClusterView,
        static: StaticFiles,
        web: WebSettings | None = None,
        authorizer: RestAuthorizer | None = None,
    ) -> None:
        self.gateway = gateway
        self.cluster = cluster
        self.static = static
        self.web = web or WebSettings()
        self.authorizer: RestAuthorizer = authorizer or AllowAll()
        job = r"/v1/jobs/(?P<job>[^/]+)"
        self.routes = [
            self._route("GET", r"/v1/config", Action.READ_CLUSTER, self._config),
            self._route("GET", r"/v1/overview", Action.READ_CLUSTER, self._overview),
            self._route("GET", r"/v1/cluster", Action.READ_CLUSTER, self._cluster),
            self._route("GET", r"/v1/taskmanagers", Action.READ_CLUSTER, self._taskmanagers),
            self._route("GET", r"/v1/jobs(/overview)?", Action.READ_CLUSTER, self._jobs),
            self._route("POST", r"/v1/jobs", Action.SUBMIT_JOB, self._submit),
            self._route("GET", job, Action.READ_JOB, self._job),
            self._route("PATCH", job, Action.CANCEL_JOB, self._cancel),
            self._route("GET", job + "/plan", Action.READ_JOB, self._plan),
            self._route("GET", job + "/exceptions", Action.READ_JOB, self._exceptions),
            self._route("GET", job + "/execution-result", Action.READ_JOB, self._result),
            self._route("GET", job + r"/vertices/(?P<vertex>[^/]+)", Action.READ_JOB, self._vertex),
            self._route("GET", job + "/logs", Action.READ_JOB, self._logs),
            self._route(
                "GET",
                job + r"/vertices/(?P<vertex>[^/]+)/subtasks/(?P<subtask>\d+)"
                r"/attempts/(?P<attempt>\d+|latest)/log",
                Action.READ_JOB,
                self._attempt_log,
            ),
        ]

    @staticmethod
    def _route(method: str, pattern: str, action: Action, handler: RouteHandler) -> Route:
        return Route(method, re.compile(pattern), action, handler)

    # -- entry -----------------------------------------------------------------------------------

    def admit(self, method: str, path: str, headers: dict[str, str]) -> HttpResponse | None:
        """The HTTP server's admission hook: a request with a body needs valid credentials
        before the body is read (which route it is and whether the role suffices is decided
        after, by :meth:`handle`)."""
        refusal = self.authorizer.authenticate(headers)
        if refusal is None:
            return None
        return _refused(refusal)

    async def handle(self, request: HttpRequest) -> HttpResponse:
        if not self.cluster.is_leader():
            return await self._to_leader(request)
        if request.path == "/v1" or request.path.startswith("/v1/"):
            return await self._api(request)
        if request.method not in ("GET", "HEAD"):
            raise HttpError(405, f"{request.method} is not allowed on {request.path}")
        found = self.static.response(request.path)
        if found is None:
            raise HttpError(404, f"no page {request.path}; the dashboard is at /")
        return found

    async def _to_leader(self, request: HttpRequest) -> HttpResponse:
        rest_url, address = await self.cluster.leader()
        if rest_url:
            response = HttpResponse.error(
                307, "this dispatcher is a standby; follow Location", leader={"rest-url": rest_url}
            )
            response.headers["Location"] = rest_url.rstrip("/") + request.raw_target
            return response
        return HttpResponse.error(
            503,
            "this dispatcher is not the leader and the leader's REST URL is unknown"
            + (f"; the leader's RPC address is {address}" if address else "; no leader yet"),
            leader={"address": address, "rest-url": ""},
        )

    async def _api(self, request: HttpRequest) -> HttpResponse:
        allowed: list[str] = []
        for route in self.routes:
            match = route.pattern.fullmatch(request.path)
            if match is None:
                continue
            method = "GET" if request.method == "HEAD" else request.method
            if route.method != method:
                allowed.append(route.method)
                continue
            refusal = self.authorizer.authorize(request, route.action)
            if refusal is not None:
                return _refused(refusal, action=route.action.value)
            params = {k: v for k, v in match.groupdict().items() if v is not None}
            try:
                return await route.handler(request, params)
            except RpcError as exc:
                status = STATUS_BY_CODE.get(exc.code, 500)
                return HttpResponse.error(status, exc.message, code=exc.code.name)
        if allowed:
            response = HttpResponse.error(405, f"{request.method} is not allowed on {request.path}")
            response.headers["Allow"] = ", ".join(sorted(set(allowed)))
            return response
        raise HttpError(404, f"no API resource {request.path}; see docs/rest-api.md")

    @staticmethod
    def _context() -> CallContext:
        now = asyncio.get_running_loop().time()
        header = envelope_pb2.RequestHeader(caller="rest", timeout_ms=int(CALL_TIMEOUT_S * 1000))
        return CallContext(header=header, received_at=now, deadline=now + CALL_TIMEOUT_S)

    # -- cluster ---------------------------------------------------------------------------------

    async def _config(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse.json(
            200,
            {
                "rest-api-version": API_VERSION,
                "refresh-interval": self.web.refresh_interval_ms,
                "grafana-url": self.web.grafana_url,
                "authentication": self.authorizer.name,
                "features": {"web-submit": True, "web-cancel": True},
                "states": rest_json.states_json(),
            },
        )

    async def _list_jobs(self) -> list[dispatcher_pb2.JobSummary]:
        """Every job (for the overview's counts), page by page."""
        jobs: list[dispatcher_pb2.JobSummary] = []
        token = ""
        while True:
            page = await self._jobs_page(MAX_PAGE_SIZE, token)
            jobs.extend(page.jobs)
            token = page.next_page_token
            if not token:
                return jobs

    async def _jobs_page(self, size: int, token: str) -> dispatcher_pb2.ListJobsResponse:
        request = dispatcher_pb2.ListJobsRequest(page_size=size, page_token=token)
        return await self.gateway.list_jobs(request, self._context())

    async def _overview(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        jobs = await self._list_jobs()
        status = await self.cluster.resource_manager_status()
        return HttpResponse.json(200, rest_json.overview_json(jobs, status))

    async def _cluster(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        found = await self.gateway.get_cluster_services(
            dispatcher_pb2.GetClusterServicesRequest(), self._context()
        )
        status = await self.cluster.resource_manager_status()
        services = [found.dispatcher]
        if status is not None:
            services.append(status.resource_manager)
        services.extend(found.job_master_processes)
        known = {(s.role, s.id) for s in services}
        for member in await self.cluster.members():
            if (member.role, member.id) not in known:  # not leading: a standby
                member.is_leader = False
                services.append(member)
                known.add((member.role, member.id))
        return HttpResponse.json(
            200,
            {
                "services": [rest_json.service_json(s) for s in services],
                "zookeeper": self.cluster.zookeeper_state(),
                "resource-manager-reachable": status is not None,
                "grafana-url": self.web.grafana_url,
            },
        )

    async def _taskmanagers(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        status = await self.cluster.resource_manager_status()
        if status is None:
            raise HttpError(503, "the resource manager leader did not answer; try again")
        return HttpResponse.json(200, rest_json.taskmanagers_json(status, time.time()))

    # -- jobs ------------------------------------------------------------------------------------

    async def _jobs(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        raw = request.query.get("limit", str(MAX_PAGE_SIZE))
        if not raw.isdigit() or not 0 < int(raw) <= MAX_PAGE_SIZE:
            raise HttpError(400, f"limit={raw[:40]!r} is not a number from 1 to {MAX_PAGE_SIZE}")
        page = await self._jobs_page(int(raw), request.query.get("after", ""))
        now = time.time()
        body: dict[str, object] = {"jobs": [rest_json.job_summary_json(j, now) for j in page.jobs]}
        if page.next_page_token:  # pass it as ?after= for the next page
            body["next"] = page.next_page_token
        return HttpResponse.json(200, body)

    async def _details(self, job_id: str) -> jobs_pb2.JobDetails:
        return await self.gateway.get_job_status(
            dispatcher_pb2.GetJobStatusRequest(job_id=job_id), self._context()
        )

    def _graph(self, job_id: str) -> common_pb2.JobGraph | None:
        try:
            return self.gateway.job_graph(job_id)
        except RpcError:
            return None

    async def _job(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        details = await self._details(params["job"])
        graph = self._graph(params["job"])
        return HttpResponse.json(200, rest_json.job_details_json(details, graph, time.time()))

    async def _plan(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        details = await self._details(params["job"])
        return HttpResponse.json(200, rest_json.plan_json(details, self._graph(params["job"])))

    async def _exceptions(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        raw = request.query.get("maxExceptions", "100")
        if not raw.isdigit():
            raise HttpError(400, f"maxExceptions={raw!r} is not a non-negative integer")
        details = await self._details(params["job"])
        return HttpResponse.json(200, rest_json.exceptions_json(details, max_entries=int(raw)))

    async def _vertex(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        details = await self._details(params["job"])
        now = time.time()
        for vertex in details.vertices:
            if vertex.vertex_id == params["vertex"]:
                return HttpResponse.json(
                    200,
                    {
                        **rest_json.vertex_json(vertex, now),
                        "now": rest_json.millis(now),
                        "subtasks": rest_json.subtasks_json(vertex, now),
                    },
                )
        raise HttpError(404, f"job {params['job']} has no vertex {params['vertex']}")

    async def _logs(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        index = await self.gateway.list_attempt_logs(
            jobs_pb2.ListAttemptLogsRequest(job_id=params["job"]), self._context()
        )
        return HttpResponse.json(200, rest_json.attempt_logs_json(index))

    async def _attempt_log(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        offset = _int_query(request, "offset", -64 * 1024)
        max_bytes = _int_query(request, "max_bytes", 256 * 1024)
        if not 0 < max_bytes <= 1024 * 1024:
            raise HttpError(400, f"max_bytes={max_bytes} is not from 1 to 1048576")
        attempt = params["attempt"]
        chunk = await self.gateway.get_attempt_log(
            jobs_pb2.GetAttemptLogRequest(
                job_id=params["job"],
                vertex=params["vertex"],
                subtask_index=int(params["subtask"]),
                attempt_number=-1 if attempt == "latest" else int(attempt),
                offset=offset,
                max_bytes=max_bytes,
            ),
            self._context(),
        )
        if request.query.get("format") == "text":
            return HttpResponse(200, chunk.text.encode(), "text/plain; charset=utf-8")
        return HttpResponse.json(200, rest_json.attempt_log_json(chunk))

    async def _result(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        details = await self._details(params["job"])
        if rest_json.job_state(details.status) not in rest_json.TERMINAL_JOB_STATES:
            return HttpResponse.json(200, {"status": {"id": "IN_PROGRESS"}})
        result = await self.gateway.get_job_result(
            dispatcher_pb2.GetJobResultRequest(job_id=params["job"]), self._context()
        )
        return HttpResponse.json(200, rest_json.result_json(result))

    async def _cancel(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        mode = request.query.get("mode", "cancel")
        if mode != "cancel":
            raise HttpError(400, f"mode={mode!r} is not supported; use PATCH ...?mode=cancel")
        await self.gateway.cancel_job(
            dispatcher_pb2.CancelJobRequest(job_id=params["job"]), self._context()
        )
        return HttpResponse.json(202, {})

    async def _submit(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        graph = common_pb2.JobGraph()
        try:
            graph.ParseFromString(submitted_graph_bytes(request))
        except DecodeError as exc:
            raise HttpError(400, f"the body is not a serialized JobGraph protobuf: {exc}") from None
        if not graph.job_id or not graph.vertices:
            raise HttpError(
                400,
                "the JobGraph has no job_id or no vertices; build it with "
                "sparkmill.pipeline (Pipeline.build()) and serialize it",
            )
        reply = await self.gateway.submit_job(
            dispatcher_pb2.SubmitJobRequest(job_graph=graph), self._context()
        )
        return HttpResponse.json(
            202, {"jobid": reply.job_id, "jobUrl": f"/{API_VERSION}/jobs/{reply.job_id}"}
        )


def submitted_graph_bytes(request: HttpRequest) -> bytes:
    """The serialized JobGraph of a submission: a protobuf body, or JSON with base64."""
    if not request.body:
        raise HttpError(400, "the body is empty; send a serialized JobGraph")
    if request.content_type in PROTOBUF_TYPES:
        return request.body
    if request.content_type == "application/json":
        try:
            document: Any = json.loads(request.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"the body is not JSON: {exc}") from None
        encoded = document.get("jobGraph") if isinstance(document, dict) else None
        if not isinstance(encoded, str):
            raise HttpError(400, 'the JSON body needs "jobGraph": the base64 of the JobGraph')
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise HttpError(400, '"jobGraph" is not valid base64') from None
    raise HttpError(
        415,
        f"unsupported Content-Type {request.content_type or '(none)'!r}; send "
        'application/x-protobuf (the JobGraph bytes) or application/json ({"jobGraph": base64})',
    )


def _int_query(request: HttpRequest, name: str, default: int) -> int:
    raw = request.query.get(name, "")
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise HttpError(400, f"{name}={raw[:40]!r} is not an integer") from None


def _refused(refusal: Refusal, **extra: Any) -> HttpResponse:
    response = HttpResponse.error(refusal.status, refusal.message, **extra)
    if refusal.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="sparkmill"'
    return response
