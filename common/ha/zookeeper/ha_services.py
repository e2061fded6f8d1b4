"""``high-availability.mode: zookeeper``: elections, retrieval and stores on one kazoo session.

ZooKeeper layout under ``<path.root>/<cluster-id>``::

    leader/dispatcher/{latch/, connection_info}
    leader/resource-manager/{latch/, connection_info}
    leader/job-<job id>/{latch/, connection_info}     one election per job among job masters,
                                                      removed once the job's outcome is recorded
    jobgraphs/<job id>/locks/<owner>                   the submitted-job-graph store
    members/<role>/<member id>                         each service's announcement

Who may read and write each of them: :mod:`.acl` (``ROLE_POLICY``) and docs/security.md.

Large data (job graphs, job results) lives in ``high-availability.storageDir``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

from kazoo.exceptions import KazooException, NoAuthError, NodeExistsError, NoNodeError

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import UnavailableError
from sparkmill.common.core.ids import JobID, short
from sparkmill.common.core.zookeeper_state import ZooKeeperConnectionState
from sparkmill.common.ha.job_stores import JobGraphStore, JobResultStore
from sparkmill.common.ha.leader import LeaderElectionService, LeaderInfo, LeaderRetrievalService
from sparkmill.common.ha.progress_log import FileJobProgressStore, JobProgressStore
from sparkmill.common.ha.services import HighAvailabilityServices
from sparkmill.common.ha.zookeeper.acl import (
    STRUCTURE,
    acl_text,
    may_read,
    narrower_acl,
    zookeeper_auth_from_config,
)
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
    def __init__(
        self, settings: ClusterSettings, config: Configuration, role: str = "client"
    ) -> None:
        root = config.get(opt.HA_ZOOKEEPER_ROOT).rstrip("/")
        cluster = config.get(opt.HA_CLUSTER_ID).strip("/")
        self.connection = ZooKeeperConnection(
            config.get(opt.HA_ZOOKEEPER_QUORUM),
            f"{root}/{cluster}",
            session_timeout_s=config.get(opt.HA_ZOOKEEPER_SESSION_TIMEOUT),
            connection_timeout_s=config.get(opt.HA_ZOOKEEPER_CONNECTION_TIMEOUT),
            auth=zookeeper_auth_from_config(config, role),
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
            raise UnavailableError(
                f"job {short(job_id)}: its leader cannot be read, ZooKeeper is not connected"
            )
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
            raise UnavailableError(
                f"job {short(job_id)}: its leader cannot be read from ZooKeeper ({exc})"
            ) from exc
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
            acl_of=self.connection.acl,
            ensure_path=self.connection.ensure_path,
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
            parent = path.rsplit("/", 1)[0]
            if self.connection.auth.role == "task-executor":
                # Per role, a task executor may not create structure: its members node is made
                # by the first other service; wait for it rather than fail the announcement.
                while client.exists(parent) is None and self._announcement is not None:
                    time.sleep(1.0)
            else:
                self.connection.ensure_path(parent)
            try:
                client.create(path, info, ephemeral=True, acl=self.connection.acl(path))
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
                try:
                    names = client.get_children(f"{root}/{role}")
                except NoAuthError:
                    continue  # per role: a client sees the dispatchers and resource managers
                for member in names:
                    try:
                        data, _ = client.get(f"{root}/{role}/{member}")
                    except (NoNodeError, NoAuthError):
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
        """The cluster's structural nodes must carry exactly the ACL this cluster gives them.

        ZooKeeper does not inherit ACLs: a node someone created before the cluster first
        started (a squatted root, or ``leader``) keeps theirs, and whoever may write it can
        delete or plant the election and job nodes beneath. Refusing to run on such a tree
        is the only safe answer (the operator removes it or picks another root). Per role,
        the services that may create structure create all of it here, so that no other role's
        credential finds a gap to fill first."""
        auth = self.connection.auth
        if not auth.auth_data:
            return None  # open mode: nothing is protected, and the service says so already
        client = self.connection.client
        assert client is not None
        root = self.connection.root
        if auth.per_role:
            paths = [self.connection.path(rel) if rel else root for rel in STRUCTURE]
            for path in paths:  # parents first: nothing is created under a foreign node
                problem = self._foreign_acl(path)
                if problem is not None:
                    return problem
                if auth.role != "task-executor" and client.exists(path) is None:
                    with contextlib.suppress(NoAuthError):  # another role's node: theirs to make
                        self.connection.ensure_path(path)
        else:
            self.connection.ensure_path(root)  # created with our ACL when it does not exist
            try:
                children = client.get_children(root)
            except NoNodeError:
                children = []
            paths = [root, *(f"{root}/{child}" for child in sorted(children))]
        for path in paths:
            problem = self._foreign_acl(path)
            if problem is not None:
                return problem
        return None

    def _foreign_acl(self, path: str) -> str | None:
        """Why ``path`` is not this cluster's (its ACL is not the one its path gets), or None."""
        client = self.connection.client
        assert client is not None
        # ZooKeeper shows a digest id as 'user:x' to a caller without ADMIN on the node, so the
        # ids are compared by user; that this role's own entry is really ours is proven below
        # by reading the node with our credential.
        expected = sorted(acl_text(a, masked=True) for a in self.connection.acl(path))
        ours_to_read = may_read(self.connection.auth.role, self.connection.relative(path))
        try:
            acls, _ = client.get_acls(path)
            if ours_to_read:
                client.get_children(path)
        except NoNodeError:
            return None
        except NoAuthError:
            # Hidden from us: when this role should be able to read it, someone else's ACL is
            # on it; otherwise the roles that read it check it.
            if not ours_to_read:
                return None
            acls = []
        found = sorted(acl_text(a, masked=True) for a in acls)
        if found == expected:
            return None
        if narrower_acl(acls, self.connection.acl(path)):
            # An earlier version's node, made before a grant was added (job masters deleting
            # a finished job's election under ``leader``): safe, and only that grant's work is
            # left undone.
            log.info(
                "ZooKeeper node %s keeps the narrower ACL an earlier sparkmill gave it (%s; "
                "this version gives %s): what needs the difference is skipped",
                path,
                ", ".join(found),
                ", ".join(expected),
            )
            return None
        return (
            f"ZooKeeper node {path} has the ACL {', '.join(found) or '(hidden from us)'}, not "
            f"this cluster's ({', '.join(expected)}): it was created by someone else, or by "
            "this cluster with other ZooKeeper credentials (another "
            "security.zookeeper.digest-file, or before security.zookeeper.identities-file was "
            f"set). Refusing to use it: remove it (zkCli: deleteall {path}) or choose another "
            "high-availability.zookeeper.path.root / high-availability.cluster-id"
        )

    async def close(self) -> None:
        await self.connection.close()
