"""CurveZMQ key files of a cluster: generating, loading and naming them by role.

A key directory has two halves::

    D/public/<role>[-<name>].key          one public key per member (safe to copy anywhere)
    D/public/server.key                   the public half of the cluster's server key
    D/private/<role>[-<name>].key_secret  the matching secret keys (mode 0600)
    D/private/server.key_secret           the server secret key every service process serves with
    D/private/zookeeper-<role>.digest     "user:password": a service role's ZooKeeper identity
    D/public/zookeeper.identities         "role user:hash" lines: every role's ZooKeeper digest id
    D/private/zookeeper.digest            the former single digest every process shared
    D/private/rest.tokens                 "role token" lines: the REST API's bearer tokens

The *role* of a member is the file name's prefix (``client``, ``dispatcher``,
``resource-manager``, ``job-master`` or ``task-executor``); the rest is a free name (a host, a
person). Every process admits a caller only if the caller's public key is in its ``public``
directory, and derives the caller's role from that file name (see
:mod:`sparkmill.common.rpc.security`). The files use ZeroMQ's certificate format, so ``zmq.auth``
tools can read them.

Secret files are refused when their mode lets group or others read them (like ssh does).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from sparkmill.common.core.errors import ConfigurationError

ROLES = ("client", "dispatcher", "resource-manager", "job-master", "task-executor")
SERVER = "server"
PUBLIC_DIR = "public"
PRIVATE_DIR = "private"
PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
ZOOKEEPER_DIGEST_FILE = "zookeeper.digest"
ZOOKEEPER_IDENTITIES_FILE = "zookeeper.identities"
ZOOKEEPER_ROLES = ("dispatcher", "resource-manager", "job-master", "task-executor")
"""The roles with a ZooKeeper identity; clients need none (see sparkmill.common.ha.zookeeper)."""


def zookeeper_digest_file(role: str) -> str:
    return f"zookeeper-{role}.digest"


REST_TOKENS_FILE = "rest.tokens"
# REST API roles: a viewer may read, an operator may also submit and cancel.
REST_ROLES = ("viewer", "operator")
REST_TOKEN_MIN_LENGTH = 16
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True, slots=True)
class Member:
    """An admitted public key and whom it belongs to."""

    role: str
    name: str
    public_key: bytes  # Z85, 40 bytes
    path: str = ""

    @property
    def user_id(self) -> str:
        """What the ZAP handler returns as the ZeroMQ User-Id: ``role:name``."""
        return f"{self.role}:{self.name}"


def key_stem(role: str, name: str = "") -> str:
    """The file name (without suffix) of a member's key: ``role`` or ``role-name``."""
    if role not in (*ROLES, SERVER):
        raise ValueError(f"unknown role {role!r}; one of {', '.join((*ROLES, SERVER))}")
    if name and not _NAME.match(name):
        raise ValueError(f"bad key name {name!r}: letters, digits, '.', '_' and '-' only")
    return f"{role}-{name}" if name else role


def parse_stem(stem: str) -> tuple[str, str] | None:
    """``(role, name)`` of a key file name, or ``None`` when it names no known role."""
    for role in sorted(ROLES, key=len, reverse=True):  # "job-master" before a shorter prefix
        if stem == role:
            return role, ""
        if stem.startswith(role + "-") and len(stem) > len(role) + 1:
            return role, stem[len(role) + 1 :]
    return None


def check_secret_file(path: Path, key: str) -> None:
    """Refuse a secret file that is missing or readable by group or others (like ssh)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise ConfigurationError(key, f"cannot read secret file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise ConfigurationError(key, f"secret file {path} is not a regular file")
    if mode & 0o077:
        raise ConfigurationError(
            key,
            f"secret file {path} is accessible by group or others (mode "
            f"{stat.S_IMODE(mode):04o}); it must be private to its owner: chmod 600 {path}",
        )


def load_secret_key(path: Path, key: str) -> tuple[bytes, bytes]:
    """``(public, secret)`` from a ``.key_secret`` file, permission-checked first."""
    check_secret_file(path, key)
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(key, f"cannot load secret key {path}: {exc}") from None
    if not secret:
        raise ConfigurationError(key, f"{path} holds no secret-key (is it a public .key file?)")
    return public, secret


def load_public_key(path: Path, key: str) -> bytes:
    try:
        public, _ = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(key, f"cannot load public key {path}: {exc}") from None
    if len(public) != 40:
        raise ConfigurationError(key, f"{path} holds no valid Z85 public-key")
    return public


def check_not_writable_by_others(path: Path, key: str, what: str) -> None:
    """Refuse ``path`` when someone but its owner may change it, or its owner is neither this
    process's user nor root: whoever can write the public keys directory can admit a key of
    any role (a planted ``dispatcher-x.key`` would be let in as a dispatcher)."""
    try:
        info = path.stat()
    except OSError as exc:
        raise ConfigurationError(key, f"cannot read {what} {path}: {exc.strerror}") from None
    if info.st_mode & 0o022:
        raise ConfigurationError(
            key,
            f"{what} {path} is writable by group or others (mode "
            f"{stat.S_IMODE(info.st_mode):04o}), so anyone in them could admit a key: "
            f"chmod go-w {path}",
        )
    if info.st_uid not in (0, os.geteuid()):
        raise ConfigurationError(
            key,
            f"{what} {path} belongs to uid {info.st_uid}, neither root nor this process's user "
            f"(uid {os.geteuid()}); chown it to one of them",
        )


def load_members(public_dir: Path, key: str) -> dict[bytes, Member]:
    """Every admitted member of a ``public`` directory, by public key (the server key is not a
    member). A file that names no role is refused, so a typo cannot silently lock someone out;
    the directory and its keys must be writable by their owner only (root or this user)."""
    if not public_dir.is_dir():
        raise ConfigurationError(key, f"public keys directory {public_dir} does not exist")
    check_not_writable_by_others(public_dir, key, "public keys directory")
    members: dict[bytes, Member] = {}
    for path in sorted(public_dir.glob("*" + PUBLIC_SUFFIX)):
        if not path.is_file():
            raise ConfigurationError(key, f"public key {path} is not a regular file")
        check_not_writable_by_others(path, key, "public key")
        stem = path.name.removesuffix(PUBLIC_SUFFIX)
        if stem == SERVER:
            continue
        parsed = parse_stem(stem)
        if parsed is None:
            raise ConfigurationError(
                key,
                f"public key {path} names no role: name it <role>[-<name>].key with a role of "
                f"{', '.join(ROLES)}",
            )
        public = load_public_key(path, key)
        members[public] = Member(parsed[0], parsed[1], public, str(path))
    return members


def _write_new(path: Path, text: str, mode: int) -> None:
    """Create ``path`` with exactly ``mode``, whatever the umask (which could otherwise leave
    a public key writable by others, or a secret without the owner's read bit)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), mode)
        out.write(text)


def _write_private(path: Path, text: str) -> None:
    _write_new(path, text, 0o600)


def _make_dirs(directory: Path) -> tuple[Path, Path]:
    """``directory/public`` (0755) and ``directory/private`` (0700), modes set explicitly."""
    public_dir, private_dir = directory / PUBLIC_DIR, directory / PRIVATE_DIR
    for path, mode in ((public_dir, 0o755), (private_dir, 0o700)):
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)
    return public_dir, private_dir


def _certificate(role: str, name: str, public: bytes, secret: bytes | None) -> str:
    lines = [
        "#   ****  sparkmill CurveZMQ key (ZeroMQ certificate format)  ****",
        "#   " + ("SECRET: keep private (mode 0600)" if secret else "public: safe to share"),
        "metadata",
        f'    role = "{role}"',
        f'    name = "{name}"',
        "curve",
        f'    public-key = "{public.decode("ascii")}"',
    ]
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return "\n".join(lines) + "\n"


def generate_key(directory: Path, role: str, name: str = "") -> tuple[Path, Path] | None:
    """Create a key pair for a member; ``None`` when it exists already (never overwritten)."""
    stem = key_stem(role, name)
    public_dir, private_dir = _make_dirs(directory)
    public_path = public_dir / (stem + PUBLIC_SUFFIX)
    secret_path = private_dir / (stem + SECRET_SUFFIX)
    if public_path.exists() or secret_path.exists():
        return None
    public, secret = zmq.curve_keypair()
    _write_private(secret_path, _certificate(role, name, public, secret))
    _write_new(public_path, _certificate(role, name, public, None), 0o644)
    return public_path, secret_path


def generate_zookeeper_digest(directory: Path, user: str = "sparkmill") -> Path | None:
    """A random ``user:password`` file for ZooKeeper digest authentication (mode 0600)."""
    _, private_dir = _make_dirs(directory)
    path = private_dir / ZOOKEEPER_DIGEST_FILE
    if path.exists():
        return None
    _write_private(path, f"{user}:{secrets.token_urlsafe(24)}\n")
    return path


def generate_zookeeper_role_digests(directory: Path) -> list[Path]:
    """One digest per service role (``private/zookeeper-<role>.digest``, mode 0600, user
    ``sparkmill-<role>``) and ``public/zookeeper.identities`` naming each role's digest id
    (``user:base64(sha1(user:password))``, ZooKeeper's form, from which ACLs are built). Existing
    digests are kept; the identities file is rewritten from them (mode 0644)."""
    public_dir, private_dir = _make_dirs(directory)
    created: list[Path] = []
    lines = []
    for role in ZOOKEEPER_ROLES:
        path = private_dir / zookeeper_digest_file(role)
        if not path.exists():
            _write_private(path, f"sparkmill-{role}:{secrets.token_urlsafe(24)}\n")
            created.append(path)
        user, password = read_digest(path, str(path))
        lines.append(f"{role} {zookeeper_digest_id(user, password)}")
    identities = public_dir / ZOOKEEPER_IDENTITIES_FILE
    text = "\n".join(lines) + "\n"
    if not identities.exists() or identities.read_text() != text:
        identities.unlink(missing_ok=True)
        _write_new(identities, text, 0o644)
        created.append(identities)
    return created


def zookeeper_digest_id(user: str, password: str) -> str:
    """ZooKeeper's digest id of a credential: ``user:base64(sha1(user:password))``."""
    digest = hashlib.sha1(f"{user}:{password}".encode()).digest()  # ZooKeeper's digest scheme
    return f"{user}:{base64.b64encode(digest).decode('ascii')}"


def read_zookeeper_identities(path: Path, key: str) -> dict[str, str]:
    """``role -> user:hash`` of a ZooKeeper identities file (one ``role user:hash`` line per
    service role); refused when others may write it (a planted id would be granted access)."""
    check_not_writable_by_others(path, key, "ZooKeeper identities file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(key, f"cannot read {path}: {exc}") from None
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2 or fields[0] not in ZOOKEEPER_ROLES or ":" not in fields[1]:
            raise ConfigurationError(
                key,
                f"{path}:{number}: expected 'ROLE USER:HASH' with a role of "
                f"{', '.join(ZOOKEEPER_ROLES)}",
            )
        found[fields[0]] = fields[1]
    missing = [role for role in ZOOKEEPER_ROLES if role not in found]
    if missing:
        raise ConfigurationError(
            key,
            f"{path} names no ZooKeeper identity for {', '.join(missing)} "
            "(sparkmill keys generate writes them all)",
        )
    return found


def generate_rest_tokens(directory: Path) -> Path | None:
    """A REST token file with one random ``operator`` and one ``viewer`` token (mode 0600)."""
    _, private_dir = _make_dirs(directory)
    path = private_dir / REST_TOKENS_FILE
    if path.exists():
        return None
    lines = [f"{role} {secrets.token_urlsafe(32)}" for role in reversed(REST_ROLES)]
    _write_private(path, "\n".join(lines) + "\n")
    return path


def generate_cluster_keys(directory: Path) -> list[Path]:
    """The server key, one key per role, one ZooKeeper digest per service role (with the public
    identities file) and the REST tokens; existing files are kept. The former shared digest
    (:func:`generate_zookeeper_digest`) is no longer made."""
    created: list[Path] = []
    for role in (SERVER, *ROLES):
        made = generate_key(directory, role)
        if made is not None:
            created.extend(made)
    rest_tokens = generate_rest_tokens(directory)
    if rest_tokens is not None:
        created.append(rest_tokens)
    created.extend(generate_zookeeper_role_digests(directory))
    return created


def read_digest(path: Path, key: str) -> tuple[str, str]:
    """``(user, password)`` of a ZooKeeper digest file, permission-checked first."""
    check_secret_file(path, key)
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigurationError(key, f"cannot read {path}: {exc.strerror}") from None
    user, sep, password = text.partition(":")
    if not sep or not user or not password or "\n" in text:
        raise ConfigurationError(key, f"{path} must hold one line 'user:password'")
    return user, password


def read_rest_tokens(path: Path, key: str) -> list[tuple[str, str]]:
    """``(role, token)`` of every line of a REST token file, permission-checked first.

    Each line is ``role token`` with a role of :data:`REST_ROLES`; blank lines and ``#``
    comments are skipped. A bad line is refused with its number (never with its token).
    """
    check_secret_file(path, key)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(key, f"cannot read {path}: {exc}") from None
    tokens: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2 or fields[0] not in REST_ROLES:
            raise ConfigurationError(
                key,
                f"{path}:{number}: expected 'ROLE TOKEN' with a role of {', '.join(REST_ROLES)}",
            )
        if len(fields[1]) < REST_TOKEN_MIN_LENGTH or not fields[1].isascii():
            raise ConfigurationError(
                key,
                f"{path}:{number}: the token must be at least {REST_TOKEN_MIN_LENGTH} ASCII "
                "characters (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')",
            )
        tokens.append((fields[0], fields[1]))
    if not tokens:
        raise ConfigurationError(key, f"{path} holds no token ('ROLE TOKEN' lines)")
    return tokens


def rest_token_of(path: Path, role: str) -> str:
    """The first token of ``role`` in a REST token file (for tools and tests; no checks)."""
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == role:
            return fields[1]
    raise ValueError(f"{path} has no {role} token")
