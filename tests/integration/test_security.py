"""Only the cluster's own keys get in; bad and hostile input changes nothing (real processes,
CurveZMQ on as ``LocalCluster`` sets it up by default)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from sparkmill.client import ClusterClient
from sparkmill.common.core.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    PermissionDeniedError,
    RpcError,
    UnavailableError,
)
from sparkmill.common.rpc.client import RpcClient
from sparkmill.common.rpc.keys import generate_key
from sparkmill.common.rpc.security import CurveKeyPair, TransportSecurity
from sparkmill.common.v1 import common_pb2, dispatcher_pb2, jobs_pb2, resource_manager_pb2
from sparkmill.common.v1.gateways import DispatcherClient, ResourceManagerClient
from sparkmill.local_cluster import KEYS_DIR, LocalCluster
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import ClusterFactory, RunningCluster, eventually

T = TypeVar("T")


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    from tests.integration.conftest import start_local_cluster

    directory = tmp_path_factory.mktemp("secure")
    # Another host's task-executor key, admitted with the others (see the resource-id test).
    generate_key(directory / KEYS_DIR, "task-executor", "evil")
    running = RunningCluster(start_local_cluster(directory, task_executors=2, slots=2))
    yield running
    running.close()


def stranger_security(cluster: LocalCluster, tmp: Path, role: str = "client") -> TransportSecurity:
    """An attacker who knows every public key (they are public) but holds no admitted key."""
    from sparkmill.common.rpc.keys import load_secret_key

    made = generate_key(tmp / "stranger", role)
    assert made is not None
    public, secret = load_secret_key(made[1], "test")
    return TransportSecurity(
        True, CurveKeyPair(public, secret), cluster.transport_security().server_public
    )


def call(
    cluster: LocalCluster,
    address: str,
    security: TransportSecurity,
    body: Callable[[RpcClient], Awaitable[T]],
) -> T:
    async def run() -> T:
        rpc = RpcClient(address, security=security)
        try:
            return await body(rpc)
        finally:
            await rpc.close()

    return asyncio.run(run())


def session_of(cluster: LocalCluster, address: str, role: str, as_role: str) -> str:
    async def ask(rpc: RpcClient) -> str:
        request = common_pb2.GetLeaderSessionRequest()
        gateway = DispatcherClient(rpc) if role == "dispatcher" else ResourceManagerClient(rpc)
        return (await gateway.get_leader_session(request)).session_id

    return str(call(cluster, address, cluster.transport_security(as_role), ask))


def test_a_client_without_an_admitted_key_cannot_list_submit_or_cancel(
    secure_cluster: RunningCluster, tmp_path: Path
) -> None:
    cluster, client = secure_cluster.cluster, secure_cluster.client
    job_id = client.submit(noop_pipeline("held", parallelism=1, sleep_s=3.0).build_job_graph())
    address = client.cluster_status().dispatcher.address
    session = session_of(cluster, address, "dispatcher", "client")
    graph = noop_pipeline("quick", parallelism=1).build_job_graph()
    outsiders = {
        "stranger key": stranger_security(cluster, tmp_path),
        "no CURVE at all": TransportSecurity.disabled(),
    }
    expected = {"stranger key": "not admitted", "no CURVE at all": "security mechanisms"}
    for label, security in outsiders.items():
        for method in ("list", "submit", "cancel", "session"):

            async def body(rpc: RpcClient, method: str = method) -> object:
                d = DispatcherClient(rpc, fencing_token=session)
                if method == "list":
                    return await d.list_jobs(dispatcher_pb2.ListJobsRequest(), timeout=10)
                if method == "submit":
                    request = dispatcher_pb2.SubmitJobRequest(job_graph=_proto(graph))
                    return await d.submit_job(request, timeout=10)
                if method == "cancel":
                    request_ = dispatcher_pb2.CancelJobRequest(job_id=job_id)
                    return await d.cancel_job(request_, timeout=10)
                return await d.get_leader_session(common_pb2.GetLeaderSessionRequest(), timeout=10)

            # No connection, and the refused handshake is reported at once: no deadline waited out.
            started = time.monotonic()
            with pytest.raises(PermissionDeniedError, match=expected[label]):
                call(cluster, address, security, body)
            assert time.monotonic() - started < 5.0
        print(label, "refused")
    # The stranger's job was never submitted and the real one was not cancelled.
    jobs = {j.job_id: j.status for j in client.list_jobs()}
    assert graph.job_id not in jobs
    assert client.wait(job_id, timeout=60).status == common_pb2.FINISHED


def _proto(graph: Any) -> common_pb2.JobGraph:
    from sparkmill.common.jobgraph.codec import job_graph_to_proto

    return job_graph_to_proto(graph)


def test_a_task_executor_key_cannot_report_job_status_or_act_as_job_master(
    secure_cluster: RunningCluster,
) -> None:
    cluster, client = secure_cluster.cluster, secure_cluster.client
    job_id = client.submit(noop_pipeline("held", parallelism=1, sleep_s=3.0).build_job_graph())
    view = client.cluster_status()
    dispatcher, rm = view.dispatcher.address, view.resource_manager.resource_manager.address
    # GetLeaderSession is open to every member, so the forger even holds the right tokens.
    d_session = session_of(cluster, dispatcher, "dispatcher", "task-executor")
    rm_session = session_of(cluster, rm, "resource-manager", "task-executor")
    executor = cluster.transport_security("task-executor")
    finished = dispatcher_pb2.JobStatusReport(
        job_id=job_id, status=common_pb2.FINISHED, job_master_session_id="f" * 32
    )

    async def forge(rpc: RpcClient) -> list[BaseException]:
        d = DispatcherClient(rpc, fencing_token=d_session)
        refused: list[BaseException] = []
        for attempt in (
            d.report_job_status(finished),
            d.register_job_master_process(
                dispatcher_pb2.RegisterJobMasterProcessRequest(
                    process_id="evil", address="tcp://127.0.0.1:9"
                )
            ),
        ):
            try:
                await attempt
            except PermissionDeniedError as exc:
                refused.append(exc)
        return refused

    refused = call(cluster, dispatcher, executor, forge)
    assert len(refused) == 2, refused
    assert "role 'task-executor' may not call it" in str(refused[0])

    async def register_job_master(rpc: RpcClient) -> BaseException | None:
        try:
            await ResourceManagerClient(rpc, fencing_token=rm_session).register_job_master(
                resource_manager_pb2.RegisterJobMasterRequest(
                    job_id=job_id,
                    job_master_address="tcp://127.0.0.1:9",
                    job_master_session_id="f" * 32,
                )
            )
        except PermissionDeniedError as exc:
            return exc
        return None

    assert isinstance(call(cluster, rm, executor, register_job_master), PermissionDeniedError)

    # Even a job-master key cannot end someone else's job with a forged (unfenced) report:
    # naming no registered process, it is not heard at all.
    async def forged_by_job_master(rpc: RpcClient) -> BaseException | None:
        try:
            await DispatcherClient(rpc, fencing_token=d_session).report_job_status(finished)
        except RpcError as exc:
            return exc
        return None

    outcome = call(
        cluster, dispatcher, cluster.transport_security("job-master"), forged_by_job_master
    )
    assert isinstance(outcome, UnavailableError), outcome
    assert client.wait(job_id, timeout=60).status == common_pb2.FINISHED
    assert client.result(job_id).details.restarts == 0


def test_a_job_master_key_cannot_take_over_a_running_job_with_an_invented_session(
    secure_cluster: RunningCluster,
) -> None:
    """The attack: report the job RUNNING under an invented session (as a new JobMaster
    would), then FINISHED under it with forged rows. Both are refused; the job ends with its
    own result."""
    cluster, client = secure_cluster.cluster, secure_cluster.client
    job_id = client.submit(noop_pipeline("victim", parallelism=1, sleep_s=4.0).build_job_graph())
    view = client.cluster_status()
    dispatcher = view.dispatcher.address
    process_id = view.job_master_process_infos[0].id  # public: GetClusterServices lists it
    d_session = session_of(cluster, dispatcher, "dispatcher", "job-master")
    invented = "e" * 32
    running = dispatcher_pb2.JobStatusReport(
        job_id=job_id,
        status=common_pb2.RUNNING,
        job_master_session_id=invented,
        job_master_process_id=process_id,
        job_master_address="tcp://127.0.0.1:9",
    )
    forged = jobs_pb2.JobResult(job_id=job_id, status=common_pb2.FINISHED)
    forged.accumulators["collect"] = b"forged rows"
    finished = dispatcher_pb2.JobStatusReport(
        job_id=job_id,
        status=common_pb2.FINISHED,
        job_master_session_id=invented,
        job_master_process_id=process_id,
        result=forged,
    )

    async def forge(rpc: RpcClient) -> list[BaseException | None]:
        d = DispatcherClient(rpc, fencing_token=d_session)
        outcomes: list[BaseException | None] = []
        for report in (running, finished):
            try:
                await d.report_job_status(report)
                outcomes.append(None)
            except RpcError as exc:
                outcomes.append(exc)
        return outcomes

    outcomes = call(cluster, dispatcher, cluster.transport_security("job-master"), forge)
    assert all(isinstance(o, FailedPreconditionError) for o in outcomes), outcomes
    result = client.wait(job_id, timeout=60)
    assert result.status == common_pb2.FINISHED
    assert b"forged rows" not in result.SerializeToString()


def test_a_task_executor_key_acts_only_for_its_own_resource_id(
    secure_cluster: RunningCluster,
) -> None:
    """A second task-executor key (another host's, say) may neither disconnect a registered
    task executor at the resource manager nor take its resource id over."""
    cluster, client = secure_cluster.cluster, secure_cluster.client
    rm = client.cluster_status().resource_manager.resource_manager.address
    victim = client.cluster_status().resource_manager.task_executors[0].resource_id
    rm_session = session_of(cluster, rm, "resource-manager", "task-executor")
    from sparkmill.common.rpc.keys import load_secret_key

    public, secret = load_secret_key(
        cluster.keys_dir / "private" / "task-executor-evil.key_secret", "test"
    )
    other_host = TransportSecurity(
        True, CurveKeyPair(public, secret), cluster.transport_security().server_public
    )

    async def evict(rpc: RpcClient) -> list[BaseException | None]:
        gateway = ResourceManagerClient(rpc, fencing_token=rm_session)
        outcomes: list[BaseException | None] = []
        for attempt in (
            gateway.disconnect_task_executor(
                resource_manager_pb2.DisconnectTaskExecutorRequest(
                    resource_id=victim, cause="evicted"
                )
            ),
            gateway.register_task_executor(
                resource_manager_pb2.RegisterTaskExecutorRequest(
                    resource_id=victim, address="tcp://127.0.0.1:9", number_slots=1
                )
            ),
        ):
            try:
                await attempt
                outcomes.append(None)
            except RpcError as exc:
                outcomes.append(exc)
        return outcomes

    outcomes = call(cluster, rm, other_host, evict)
    assert all(isinstance(o, PermissionDeniedError) for o in outcomes), outcomes
    registered = {te.resource_id for te in client.cluster_status().resource_manager.task_executors}
    assert victim in registered


def test_a_task_executor_without_an_admitted_key_cannot_register(
    secure_cluster: RunningCluster, tmp_path: Path
) -> None:
    cluster, client = secure_cluster.cluster, secure_cluster.client
    before = {te.resource_id for te in client.cluster_status().resource_manager.task_executors}
    made = generate_key(tmp_path / "stranger", "task-executor")
    assert made is not None
    config = yaml.safe_load(cluster.config_path.read_text())
    # The strongest outsider: it even holds the server key, but no admitted member key.
    config["security.curve.secret-key-file"] = str(made[1])
    config["taskmanager.resource-id"] = "intruder"
    config["taskmanager.registration.timeout"] = "8 s"
    path = tmp_path / "intruder.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp_path / "intruder.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkmill", "task-executor", "--config", str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # It gives up (exit code 1) without ever being registered.
        assert proc.wait(timeout=60) == 1, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    after = {te.resource_id for te in client.cluster_status().resource_manager.task_executors}
    assert after == before and "intruder" not in after


def _service_exit(role: str, config_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkmill", role, "--config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_secret_files_with_loose_permissions_are_refused_at_start_up(
    secure_cluster: RunningCluster, tmp_path: Path
) -> None:
    cluster = secure_cluster.cluster
    shutil.copytree(cluster.keys_dir, tmp_path / "keys")
    config = yaml.safe_load(cluster.config_path.read_text())
    for key in ("secret-key-file", "server-secret-key-file", "public-keys-dir"):
        config[f"security.curve.{key}"] = config[f"security.curve.{key}"].replace(
            str(cluster.keys_dir), str(tmp_path / "keys")
        )
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    loose = tmp_path / "keys" / "private" / "resource-manager.key_secret"
    loose.chmod(0o644)
    started = time.monotonic()
    result = _service_exit("resource-manager", path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"chmod 600 {loose}" in result.stderr and "mode 0644" in result.stderr
    assert time.monotonic() - started < 30
    loose.chmod(0o600)
    (tmp_path / "keys" / "private" / "server.key_secret").chmod(0o640)
    result = _service_exit("task-executor", path)
    assert result.returncode == 2 and "server-secret-key-file" in result.stderr
    # The CLI refuses a loose client key the same way.
    (tmp_path / "keys" / "private" / "client.key_secret").chmod(0o604)
    cli = subprocess.run(
        [sys.executable, "-m", "sparkmill", "--config", str(path), "jobs", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 2 and "chmod 600" in cli.stderr


def _says_security_is_off(log: Path) -> Callable[[], bool]:
    return lambda: "SECURITY IS OFF" in log.read_text()


def test_a_lab_cluster_without_security_says_so_everywhere(cluster_factory: ClusterFactory) -> None:
    lab = cluster_factory(task_executors=1, extra_config={"security.curve.enabled": False})
    for proc in lab.cluster.processes:
        eventually(_says_security_is_off(Path(proc.log_file)))
    status = subprocess.run(
        [sys.executable, "-m", "sparkmill", "--config", str(lab.config_path), "cluster", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert "SECURITY IS OFF" in status.stderr and "security: OFF" in status.stdout


def test_cluster_status_of_a_secure_cluster_says_curve_is_on(
    secure_cluster: RunningCluster,
) -> None:
    status = subprocess.run(
        [
            *(sys.executable, "-m", "sparkmill", "--config", str(secure_cluster.config_path)),
            *("cluster", "status", "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    import json

    view = json.loads(status.stdout)
    assert view["security"] == {"curve": True}
    assert "SECURITY IS OFF" not in status.stderr
    for log in secure_cluster.cluster.processes:
        assert "SECURITY IS OFF" not in Path(log.log_file).read_text()


def test_the_client_finds_a_restarted_standalone_dispatcher_by_its_new_session(
    cluster_factory: ClusterFactory,
) -> None:
    running = cluster_factory(task_executors=1)
    cluster, client = running.cluster, running.client
    address = client.cluster_status().dispatcher.address
    first = session_of(cluster, address, "dispatcher", "client")
    assert first != "0" * 32
    [old] = cluster.find("dispatcher")
    cluster.kill(old)
    cluster.processes.remove(old)
    cluster.add_process("dispatcher")
    second = eventually(
        lambda: _maybe_session(cluster, address),
        timeout=60,
    )
    assert second != first  # a new leader, a new random fencing token
    with ClusterClient.from_config_file(cluster.config_path) as fresh:
        eventually(lambda: fresh.cluster_status(timeout=5).job_master_processes >= 1, timeout=60)
        job_id = fresh.submit(noop_pipeline("quick", parallelism=1).build_job_graph())
        assert fresh.wait(job_id, timeout=90).status == common_pb2.FINISHED


def _maybe_session(cluster: LocalCluster, address: str) -> str:
    try:
        return session_of(cluster, address, "dispatcher", "client")
    except (DeadlineExceededError, UnavailableError):
        return ""
