"""The dispatcher's HTTP server, REST routing and JSON shapes, with hand-written fakes."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.common.v1 import common_pb2, jobs_pb2, resource_manager_pb2
from sparkmill.services.dispatcher import rest_json
from sparkmill.services.dispatcher.http_server import (
    HttpError,
    HttpLimits,
    HttpRequest,
    HttpResponse,
    HttpServer,
    StaticFiles,
    body_length,
    parse_head,
    parse_target,
)
from sparkmill.services.dispatcher.rest_api import RestApi
from sparkmill.services.dispatcher.rest_service import rpc_host
from tests.unit.rest_api_harness import (
    JOB,
    STATIC,
    TestingAuthorizer,
    TestingClusterView,
    TestingGateway,
)


def _api(**kwargs: object) -> tuple[RestApi, TestingGateway]:
    gateway = TestingGateway()
    view = kwargs.pop("view", TestingClusterView())
    return RestApi(gateway, view, STATIC, **kwargs), gateway  # type: ignore[arg-type]


def _request(method: str, target: str, body: bytes = b"", content_type: str = "") -> HttpRequest:
    path, query = parse_target(target)
    headers = {"content-type": content_type} if content_type else {}
    return HttpRequest(method, path, query, headers, body, target)


def _call(api: RestApi, *args: str | bytes) -> tuple[HttpResponse, dict[str, Any]]:
    async def go() -> HttpResponse:
        try:
            return await api.handle(_request(*args))  # type: ignore[arg-type]
        except HttpError as exc:
            return HttpResponse.error(exc.status, exc.message)

    response = asyncio.run(go())
    document = json.loads(response.body) if response.content_type == "application/json" else {}
    return response, document


# -- HTTP parsing --------------------------------------------------------------------------------


def test_parse_head_reads_method_target_and_lowercased_headers() -> None:
    method, target, headers = parse_head(b"GET /v1/jobs?x=1 HTTP/1.1\r\nHost: a\r\nX-Y:  z ")
    assert (method, target, headers) == ("GET", "/v1/jobs?x=1", {"host": "a", "x-y": "z"})


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET /v1/jobs", 400),
        (b"GET  HTTP/1.1", 400),
        (b"GET / SPDY/3", 505),
        (b"BREW / HTTP/1.1", 501),
        (b"GET / HTTP/1.1\r\nno colon here", 400),
        (b"GET / HTTP/1.1\r\n folded: x", 400),
        (b"GET / HTTP/1.1\r\nbad name: x", 400),
    ],
)
def test_malformed_heads_are_refused_with_a_status(head: bytes, status: int) -> None:
    with pytest.raises(HttpError) as caught:
        parse_head(head)
    assert caught.value.status == status


def test_targets_are_decoded_and_must_be_origin_form() -> None:
    assert parse_target("/v1/jobs/a%20b?mode=cancel") == ("/v1/jobs/a b", {"mode": "cancel"})
    for bad in ("http://elsewhere/", "/v1/jobs/%ff", "/a%00b"):
        with pytest.raises(HttpError) as caught:
            parse_target(bad)
        assert caught.value.status == 400


def test_body_length_limits() -> None:
    limits = HttpLimits(max_body_bytes=10)
    assert body_length({"content-length": "10"}, limits) == 10
    for headers, status in (
        ({"content-length": "11"}, 413),
        ({"content-length": "-1"}, 400),
        ({"transfer-encoding": "chunked"}, 501),
        ({"content-length": "1\u00b2"}, 400),  # a superscript two: isdigit() but not int()
        ({"content-length": "\u0663"}, 400),  # an Arabic-Indic three
        ({"content-length": " 3"}, 400),
    ):
        with pytest.raises(HttpError) as caught:
            body_length(headers, limits)
        assert caught.value.status == status


def test_static_files_serve_only_what_was_loaded(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<p>hi</p>")
    (tmp_path / "app.js").write_text("1")
    (tmp_path / ".hidden").write_text("no")
    (tmp_path.parent / "secret.txt").write_text("no")
    files = StaticFiles.load(tmp_path)
    assert files.names == ["app.js", "index.html"]
    index = files.response("/")
    assert index is not None and index.body == b"<p>hi</p>"
    assert index.content_type.startswith("text/html")
    js = files.response("/app.js")
    assert js is not None and js.content_type.startswith("text/javascript")
    for path in ("/../secret.txt", "/.hidden", "/%2e%2e/secret.txt", "//etc/passwd", "/nope"):
        assert files.response(path) is None


def test_the_server_answers_bad_requests_and_keeps_serving() -> None:
    async def handler(request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(200, {"path": request.path, "body": request.body.decode()})

    async def exchange(port: int, raw: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(raw)
        await writer.drain()
        reply = await reader.read()
        writer.close()
        return reply

    async def scenario() -> list[bytes]:
        limits = HttpLimits(max_header_bytes=256, max_body_bytes=8, header_timeout_s=0.3)
        server = HttpServer(handler, "127.0.0.1", (0, 0), limits)
        port = await server.start()
        try:
            return [
                await exchange(port, b"NONSENSE\r\n\r\n"),
                await exchange(port, b"GET / HTTP/1.1\r\nX: " + b"a" * 400 + b"\r\n\r\n"),
                await exchange(port, b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\n123456789"),
                await exchange(port, b"GET / HTTP/1.1\r\n"),  # never finished: times out
                await exchange(port, b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"),
            ]
        finally:
            await server.stop()

    replies = asyncio.run(scenario())
    assert [r.split(b" ", 2)[1] for r in replies] == [b"400", b"431", b"413", b"408", b"200"]
    assert b'"body": "abc"' in replies[-1]
    assert b'"errors"' in replies[0]


def test_requests_beyond_the_limit_in_progress_are_answered_503() -> None:
    release = asyncio.Event()

    async def handler(request: HttpRequest) -> HttpResponse:
        if request.path == "/slow":
            await release.wait()
        return HttpResponse.json(200, {})

    async def scenario() -> tuple[bytes, bytes, bytes]:
        server = HttpServer(handler, "127.0.0.1", (0, 0), HttpLimits(max_connections=1))
        port = await server.start()
        slow_reader, slow = await asyncio.open_connection("127.0.0.1", port)
        slow.write(b"GET /slow HTTP/1.1\r\n\r\n")  # holds the only place
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        refused = await reader.read()
        writer.close()
        release.set()
        first = await slow_reader.read()
        slow.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        served = await reader.read()
        writer.close()
        await server.stop()
        return refused, first, served

    refused, first, served = asyncio.run(scenario())
    assert refused.startswith(b"HTTP/1.1 503 ")
    assert first.startswith(b"HTTP/1.1 200 ") and served.startswith(b"HTTP/1.1 200 ")


def test_a_failing_handler_gets_a_500_not_a_crash() -> None:
    async def handler(request: HttpRequest) -> HttpResponse:
        raise RuntimeError("boom")

    async def scenario() -> bytes:
        server = HttpServer(handler, "127.0.0.1", (0, 0))
        port = await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        reply = await reader.read()
        writer.close()
        await server.stop()
        return reply

    assert asyncio.run(scenario()).startswith(b"HTTP/1.1 500 ")


# -- routing -------------------------------------------------------------------------------------


def test_the_jobs_list_is_paged_with_limit_and_after() -> None:
    api, gateway = _api()
    response, document = _call(api, "GET", "/v1/jobs?limit=1")
    assert response.status == 200 and document["next"] == "second-page"
    response, document = _call(api, "GET", "/v1/jobs?limit=1&after=second-page")
    assert response.status == 200 and "next" not in document
    asked = [(r.page_size, r.page_token) for r in gateway.list_requests]
    assert asked == [(1, ""), (1, "second-page")]
    for bad in ("0", "1001", "x", "-1"):
        response, _ = _call(api, "GET", f"/v1/jobs?limit={bad}")
        assert response.status == 400


def test_jobs_list_and_details_in_flink_shapes() -> None:
    api, _ = _api()
    response, document = _call(api, "GET", "/v1/jobs")
    assert response.status == 200
    assert document["jobs"][0]["jid"] == JOB and document["jobs"][0]["state"] == "RUNNING"
    response, job = _call(api, "GET", f"/v1/jobs/{JOB}")
    assert response.status == 200
    assert [v["name"] for v in job["vertices"]] == ["read", "write"]
    assert job["vertices"][0]["status"] == "RUNNING"
    assert job["vertices"][0]["tasks"]["FINISHED"] == 1
    assert job["vertices"][1]["tasks"]["CREATED"] == 1  # no report yet
    edge = job["plan"]["nodes"][1]["inputs"][0]
    assert (edge["id"], edge["ship_strategy"], edge["exchange"]) == ("v1", "ALL_TO_ALL", "blocking")


def test_exceptions_newest_first_and_limit_validated() -> None:
    api, _ = _api()
    _, document = _call(api, "GET", f"/v1/jobs/{JOB}/exceptions")
    entries = document["exceptionHistory"]["entries"]
    assert [e["message"] for e in entries] == ["second", "first"]
    assert document["root-exception"] == "second"
    _, limited = _call(api, "GET", f"/v1/jobs/{JOB}/exceptions?maxExceptions=1")
    assert limited["exceptionHistory"]["truncated"] is True
    response, _ = _call(api, "GET", f"/v1/jobs/{JOB}/exceptions?maxExceptions=x")
    assert response.status == 400


def test_unknown_jobs_and_resources_are_404() -> None:
    api, _ = _api()
    for target in ("/v1/jobs/nope", "/v1/jobs/nope/plan", "/v1/nothing", "/missing.html"):
        response, document = _call(api, "GET", target)
        assert response.status == 404, target
    response, document = _call(api, "GET", "/v1/jobs/nope")
    assert document["errors"] == ["no job nope"] and document["code"] == "NOT_FOUND"
    response, _ = _call(api, "GET", f"/v1/jobs/{JOB}/vertices/v9")
    assert response.status == 404


def test_cancel_is_a_patch_and_refusals_are_409() -> None:
    api, gateway = _api()
    response, _ = _call(api, "PATCH", f"/v1/jobs/{JOB}?mode=cancel")
    assert response.status == 202 and gateway.cancelled == [JOB]
    response, document = _call(api, "PATCH", f"/v1/jobs/{JOB}?mode=stop")
    assert response.status == 400 and "mode" in document["errors"][0]
    gateway.status = common_pb2.FINISHED
    response, document = _call(api, "PATCH", f"/v1/jobs/{JOB}")
    assert response.status == 409 and "already ended" in document["errors"][0]
    response, _ = _call(api, "DELETE", f"/v1/jobs/{JOB}")
    assert response.status == 405 and response.headers["Allow"] == "GET, PATCH"


def test_submission_as_protobuf_or_base64_json() -> None:
    api, gateway = _api()
    graph = common_pb2.JobGraph(job_id="b" * 32, name="x")
    graph.vertices.add(id="v", name="only", parallelism=1)
    raw = graph.SerializeToString()
    response, document = _call(api, "POST", "/v1/jobs", raw, "application/x-protobuf")
    assert response.status == 202 and document["jobid"] == "b" * 32
    body = json.dumps({"jobGraph": base64.b64encode(raw).decode()}).encode()
    response, _ = _call(api, "POST", "/v1/jobs", body, "application/json")
    assert response.status == 202 and len(gateway.submitted) == 2
    for args, status in (
        ((raw, "text/plain"), 415),
        ((b"", "application/x-protobuf"), 400),
        ((b"\xff\xff\xff", "application/x-protobuf"), 400),
        ((b"{", "application/json"), 400),
        ((b'{"jobGraph": "!!"}', "application/json"), 400),
        ((common_pb2.JobGraph(name="x").SerializeToString(), "application/x-protobuf"), 400),
    ):
        response, document = _call(api, "POST", "/v1/jobs", *args)
        assert response.status == status, args
        assert document["errors"][0]
    assert len(gateway.submitted) == 2


def test_standbys_redirect_to_the_leader_or_name_its_address() -> None:
    api, _ = _api(view=TestingClusterView(leader=False, leader_rest_url="http://leader:8081"))
    response, document = _call(api, "GET", "/v1/jobs?x=1")
    assert response.status == 307
    assert response.headers["Location"] == "http://leader:8081/v1/jobs?x=1"
    api, _ = _api(view=TestingClusterView(leader=False))
    response, document = _call(api, "GET", "/")
    assert response.status == 503 and "tcp://10.0.0.9:6123" in document["errors"][0]


def test_the_authorizer_hook_guards_actions() -> None:
    api, gateway = _api(authorizer=TestingAuthorizer())
    response, document = _call(api, "PATCH", f"/v1/jobs/{JOB}")
    assert response.status == 401 and document["action"] == "cancel-job"
    assert gateway.cancelled == []
    response, _ = _call(api, "GET", f"/v1/jobs/{JOB}")
    assert response.status == 200


def test_cluster_lists_standbys_and_task_executors() -> None:
    api, _ = _api()
    _, cluster = _call(api, "GET", "/v1/cluster")
    roles = [(s["id"], s["leader"]) for s in cluster["services"]]
    assert ("d1", True) in roles and ("d2", False) in roles
    assert cluster["zookeeper"] == "CONNECTED"
    _, overview = _call(api, "GET", "/v1/overview")
    assert (overview["slots-total"], overview["slots-available"], overview["jobs-running"]) == (
        4,
        3,
        1,
    )
    assert overview["workers"] is None  # no driver: nobody starts task executors
    _, tms = _call(api, "GET", "/v1/taskmanagers")
    assert tms["taskmanagers"][0]["freeSlots"] == 1
    response, _ = _call(api, "GET", "/app.js")
    assert response.status == 200 and response.body == b"x"


def test_the_overview_counts_the_task_executors_the_resource_manager_starts() -> None:
    workers = resource_manager_pb2.WorkerStats(
        driver="local",
        pending=1,
        registered=2,
        started_total=4,
        failed_total=1,
        max_slots=8,
        recent_failures=1,
    )
    api, _ = _api(view=TestingClusterView(workers=workers))
    _, overview = _call(api, "GET", "/v1/overview")
    assert overview["workers"] == {
        "driver": "local",
        "pending": 1,
        "registered": 2,
        "releasing": 0,
        "started": 4,
        "failed": 1,
        "released": 0,
        "max-slots": 8,
        "recent-failures": 1,
        "starts-paused": False,
    }


# -- JSON and configuration ----------------------------------------------------------------------


def test_vertex_state_aggregates_like_flink() -> None:
    assert rest_json.vertex_state({"FINISHED": 2}, 2) == "FINISHED"
    assert rest_json.vertex_state({"FINISHED": 1, "RUNNING": 1}, 2) == "RUNNING"
    assert rest_json.vertex_state({"FINISHED": 1, "FAILED": 1}, 2) == "FAILED"
    assert rest_json.vertex_state({"FINISHED": 1, "CREATED": 1}, 2) == "CREATED"


def test_the_dashboard_gets_every_state_name_from_the_config() -> None:
    # app.js keeps no list of states: these are all it knows, in lifecycle order.
    _, config = _call(_api()[0], "GET", "/v1/config")
    assert config["states"] == {
        "job": [s.name for s in JobStatus],
        "job-terminal": ["FAILED", "CANCELED", "FINISHED"],
        "execution": [s.name for s in ExecutionState],
    }
    # A vertex's task counts come in the same order, every state present.
    vertex = jobs_pb2.VertexDetails(parallelism=2, tasks_by_state={6: 1, 99: 1})
    assert (
        list(rest_json.vertex_json(vertex, 0.0)["tasks"])[: len(ExecutionState)]
        == (config["states"]["execution"])
    )
    assert rest_json.job_state(0) == rest_json.execution_state(42) == "UNKNOWN"


def test_rest_options_are_validated() -> None:
    for good in ("8081", "0", "50100-50200"):
        Configuration.from_mapping({"rest.port": good})
    for bad in ("x", "70000", "9-1", "0-5", "-1"):
        with pytest.raises(ConfigurationError, match=r"rest\.port"):
            Configuration.from_mapping({"rest.port": bad})
    with pytest.raises(ConfigurationError, match=r"web\.grafana-url"):
        Configuration.from_mapping({"web.grafana-url": "grafana:3000"})


def test_the_default_bind_host_is_the_dispatchers_own() -> None:
    assert rpc_host("tcp://10.1.2.3:6123") == "10.1.2.3"
    assert rpc_host("tcp://*:6123") == "0.0.0.0"
    assert rpc_host("tcp://[::1]:6123") == "::1"


def test_members_urls_reach_the_dashboard_only_when_they_are_http() -> None:
    from sparkmill.common.runtime.service_base import http_url as web_url
    from sparkmill.services.dispatcher.rest_json import service_json

    assert web_url("http://h:9249/metrics") == "http://h:9249/metrics"
    assert web_url("HTTPS://h/") == "HTTPS://h/"
    for hostile in ("javascript:alert(1)", "JaVaScRiPt:x", "data:text/html,x", "//h/x", "h:1"):
        assert web_url(hostile) == "", hostile
    info = common_pb2.ServiceInfo(
        role="job-master", metrics_url="javascript:fetch('//evil')", rest_url="http://ok:1"
    )
    document = service_json(info)
    assert document["metrics-url"] == "" and document["rest-url"] == "http://ok:1"


# -- attempt logs --------------------------------------------------------------------------------


def test_attempt_log_index_links_each_attempts_log() -> None:
    api, _ = _api()
    response, document = _call(api, "GET", f"/v1/jobs/{JOB}/logs")
    assert response.status == 200
    [entry] = document["logs"]
    assert entry["vertex-name"] == "read" and entry["taskmanager-id"] == "te1"
    assert entry["url"] == f"/v1/jobs/{JOB}/vertices/v1/subtasks/0/attempts/0/log"


def test_attempt_log_passes_the_attempt_and_offset_and_reports_dropped_bytes() -> None:
    api, gateway = _api()
    target = f"/v1/jobs/{JOB}/vertices/v1/subtasks/2/attempts/latest/log?offset=0&max_bytes=100"
    response, document = _call(api, "GET", target)
    assert response.status == 200
    assert document["text"] == "line one\nline two\n"
    assert (document["offset"], document["next-offset"], document["dropped-bytes"]) == (10, 28, 10)
    [sent] = gateway.log_requests
    assert (sent.subtask_index, sent.attempt_number, sent.offset, sent.max_bytes) == (2, -1, 0, 100)


def test_attempt_log_as_plain_text_and_errors() -> None:
    api, _ = _api()
    base = f"/v1/jobs/{JOB}/vertices/v1/subtasks/0/attempts/3/log"
    response, _ = _call(api, "GET", base + "?format=text")
    assert response.status == 200 and response.body == b"line one\nline two\n"
    assert response.content_type.startswith("text/plain")
    missing, _ = _call(api, "GET", f"/v1/jobs/{JOB}/vertices/v9/subtasks/0/attempts/0/log")
    assert missing.status == 404
    bad, document = _call(api, "GET", base + "?offset=abc")
    assert bad.status == 400 and "offset" in document["errors"][0]
