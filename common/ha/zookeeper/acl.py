"""ZooKeeper digest authentication, and the ACL of every znode sparkmill creates.

Three modes, chosen by the configuration:

* **per role** (``security.zookeeper.identities-file`` set): each service authenticates as its
  role's digest user (``security.zookeeper.digest-file``, ``{role}`` replaced), and every node
  gets the ACL :func:`role_acl_for` gives its path, granting each role only what that role's
  code does there (see :data:`ROLE_POLICY` and docs/security.md). A node's ACL depends only on
  its path, never on who created it, so a standby of any role finds what it expects. Clients
  hold no ZooKeeper credential: what they read (the dispatcher's and the resource manager's
  published leader, their member announcements) is readable by anyone, and is exactly what
  every client learns over RPC anyway.
* **one shared digest** (only the digest file set): the former layout, every process the same
  user with all permissions; kept so that an existing cluster still starts, with a warning.
* **open** (neither): ``world:anyone`` everywhere, with a warning.

ZooKeeper checks a node's own ACL only (never its parents'), and does not inherit ACLs: every
node, its ancestors included, is therefore created with an explicit ACL (:func:`ensure_path`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Permissions, make_acl, make_digest_acl

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.rpc.keys import read_digest, read_zookeeper_identities

log = logging.getLogger(__name__)

SERVICE_ROLES = ("dispatcher", "resource-manager", "job-master", "task-executor")
WORLD = "world"
R, W, C, D = Permissions.READ, Permissions.WRITE, Permissions.CREATE, Permissions.DELETE
_CONTAINER = R | C  # may list it and add children (its children carry their own ACLs)

# (path pattern relative to the cluster's root, {grantee: permissions}); the first match wins.
# ``{own}`` is the role an election or announcement belongs to (``leader/dispatcher`` ->
# dispatcher, ``leader/job-*`` -> job-master, ``members/<role>`` -> that role).
ROLE_POLICY: tuple[tuple[str, dict[str, int]], ...] = (
    # The root and the first level: the services that start elections or stores add children.
    ("", {"dispatcher": _CONTAINER, "resource-manager": _CONTAINER, "job-master": _CONTAINER,
          "task-executor": R}),
    # Job masters also delete a finished job's election (``leader/job-*``); a node with
    # children cannot be deleted, and the roles' elections always have theirs.
    ("leader", {"dispatcher": _CONTAINER, "resource-manager": _CONTAINER,
                "job-master": R | C | D, "task-executor": R}),
    # One election per role or job: only its own role contends, publishes and cleans up.
    ("leader/*/latch", {"{own}": R | C | D, "{latch-readers}": R}),
    ("leader/*/latch/*", {"{own}": R | W}),
    # The published leader: anyone for the dispatcher and resource manager (clients find them
    # there), the services that talk to a job's leader for a job.
    ("leader/*/connection_info", {"{own}": R | W | D, "{info-readers}": R}),
    ("leader/*/epoch", {"{own}": R | W}),
    ("leader/*", {"{own}": R | C | D}),
    # The submitted-job-graph store: the dispatcher's alone (job masters get graphs over RPC).
    ("jobgraphs", {"dispatcher": R | C | D}),
    ("jobgraphs/*", {"dispatcher": R | W | C | D}),
    ("jobgraphs/*/*", {"dispatcher": R | W | C | D}),
    ("jobgraphs/*/*/*", {"dispatcher": R | W | C | D}),
    # Member announcements: each role its own; the dispatcher lists them all (REST overview),
    # clients those of the dispatchers and resource managers (cluster status).
    ("members", {"dispatcher": _CONTAINER, "resource-manager": _CONTAINER,
                 "job-master": _CONTAINER, "task-executor": R, WORLD: R}),
    ("members/*", {"{own}": R | C | D, "dispatcher": R, "{member-readers}": R}),
    ("members/*/*", {"{own}": R | W | D, "dispatcher": R, "{member-readers}": R}),
)  # fmt: skip
PUBLIC_LEADERS = ("dispatcher", "resource-manager")
"""Roles whose leader address and member announcements anyone may read."""

STRUCTURE = (
    "",
    "leader",
    "leader/dispatcher",
    "leader/dispatcher/latch",
    "leader/resource-manager",
    "leader/resource-manager/latch",
    "jobgraphs",
    "members",
    *(f"members/{role}" for role in SERVICE_ROLES),
)
"""Nodes whose ACL every service checks at start (and the structural roles create): whoever
could write one of them before the cluster first ran could plant elections or job graphs."""


def _own_role(relative: str) -> str:
    parts = relative.split("/")
    if len(parts) < 2:
        return ""
    if parts[0] == "leader":
        return "job-master" if parts[1].startswith("job-") else parts[1]
    return parts[1] if parts[0] == "members" else ""


def role_grants(relative: str) -> dict[str, int]:
    """Who may do what on the node at ``relative`` (below the cluster's root): role or
    ``world`` -> ZooKeeper permission bits. Nothing matches -> the dispatcher alone."""
    own = _own_role(relative)
    job = own == "job-master"
    public = own in PUBLIC_LEADERS
    groups = {
        "{own}": [own] if own in SERVICE_ROLES else [],
        # The dispatcher counts a job's contenders before it places the job again.
        "{latch-readers}": ["dispatcher"] if job else [],
        "{info-readers}": (
            ["dispatcher", "resource-manager", "task-executor"]
            if job
            else [WORLD]
            if public
            else []
        ),
        "{member-readers}": [WORLD] if public else [],
    }
    for pattern, grants in ROLE_POLICY:
        if relative == pattern or (pattern and fnmatch.fnmatchcase(relative, pattern)):
            if pattern.count("/") != relative.count("/"):
                continue  # fnmatch's * crosses '/': match level by level only
            out: dict[str, int] = {}
            for grantee, perms in grants.items():
                for who in groups.get(grantee, [grantee]):
                    out[who] = out.get(who, 0) | perms
            return out
    return {"dispatcher": R | W | C | D}


def may_read(role: str, relative: str) -> bool:
    grants = role_grants(relative)
    return bool((grants.get(role, 0) | grants.get(WORLD, 0)) & R)


@dataclass(frozen=True)
class ZooKeeperAuth:
    """How a process authenticates, and the ACL it gives a node (by path below the root)."""

    auth_data: list[tuple[str, str]]
    default_acl: list[ACL]
    user: str = ""
    acl_of: Callable[[str], list[ACL]] | None = field(default=None, compare=False)
    role: str = ""
    per_role: bool = False

    def acl_for(self, relative: str) -> list[ACL]:
        return list(self.default_acl) if self.acl_of is None else self.acl_of(relative)


OPEN = ZooKeeperAuth([], list(OPEN_ACL_UNSAFE))


def digest_auth(user: str, password: str) -> ZooKeeperAuth:
    """The shared-digest layout: one user, all permissions on everything."""
    return ZooKeeperAuth(
        [("digest", f"{user}:{password}")],
        [make_digest_acl(user, password, all=True)],
        user,
    )


def role_acl_for(identities: Mapping[str, str]) -> Callable[[str], list[ACL]]:
    """The ACL of a node from its path, given each role's digest id (``user:hash``)."""

    def acl_of(relative: str) -> list[ACL]:
        acls = []
        for who, perms in sorted(role_grants(relative).items()):
            if who == WORLD:
                acls.append(make_acl("world", "anyone", read=bool(perms & R)))
            elif who in identities:
                acls.append(ACL(perms, make_acl("digest", identities[who]).id))
        return acls

    return acl_of


def role_auth(role: str, identities: Mapping[str, str], password: str | None) -> ZooKeeperAuth:
    """Per-role mode: authenticated as ``role`` (``password=None``: a client, no credential)."""
    acl_of = role_acl_for(identities)
    if password is None:
        return ZooKeeperAuth([], acl_of(""), "", acl_of, role, per_role=True)
    user = identities[role].partition(":")[0]
    own = [make_digest_acl(user, password, all=True)]
    return ZooKeeperAuth([("digest", f"{user}:{password}")], own, user, acl_of, role, True)


def zookeeper_auth_from_config(config: Configuration, role: str = "client") -> ZooKeeperAuth:
    """Credentials and ACLs of a ``role`` process from the configuration (secret files are
    permission-checked, a digest that is not the role's own is refused)."""
    digest_key = opt.SECURITY_ZOOKEEPER_DIGEST_FILE.key
    digest = config.get(opt.SECURITY_ZOOKEEPER_DIGEST_FILE)
    identities_file = config.get(opt.SECURITY_ZOOKEEPER_IDENTITIES_FILE)
    if identities_file:
        identities = read_zookeeper_identities(
            Path(identities_file), opt.SECURITY_ZOOKEEPER_IDENTITIES_FILE.key
        )
        if role not in SERVICE_ROLES:
            return role_auth(role, identities, None)  # clients read only what is public
        if not digest:
            raise ConfigurationError(
                digest_key,
                f"must name this {role}'s digest file (e.g. .../zookeeper-{{role}}.digest) "
                "when security.zookeeper.identities-file is set",
            )
        user, password = read_digest(Path(digest.replace("{role}", role)), digest_key)
        expected = identities.get(role, "")
        if make_digest_acl(user, password).id.id != expected:
            raise ConfigurationError(
                digest_key,
                f"{digest.replace('{role}', role)} is not the {role}'s ZooKeeper identity in "
                f"{identities_file} (point the {role} at its own zookeeper-{role}.digest)",
            )
        return role_auth(role, identities, password)
    if not digest:
        log.warning(
            "ZooKeeper digest authentication is off (security.zookeeper.digest-file is not set): "
            "anyone who reaches ZooKeeper can read and change this cluster's leader and job data"
        )
        return OPEN
    log.warning(
        "ZooKeeper: every process shares one digest identity (security.zookeeper.identities-"
        "file is not set), so any host's credential can rewrite every leader and job graph. "
        "Give each role its own: 'sparkmill keys generate --dir KEYS' adds zookeeper-<role>."
        "digest files and public/zookeeper.identities; see docs/security.md, 'Migrating to "
        "per-role ZooKeeper identities'"
    )
    user, password = read_digest(Path(digest.replace("{role}", role)), digest_key)
    return digest_auth(user, password)


def ensure_path(client: KazooClient, root: str, path: str, auth: ZooKeeperAuth) -> None:
    """Create ``path`` and its missing ancestors, each with the ACL of its own path (kazoo's
    ``makepath`` would give every ancestor the leaf's ACL). Blocking."""
    parts = [p for p in path.split("/") if p]
    root_depth = len([p for p in root.split("/") if p])
    for depth in range(1, len(parts) + 1):
        node = "/" + "/".join(parts[:depth])
        if client.exists(node) is not None:
            continue
        relative = "/".join(parts[root_depth:depth]) if depth > root_depth else ""
        with contextlib.suppress(NodeExistsError):  # made meanwhile by another process
            client.create(node, b"", acl=auth.acl_for(relative))


def narrower_acl(found: list[ACL], expected: list[ACL]) -> bool:
    """Whether ``found`` grants the same identities as ``expected``, each at most what
    ``expected`` grants it: a node an earlier version made, before a grant was added. Nobody
    can do more on it than this version allows (digest ids compared by user, as
    :func:`acl_text` masks them)."""

    def by_id(acls: list[ACL]) -> dict[str, int]:
        out: dict[str, int] = {}
        for acl in acls:
            key = acl_text(acl, masked=True).rpartition(":")[0]
            out[key] = out.get(key, 0) | acl.perms
        return out

    have, allowed = by_id(found), by_id(expected)
    return have.keys() == allowed.keys() and all(
        perms & ~allowed[key] == 0 for key, perms in have.items()
    )


def acl_text(acl: ACL, *, masked: bool = False) -> str:
    """One ACL entry as ``scheme:id:perms`` (perms as ZooKeeper's bit mask), for comparing
    and for messages; a digest id shows the user and the hash (``masked``: the user only, as
    ZooKeeper shows it to a caller without ADMIN), never a password."""
    ident = acl.id.id
    if masked and acl.id.scheme == "digest":
        ident = ident.partition(":")[0] + ":x"
    return f"{acl.id.scheme}:{ident}:{acl.perms}"
