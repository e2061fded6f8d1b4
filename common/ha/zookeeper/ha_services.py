"""``high-availability.mode: zookeeper``: elections, retrieval and stores on one kazoo session.

ZooKeeper layout under ``<path.root>/<cluster-id>``::

    leader/dispatcher/{latch/, connection_info}
    leader/resource-manager/{latch/, connection_info}
    leader/job-<job id>/{latch/, connection_info}     one election per job among job masters
    jobgraphs/<job id>/locks/<owner>                   the submitted-job-graph store

Large data (job graphs, job results) lives in ``high-availability.storageDir``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.ids import JobID
from sparkmill.common.core.zookeeper_state import ZooKeeperConnectionState
from sparkmill.common.ha.job_stores import JobGraphStore, JobResultStore
from sparkmill.common.ha.leader import LeaderElectionService, LeaderInfo, LeaderRetrievalService
from sparkmill.common.ha.progress_log import FileJobProgressStore, JobProgressStore
from sparkmill.common.ha.services import HighAvailabilityServices
from sparkmill.common.ha.zookeeper.acl import acl_text, zookeeper_auth_from_config
from sparkmill.common.ha.zookeeper.connection import ZooKeeperConnection
from sparkmill.common.ha.zookeeper.election import (
    ZooKeeperLeaderElectionService,
    ZooKeeperLeaderRetrievalService,
    latch_members,
    parse_leader_info,
)
from sparkmill.common.ha.zookeeper.stores import FileSystemJobResultStore, ZooKeeperJobGraphStore
from sparkmill.common.runtime.settings import ClusterSettings

log = logging.getLogger(__name__)


class ZooKeeperHaServices(HighAvailabilityServices):
    def __init__(self, settings: ClusterSettings, config: Configuration) -> None:
        root = config.get(opt.HA_ZOOKEEPER_ROOT).rstrip("/")
        cluster = config.get(opt.HA_CLUSTER_ID).strip("/")
        self.connection = ZooKeeperConnection(
            config.get(opt.HA_ZOOKEEPER_QUORUM),
            f"{root}/{cluster}",
            session_timeout_s=config.get(opt.HA_ZOOKEEPER_SESSION_TIMEOUT),
            connection_timeout_s=config.get(opt.HA_ZOOKEEPER_CONNECTION_TIMEOUT),
            auth=zookeeper_auth_from_config(config),
        )
        self.tolerate_suspended = config.get(opt.HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS)
        self.storage_dir = Path(config.get(opt.HA_STORAGE_DIR))
        self._announcement: tuple[str, str, bytes] | None = None

    def _election(self, role: str) -> LeaderElectionService:
        return ZooKeeperLeaderElectionService(
            self.connection,
            self.connection.path("leader", role),
            tolerate_suspended=self.tolerate_suspended,
            name=role,
        )

    def _retrieval(self, role: str) -> LeaderRetrievalService:
        return ZooKeeperLeaderRetrievalService(
            self.connection, self.connection.path("leader", role), role
        )

    def dispatcher_election(self) -> LeaderElectionService:
        return self._election("dispatcher")

    def resource_manager_election(self) -> LeaderElectionService:
        return self._election("resource-manager")

    def job_master_election(self, job_id: JobID) -> LeaderElectionService:
        return self._election(f"job-{job_id}")

    def dispatcher_retrieval(self) -> LeaderRetrievalService:
        return self._retrieval("dispatcher")

    def resource_manager_retrieval(self) -> LeaderRetrievalService:
        return self._retrieval("resource-manager")

    def job_master_retrieval(self, job_id: JobID) -> LeaderRetrievalService:
        return self._retrieval(f"job-{job_id}")

    def job_leader_retrieval_factory(self) -> Callable[[JobID], LeaderRetrievalService] | None:
        return self.job_master_retrieval

    async def job_leader(self, job_id: JobID) -> LeaderInfo | None:
        client = self.connection.client
        if client is None or not self.connection.connected:
            return None
        path = self.connection.path("leader", f"job-{job_id}", "connection_info")

        def read() -> bytes | None:
            client.sync(path)  # catch the server we talk to up with the leader first
            try:
                data, _ = client.get(path)
            except NoNodeError:
                return None
            return bytes(data) if data else None

        try:
            data = await self.connection.call(read)
        except KazooException as exc:
            log.warning("job %s: cannot read its leader from ZooKeeper: %s", job_id, exc)
            return None
        return parse_leader_info(data) if data else None

    async def job_master_contenders(self, job_id: JobID) -> int | None:
        client = self.connection.client
        if client is None or not self.connection.connected:
            return None
        latch = self.connection.path("leader", f"job-{job_id}", "latch")

        def count() -> int:
            # A read is served by the server we are connected to: catch it up with the leader
            # first, so a latch node created a moment ago elsewhere is seen.
            client.sync(latch)
            try:
                return len(latch_members(client.get_children(latch)))
            except NoNodeError:
                return 0  # no JobMaster of this job ever contended

        try:
            return await self.connection.call(count)
        except Exception as exc:  # unknown: the caller keeps waiting, as without the question
            log.info("could not count the contenders for job %s: %s", job_id[:8], exc)
            return None

    def job_graph_store(self, owner: str) -> JobGraphStore:
        client = self.connection.client
        if client is None:
            raise RuntimeError("ZooKeeperHaServices.start() must run before the stores are used")
        return ZooKeeperJobGraphStore(
            client,
            self.connection.path("jobgraphs"),
            self.storage_dir,
            owner,
            retry_deadline_s=self.connection.session_timeout_s,
        )

    def job_result_store(self) -> JobResultStore:
        return FileSystemJobResultStore(self.storage_dir)

    def job_progress_store(self) -> JobProgressStore:
        return FileJobProgressStore(self.storage_dir / "job-progress")

    async def announce(self, role: str, member_id: str, info: bytes) -> None:
        self._announcement = (role, member_id, info)
        self.connection.add_listener(self._on_state)
        await self.connection.wait_connected(f"announcing this {role}")
        await self._announce()

    def _on_state(self, state: ZooKeeperConnectionState) -> None:
        if (
            state is ZooKeeperConnectionState.CONNECTED
        ):  # a new session after LOST has no ephemeral node of ours
            asyncio.get_running_loop().create_task(self._announce())

    async def _announce(self) -> None:
        if self._announcement is None or self.connection.client is None:
            return
        role, member_id, info = self._announcement
        client = self.connection.client
        path = self.connection.path("members", role, member_id)

        def create() -> None:
            try:
                client.create(path, info, ephemeral=True, makepath=True)
            except NodeExistsError:
                client.set(path, info)

        try:
            await self.connection.call(create)
        except Exception as exc:  # retried on the next reconnect
            log.warning("could not announce %s %s in ZooKeeper: %s", role, member_id[:8], exc)

    async def members(self) -> dict[str, list[bytes]]:
        await self.connection.wait_connected("listing cluster members")
        client = self.connection.client
        assert client is not None
        root = self.connection.path("members")

        def read() -> dict[str, list[bytes]]:
            found: dict[str, list[bytes]] = {}
            try:
                roles = client.get_children(root)
            except NoNodeError:
                return found
            for role in roles:
                for member in client.get_children(f"{root}/{role}"):
                    try:
                        data, _ = client.get(f"{root}/{role}/{member}")
                    except NoNodeError:
                        continue
                    found.setdefault(role, []).append(data)
            return found

        return await self.connection.call(read)

    async def start(self) -> None:
        await self.connection.ensure_started()

    async def verify(self) -> str | None:
        await self.connection.wait_connected("checking the ACLs of the cluster's znodes")
        return await self.connection.call(self._foreign_acls)

    def _foreign_acls(self) -> str | None:
        """The cluster's root and its first level must carry exactly this cluster's ACL.

        ZooKeeper does not inherit ACLs: a node someone created before the cluster first
        started (a squatted root, or ``leader``) keeps theirs, and whoever may write it can
        delete or plant the election and job nodes beneath. Refusing to run on such a tree
        is the only safe answer (the operator removes it or picks another root)."""
        auth = self.connection.auth
        if not auth.auth_data:
            return None  # open mode: nothing is protected, and the service says so already
        client = self.connection.client
        assert client is not None
        root = self.connection.root
        client.ensure_path(root)  # created with our ACL when it does not exist yet
        expected = sorted(acl_text(a) for a in auth.default_acl)
        try:
            children = client.get_children(root)
        except NoNodeError:
            children = []
        for path in [root, *(f"{root}/{child}" for child in sorted(children))]:
            try:
                acls, _ = client.get_acls(path)
            except NoNodeError:
                continue
            found = sorted(acl_text(a) for a in acls)
            if found != expected:
                return (
                    f"ZooKeeper node {path} has the ACL {', '.join(found) or 'none'}, not this "
                    f"cluster's ({', '.join(expected)}): it was created by someone else (or "
                    "by a cluster with another security.zookeeper.digest-file). Refusing to "
                    f"use it: remove it (zkCli: deleteall {path}) or choose another "
                    "high-availability.zookeeper.path.root / high-availability.cluster-id"
                )
        return None

    async def close(self) -> None:
        await self.connection.close()
