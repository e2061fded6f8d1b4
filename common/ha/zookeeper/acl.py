"""ZooKeeper digest authentication and the ACL of every znode sparkmill creates.

With ``security.zookeeper.digest-file`` set, each process authenticates its ZooKeeper session
as that digest user, and every node it creates (leader latches, leader addresses, job graphs,
locks, member announcements) gets an ACL granting all permissions to that user only: an
unauthenticated client (or one with another password) can neither read nor change them. Every
process of a cluster uses the same digest user, so a standby can take over what a leader
created. Without the file, nodes are created open (``world:anyone``), and services say so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_digest_acl

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.rpc.keys import read_digest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ZooKeeperAuth:
    auth_data: list[tuple[str, str]]
    default_acl: list[ACL]
    user: str = ""


OPEN = ZooKeeperAuth([], list(OPEN_ACL_UNSAFE))


def digest_auth(user: str, password: str) -> ZooKeeperAuth:
    return ZooKeeperAuth(
        [("digest", f"{user}:{password}")],
        [make_digest_acl(user, password, all=True)],
        user,
    )


def zookeeper_auth_from_config(config: Configuration) -> ZooKeeperAuth:
    """Digest credentials and ACL from the configuration (the secret file permission-checked)."""
    path = config.get(opt.SECURITY_ZOOKEEPER_DIGEST_FILE)
    if not path:
        log.warning(
            "ZooKeeper digest authentication is off (security.zookeeper.digest-file is not set): "
            "anyone who reaches ZooKeeper can read and change this cluster's leader and job data"
        )
        return OPEN
    user, password = read_digest(Path(path), opt.SECURITY_ZOOKEEPER_DIGEST_FILE.key)
    return digest_auth(user, password)


def acl_text(acl: ACL) -> str:
    """One ACL entry as ``scheme:id:perms`` (perms as ZooKeeper's bit mask), for comparing
    and for messages; a digest id shows the user and the hash, never a password."""
    return f"{acl.id.scheme}:{acl.id.id}:{acl.perms}"
