"""Unit tests: bind address versus advertised address (Flink's rpc.bind-address / rpc.address).

A server binds one interface or all of them and publishes the address others reach it at; a
wildcard is never published, and a process configured to advertise one refuses to start.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq.asyncio

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.rpc.addresses import rpc_endpoints, with_bound_port
from sparkmill.common.rpc.client import RpcClient
from sparkmill.common.rpc.security import TransportSecurity
from sparkmill.common.rpc.server import RpcServer
from sparkmill.common.runtime.settings import settings_from_config
from sparkmill.common.v1 import common_pb2
from sparkmill.common.v1.gateways import DispatcherClient
from sparkmill.services.entrypoint import EXIT_CONFIG_ERROR, rpc_endpoints_of, run_service
from tests.unit.rpc_fakes import FakeDispatcher, run


def test_without_a_bind_host_the_server_binds_the_advertised_host() -> None:
    endpoints = rpc_endpoints("k", "tcp://10.0.0.5:6123", "")
    assert (endpoints.bind, endpoints.advertised) == ("tcp://10.0.0.5:6123", "tcp://10.0.0.5:6123")


def test_a_bind_host_changes_where_it_listens_not_what_it_advertises() -> None:
    endpoints = rpc_endpoints("k", "tcp://node-1.example:0", "0.0.0.0")
    assert (endpoints.bind, endpoints.advertised) == ("tcp://0.0.0.0:0", "tcp://node-1.example:0")
    v6 = rpc_endpoints("k", "tcp://[fd00::5]:6124", "::")
    assert (v6.bind, v6.advertised) == ("tcp://[::]:6124", "tcp://[fd00::5]:6124")
    assert with_bound_port("tcp://node-1.example:0", "tcp://0.0.0.0:41234") == (
        "tcp://node-1.example:41234"
    )


@pytest.mark.parametrize("wildcard", ["tcp://0.0.0.0:6123", "tcp://*:0", "tcp://[::]:1"])
def test_a_wildcard_is_never_advertised(wildcard: str) -> None:
    with pytest.raises(ConfigurationError, match=r"jobmaster\.rpc-address.*rpc\.bind-host"):
        rpc_endpoints("jobmaster.rpc-address", wildcard, "")


def test_every_role_advertises_its_own_option_and_binds_on_rpc_bind_host() -> None:
    config = Configuration.from_mapping(
        {
            "rpc.bind-host": "0.0.0.0",
            "dispatcher.rpc-address": "tcp://d.example:6123",
            "resourcemanager.rpc-address": "tcp://r.example:6124",
            "jobmaster.rpc-address": "tcp://j.example:0",
            "taskmanager.rpc-address": "tcp://t.example:0",
        }
    )
    settings = settings_from_config(config)
    found = {
        role: (e.bind, e.advertised)
        for role in ("dispatcher", "resource-manager", "job-master", "task-executor")
        for e in [rpc_endpoints_of(role, settings)]
    }
    assert found == {
        "dispatcher": ("tcp://0.0.0.0:6123", "tcp://d.example:6123"),
        "resource-manager": ("tcp://0.0.0.0:6124", "tcp://r.example:6124"),
        "job-master": ("tcp://0.0.0.0:0", "tcp://j.example:0"),
        "task-executor": ("tcp://0.0.0.0:0", "tcp://t.example:0"),
    }


def test_a_process_told_to_advertise_a_wildcard_refuses_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sparkmill.yaml"
    path.write_text("taskmanager.rpc-address: tcp://0.0.0.0:0\nsecurity.curve.enabled: false\n")
    assert run_service("task-executor", path) == EXIT_CONFIG_ERROR
    err = capsys.readouterr().err
    assert "taskmanager.rpc-address" in err and "rpc.bind-host: 0.0.0.0" in err


def test_a_server_bound_on_every_interface_publishes_the_advertised_address() -> None:
    async def body() -> None:
        ctx = zmq.asyncio.Context()
        server = RpcServer(
            "tcp://0.0.0.0:0",
            advertised_address="tcp://127.0.0.1:0",
            name="test",
            context=ctx,
            security=TransportSecurity.disabled(),
        )
        server.add_servicer(FakeDispatcher())
        address = await server.start()
        rpc = RpcClient(address, caller="unit-test", context=ctx)
        try:
            assert server.bound_address.startswith("tcp://0.0.0.0:")
            assert address == "tcp://127.0.0.1:" + server.bound_address.rpartition(":")[2]
            info = await DispatcherClient(rpc).get_service_info(common_pb2.GetServiceInfoRequest())
            assert info.role == "dispatcher"
        finally:
            await rpc.close()
            await server.stop()
            ctx.destroy(linger=0)

    run(body)


def test_the_metrics_url_names_the_advertised_host() -> None:
    from sparkmill.common.runtime.metrics import MetricsHttpServer

    assert MetricsHttpServer(bytes, "0.0.0.0", 9249, advertised_host="node-1").url == (
        "http://node-1:0/metrics"  # the port is known once bound
    )
    assert MetricsHttpServer(bytes, "10.0.0.5", 9249).url == "http://10.0.0.5:0/metrics"
    settings = settings_from_config(Configuration.from_mapping({"metrics.address": " n.ex "}))
    assert settings.metrics_address == "n.ex"
