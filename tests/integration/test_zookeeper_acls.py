"""ZooKeeper ACLs by role: each role's credential reaches only its own znodes, a client needs
none, and a cluster refuses nodes that someone else created before it first started."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparkmill.common.ha.zookeeper.acl import SERVICE_ROLES
from sparkmill.common.ha.zookeeper.server import ZooKeeperServer, zookeeper_available
from sparkmill.common.rpc.keys import generate_zookeeper_digest
from sparkmill.common.v1 import common_pb2
from sparkmill.local_cluster import LocalCluster
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import ClusterFactory

if TYPE_CHECKING:
    from kazoo.client import KazooClient

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not zookeeper_available(), reason="needs a ZooKeeper installation"),
]


def test_a_dispatcher_refuses_a_squatted_cluster_root(tmp_path: Path) -> None:
    from kazoo.client import KazooClient

    zookeeper = ZooKeeperServer(tmp_path / "zookeeper")
    zookeeper.start()
    try:
        squatter = KazooClient(hosts=zookeeper.address)
        squatter.start(timeout=15)
        try:
            # Before the cluster ever ran: the root exists, open to anyone (world:anyone).
            squatter.ensure_path("/sparkmill/squatted/leader")
        finally:
            squatter.stop()
            squatter.close()
        cluster = LocalCluster(
            tmp_path / "cluster", extra_config={"high-availability.cluster-id": "squatted"}
        )
        cluster.write_config(zookeeper.address)
        log_file = tmp_path / "dispatcher.log"
        with open(log_file, "wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sparkmill",
                    "dispatcher",
                    "--config",
                    str(cluster.config_path),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                code = process.wait(timeout=60)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        text = log_file.read_text()
        assert code == 2, text
        assert "/sparkmill/squatted" in text and "Refusing to use it" in text, text
    finally:
        zookeeper.stop()


def _kazoo(address: str, keys: Path, role: str | None) -> KazooClient:
    """A ZooKeeper client authenticated as ``role``'s digest (None: no credential)."""
    from kazoo.client import KazooClient

    auth = None
    if role is not None:
        auth = [("digest", (keys / "private" / f"zookeeper-{role}.digest").read_text().strip())]
    client = KazooClient(hosts=address, auth_data=auth)
    client.start(timeout=15)
    return client


def test_each_role_reaches_only_its_own_znodes_and_a_job_still_runs(
    cluster_factory: ClusterFactory,
) -> None:
    from kazoo.exceptions import NoAuthError, NotEmptyError

    ha = cluster_factory(task_executors=1, ha=True)
    job_id = ha.client.submit(
        noop_pipeline("held-zk", parallelism=1, sleep_s=6.0).build_job_graph()
    )
    zookeeper, keys = ha.cluster.zookeeper, ha.cluster.keys_dir
    assert zookeeper is not None
    root = "/sparkmill/local"
    graph = f"{root}/jobgraphs/{job_id}"
    job_leader = f"{root}/leader/job-{job_id}"

    services = {role: _kazoo(zookeeper.address, keys, role) for role in SERVICE_ROLES}
    try:
        ours: list[str] = []

        def walk(path: str) -> None:
            # Every node is listed by some role; none lists them all.
            ours.append(path)
            for client in services.values():
                try:
                    children = client.get_children(path)
                except NoAuthError:
                    continue
                for child in children:
                    walk(f"{path}/{child}")
                return
            raise AssertionError(f"no role may list {path}")

        deadline = time.monotonic() + 30
        while services["dispatcher"].exists(f"{job_leader}/connection_info") is None:
            assert time.monotonic() < deadline, "the job's leader was never published"
            time.sleep(0.1)
        walk(root)
        assert graph in ours and f"{job_leader}/connection_info" in ours, ours
        dispatcher = services["dispatcher"]
        dispatcher_info, _ = dispatcher.get(f"{root}/leader/dispatcher/connection_info")
        latch = f"{root}/leader/dispatcher/latch"
        dispatcher_latch = f"{latch}/{dispatcher.get_children(latch)[0]}"
        with pytest.raises(NoAuthError):  # not even the dispatcher's: the RM's election
            dispatcher.set(f"{root}/leader/resource-manager/connection_info", b"hostile")
    finally:
        for client in services.values():
            client.stop()
            client.close()

    public = {
        f"{root}/leader/dispatcher/connection_info",
        f"{root}/leader/resource-manager/connection_info",
        f"{root}/members",
        f"{root}/members/dispatcher",
        f"{root}/members/resource-manager",
    }
    public |= {p for p in ours if p.startswith(f"{root}/members/dispatcher/")}
    public |= {p for p in ours if p.startswith(f"{root}/members/resource-manager/")}
    # A caller with no credential (a client) reads only what every client is told over RPC.
    outsider = _kazoo(zookeeper.address, keys, None)
    try:
        for path in ours:
            if path in public:
                outsider.get(path)
            else:
                with pytest.raises(NoAuthError):
                    outsider.get(path)
            with pytest.raises(NoAuthError):
                outsider.set(path, b"hostile")
            with pytest.raises(NoAuthError):
                outsider.create(f"{path}/hostile", b"x")
    finally:
        outsider.stop()
        outsider.close()

    # A task executor's or a job master's credential (the hosts pipeline code runs next to)
    # can rewrite neither the job-graph store nor the dispatcher's leadership.
    for role in ("task-executor", "job-master"):
        stranger = _kazoo(zookeeper.address, keys, role)
        try:
            for path in (graph, f"{root}/leader/dispatcher/connection_info", dispatcher_latch):
                with pytest.raises(NoAuthError):
                    stranger.set(path, b"hostile")
                with pytest.raises(NoAuthError):
                    stranger.delete(path)
            for parent in (f"{root}/jobgraphs", graph, f"{root}/leader/dispatcher/latch"):
                with pytest.raises(NoAuthError):
                    stranger.create(f"{parent}/hostile", b"x")
            with pytest.raises(NoAuthError):
                stranger.get(graph)
            # What the role's own code reads: the job's leader, the dispatcher's address.
            stranger.get(f"{job_leader}/connection_info")
            if role == "task-executor":
                with pytest.raises(NoAuthError):
                    stranger.create(f"{job_leader}/latch/n_9999999999", b"", ephemeral=True)
        finally:
            stranger.stop()
            stranger.close()

    # A job master may delete a finished job's election under leader/, and ZooKeeper keeps
    # it from deleting the dispatcher's (never without its latch and epoch).
    stranger = _kazoo(zookeeper.address, keys, "job-master")
    try:
        with pytest.raises(NotEmptyError):
            stranger.delete(f"{root}/leader/dispatcher")
    finally:
        stranger.stop()
        stranger.close()

    # Nothing changed: the job finishes, and the dispatcher's leadership is as it was.
    assert ha.client.wait(job_id, timeout=90).status == common_pb2.FINISHED
    dispatcher = _kazoo(zookeeper.address, keys, "dispatcher")
    try:
        assert dispatcher.get(f"{root}/leader/dispatcher/connection_info")[0] == dispatcher_info
        # Its outcome recorded, the job's JobMaster removed the job's election: a cluster
        # that runs jobs for a year does not keep a year of elections in ZooKeeper.
        deadline = time.monotonic() + 30
        while dispatcher.exists(job_leader) is not None:
            assert time.monotonic() < deadline, (
                f"{job_leader} is still there: {dispatcher.get_children(job_leader)}"
            )
            time.sleep(0.2)
        leaders = sorted(dispatcher.get_children(f"{root}/leader"))
        assert leaders == ["dispatcher", "resource-manager"], leaders
    finally:
        dispatcher.stop()
        dispatcher.close()


def test_one_shared_digest_still_runs_a_job_with_a_warning(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    """The former layout (no identities file): accepted, every service says what to do."""
    shared = generate_zookeeper_digest(tmp_path / "shared-keys")
    assert shared is not None
    ha = cluster_factory(
        task_executors=1,
        ha=True,
        extra_config={
            "security.zookeeper.digest-file": str(shared),
            "security.zookeeper.identities-file": "",
        },
    )
    job_id = ha.client.submit(noop_pipeline("shared-zk", parallelism=1).build_job_graph())
    assert ha.client.wait(job_id, timeout=90).status == common_pb2.FINISHED
    for process in ha.cluster.processes:
        if process.role == "zookeeper":
            continue
        assert "shares one digest identity" in Path(process.log_file).read_text(), process
