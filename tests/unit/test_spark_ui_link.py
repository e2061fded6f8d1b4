"""A task executor's Spark UI reaches the views: the session manager reads its URL when the
session comes up, the task executor reports it with every heartbeat answer (the session starts
after it registered), the resource manager keeps the latest one, and the REST API and the CLI
show it. Only http(s) URLs travel: each is a link in the dashboard."""

from __future__ import annotations

import asyncio

import pytest

from sparkmill.cli.output import service_json as cli_service_json
from sparkmill.common.core.ids import ResourceID
from sparkmill.common.rpc.client import RpcClientPool
from sparkmill.common.rpc.server import CallContext
from sparkmill.common.runtime.service_base import http_url
from sparkmill.common.v1 import common_pb2, envelope_pb2, pipeline_worker_pb2, resource_manager_pb2
from sparkmill.services.dispatcher import rest_json
from sparkmill.services.taskexecutor.pipeline.link import SERVICE_KEY, PipelineWorkerLink
from sparkmill.services.taskexecutor.task_executor import TaskExecutor
from tests.unit.resource_manager_harness import (
    call_context,
    leading_resource_manager,
    registration_request,
)
from tests.unit.task_executor_harness import task_executor_with_slots

UI = "http://127.0.0.1:4040"


@pytest.mark.parametrize("url", [UI, "https://te-1.example:4041/jobs/", "HTTP://h:1"])
def test_http_urls_pass(url: str) -> None:
    assert http_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        None,
        "",
        "javascript:alert(1)",
        "data:text/html,x",
        "file:///etc/passwd",
        "http://",
        "//h:4040",
        "http://[::1",
        "http://h/" + "x" * 2000,
    ],
)
def test_anything_else_is_dropped(url: object) -> None:
    assert http_url(url) == ""


def test_the_task_executor_reports_its_sessions_ui_with_its_heartbeat_answers() -> None:
    async def scenario() -> None:
        clients = RpcClientPool("test")
        te = task_executor_with_slots(TaskExecutor, 1, clients)
        context = CallContext(envelope_pb2.RequestHeader(), received_at=0.0, deadline=1.0)
        heartbeat = common_pb2.HeartbeatRequest(sender_id="rm")
        # No pipeline worker (a task executor without the data plane), then one whose session
        # is not up yet (never started here: no JVM), then one whose status named its UI.
        assert (await te.heartbeat_from_resource_manager(heartbeat, context)).spark_ui_url == ""
        manager = PipelineWorkerLink(pipeline_worker_pb2.PipelineWorkerSetup())
        te.task_services[SERVICE_KEY] = manager
        assert (await te.heartbeat_from_resource_manager(heartbeat, context)).spark_ui_url == ""
        manager.ui_url = UI
        assert (await te.heartbeat_from_resource_manager(heartbeat, context)).spark_ui_url == UI
        assert te._registration_request().info.spark_ui_url == UI
        info = await te.get_service_info(common_pb2.GetServiceInfoRequest(), context)
        assert info.spark_ui_url == UI
        await clients.close()

    asyncio.run(scenario())


def test_the_resource_manager_keeps_the_latest_reported_ui_and_drops_unsafe_ones() -> None:
    async def scenario() -> None:
        rm = leading_resource_manager()
        context = call_context()
        reply = await rm.register_task_executor(registration_request(), context)

        async def report(url: str) -> str:
            await rm.send_slot_report(
                resource_manager_pb2.SendSlotReportRequest(
                    instance_id=reply.instance_id,
                    slot_report=common_pb2.SlotReport(
                        slots=[common_pb2.SlotStatus(slot_index=0)], spark_ui_url=url
                    ),
                ),
                context,
            )
            status = await rm.get_cluster_status(
                resource_manager_pb2.GetClusterStatusRequest(), context
            )
            return status.task_executors[0].info.spark_ui_url

        assert await report("") == ""
        assert await report(UI) == UI
        assert await report("javascript:alert(1)") == ""
        assert await report(UI) == UI
        assert await report("") == ""  # the session stopped
        rm.te_heartbeats.unmonitor(ResourceID("worker-1"))
        await rm.clients.close()

    asyncio.run(scenario())


def test_the_rest_api_and_the_cli_show_the_ui() -> None:
    status = resource_manager_pb2.ClusterStatus()
    te = status.task_executors.add(resource_id="te-1")
    te.info.spark_ui_url = UI
    other = status.task_executors.add(resource_id="te-2")
    other.info.spark_ui_url = "javascript:alert(1)"  # an old or hostile member: no link
    managers = rest_json.taskmanagers_json(status, now=0.0)["taskmanagers"]
    assert [m["spark-ui-url"] for m in managers] == [UI, ""]
    assert cli_service_json(te.info)["spark_ui_url"] == UI
    assert cli_service_json(common_pb2.ServiceInfo())["spark_ui_url"] is None
