"""Database access for the JDBC source and sink: credentials, connection properties, and what a
database error means (SQLSTATE classes no restart can fix; messages without the password).

The credentials file holds ``user=`` and ``password=`` lines and must be readable by its owner
only (checked like every other secret of the cluster); only its path travels in the job graph.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkmill.common.core.errors import (
    ConfigurationError,
    DatabaseAccessError,
    DatabaseError,
)
from sparkmill.common.rpc.keys import check_secret_file
from sparkmill.services.taskexecutor.spark.errors import summarize

DRIVERS = {"jdbc:postgresql:": "org.postgresql.Driver"}
"""Driver classes Spark is told to load, by URL prefix (others: the driver must register)."""

# SQLSTATE classes and codes no restart can fix: authorization (28), syntax or access rule
# (42: unknown table or column, no privilege), unknown database (3D000).
_PERMANENT_STATES = ("28", "42", "3D")
_PERMANENT_TEXT = ("No suitable driver", "ClassNotFoundException")
UNIQUE_VIOLATION = "23505"

SERVER_KEEPALIVES = (
    "-c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3"
)
"""Session settings every PostgreSQL connection asks for (the driver's ``options`` property):
the server probes an idle client after 30 s and drops it after three unanswered probes. A host
that powers off in the middle of a write leaves its transaction open, holding its staging table,
and the server otherwise waits for the operating system's two hours of TCP keepalive before it
notices; a client that is slow or paused still answers the probes and keeps its session."""


@dataclass(frozen=True)
class Credentials:
    user: str = ""
    password: str = field(default="", repr=False)


def load_credentials(path: str, what: str) -> Credentials:
    """The user name and password of ``path`` ("" means: none, the URL's driver defaults)."""
    if not path:
        return Credentials()
    try:
        check_secret_file(Path(path), "credentials_file")
        text = Path(path).read_text()
    except ConfigurationError as exc:
        raise DatabaseAccessError(f"{what}: {exc}") from None
    except OSError as exc:
        raise DatabaseAccessError(
            f"{what}: cannot read the credentials file {path}: {exc.strerror}"
        ) from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not sep or key.strip() not in ("user", "password"):
            # Never echo the line: it may be the password.
            raise DatabaseAccessError(
                f"{what}: line {number} of the credentials file {path} is not "
                "'user=...' or 'password=...'"
            )
        values[key.strip()] = value.strip()
    return Credentials(values.get("user", ""), values.get("password", ""))


def scrub(text: str, credentials: Credentials) -> str:
    """``text`` without the password (defence in depth: drivers do not normally echo it)."""
    if credentials.password:
        text = text.replace(credentials.password, "***")
    return text


def properties(
    url: str, credentials: Credentials, options: dict[str, str] | None = None
) -> dict[str, str]:
    """Connection properties for Spark's JDBC data source."""
    props = dict(options or {})
    for prefix, driver in DRIVERS.items():
        if url.startswith(prefix):
            props.setdefault("driver", driver)
    if url.startswith("jdbc:postgresql:") and "tcp_keepalives" not in props.get("options", ""):
        props["options"] = f"{props.get('options', '')} {SERVER_KEEPALIVES}".strip()
    if credentials.user:
        props["user"] = credentials.user
    if credentials.password:
        props["password"] = credentials.password
    return props


def _java_chain(exc: BaseException) -> Iterator[Any]:
    """The JVM exceptions behind a PySpark or py4j exception, outermost first."""
    current = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    seen = 0
    while current is not None and seen < 20:
        yield current
        seen += 1
        try:
            current = current.getCause()
        except Exception:
            return


def _sql_exception(exc: BaseException) -> tuple[str, str]:
    """SQLSTATE and message of the first ``java.sql.SQLException`` behind ``exc`` (what the
    database or driver said; Spark's wrappers only say that the connection failed)."""
    for java in _java_chain(exc):
        try:
            state = java.getSQLState()
        except Exception:
            continue
        if state:
            try:
                message = str(java.getMessage() or "")
            except Exception:
                message = ""
            return str(state), message
    found = re.search(r"SQLState: ?([0-9A-Z]{5})", str(exc))
    return (found.group(1) if found else ""), ""


def sql_state(exc: BaseException) -> str:
    """The SQLSTATE of the first ``java.sql.SQLException`` behind ``exc`` ("" if none)."""
    return _sql_exception(exc)[0]


def is_permanent(exc: BaseException) -> bool:
    state = sql_state(exc)
    if state.startswith(_PERMANENT_STATES):
        return True
    text = str(exc)
    return any(marker in text for marker in _PERMANENT_TEXT)


def failure(what: str, exc: BaseException, credentials: Credentials) -> Exception:
    """A task failure for ``exc``: it says what failed, the driver's reason, no password."""
    state, said = _sql_exception(exc)
    reason = scrub((said or summarize(exc)).strip().splitlines()[0], credentials)
    message = f"{what} failed: {reason}" + (f" (SQLSTATE {state})" if state else "")
    if is_permanent(exc):
        return DatabaseAccessError(message)
    return DatabaseError(message)
