"""Pieces every service process shares: the roles, its identity card and fencing helpers."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sparkmill.common.core.errors import NotLeaderError
from sparkmill.common.v1 import common_pb2

# The service roles, as named on the command line (``sparkmill <role>``), in ServiceInfo and in
# the metrics' ``role`` label.
ROLES = ("dispatcher", "resource-manager", "job-master", "task-executor")


@dataclass
class ServiceIdentity:
    role: str
    id: str
    address: str = ""
    metrics_url: str = ""
    rest_url: str = ""  # dispatchers: the REST API and dashboard, once served
    started_at: float = field(default_factory=time.time)

    def info(self, *, is_leader: bool = False, spark_ui_url: str = "") -> common_pb2.ServiceInfo:
        # Never the leader session id: it is a fencing token, told only to authenticated
        # members through GetLeaderSession. The Spark UI is a task executor's, and comes and
        # goes with its Spark session.
        return common_pb2.ServiceInfo(
            role=self.role,
            id=self.id,
            address=self.address,
            pid=os.getpid(),
            hostname=socket.gethostname(),
            is_leader=is_leader,
            metrics_url=self.metrics_url,
            started_at=self.started_at,
            rest_url=self.rest_url,
            spark_ui_url=spark_ui_url,
        )


def http_url(url: object, max_chars: int = 1024) -> str:
    """``url`` if it is an http(s) URL with a host, else "": what a member announces about
    itself becomes a link in the dashboard (a ``javascript:`` one would run in its origin)."""
    if not isinstance(url, str) or len(url) > max_chars:
        return ""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # e.g. an unbalanced IPv6 bracket
        return ""
    return url if parts.scheme in ("http", "https") and host else ""


def leader_session(session_id: str | None, role: str, address: str) -> common_pb2.LeaderSession:
    """The answer to GetLeaderSession, or NOT_LEADER when this process does not lead now."""
    return common_pb2.LeaderSession(session_id=require_leader(session_id, role), address=address)


def require_leader(session_id: str | None, role: str) -> str:
    """The fencing token of a leader, or NOT_LEADER when this process does not lead now."""
    if session_id is None:
        raise NotLeaderError(f"this {role} is not the leader (it is a standby or lost leadership)")
    return session_id
