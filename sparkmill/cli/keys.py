"""``sparkmill keys``: generate and list a cluster's CurveZMQ keys (see docs/security.md).

::

    sparkmill keys generate --dir D           # server key, a key per role, ZK digests per role
    sparkmill keys generate --dir D --role task-executor --name host7
    sparkmill keys generate --dir D --zookeeper   # only the per-role ZooKeeper digests
    sparkmill keys list --dir D [--json]

Keys are never overwritten: rotating one means generating a key under a new name, adding its
public half to every member's public directory, and removing the old one later.
"""

from __future__ import annotations

import argparse
import json
import stat
from pathlib import Path

from sparkmill.common.core.errors import ConfigurationError, SparkmillError
from sparkmill.common.rpc.keys import (
    PRIVATE_DIR,
    PUBLIC_DIR,
    PUBLIC_SUFFIX,
    ROLES,
    SECRET_SUFFIX,
    SERVER,
    generate_cluster_keys,
    generate_key,
    generate_zookeeper_role_digests,
    load_public_key,
    parse_stem,
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = sub.add_parser("keys", help="generate and list the cluster's CurveZMQ keys")
    keys_sub = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    generate = keys_sub.add_parser(
        "generate", help="create key pairs in DIR/public and DIR/private (never overwritten)"
    )
    generate.add_argument("--dir", type=Path, required=True, help="the keys directory")
    generate.add_argument(
        "--role",
        choices=(SERVER, *ROLES),
        help="one key of this role (default: the server key, one key per role, one ZooKeeper "
        "digest per service role and the REST tokens)",
    )
    generate.add_argument(
        "--zookeeper",
        action="store_true",
        help="only the ZooKeeper digests: private/zookeeper-<role>.digest for each service role "
        "and public/zookeeper.identities (kept when they exist)",
    )
    generate.add_argument("--name", default="", help="e.g. the host or person the key is for")
    listing = keys_sub.add_parser("list", help="the admitted public keys and their roles")
    listing.add_argument("--dir", type=Path, required=True, help="the keys directory")
    listing.add_argument("--json", action="store_true", help="print a JSON document")


def run(args: argparse.Namespace) -> int:
    if args.action == "generate":
        if args.zookeeper:
            if args.role or args.name:
                raise SparkmillError("--zookeeper takes no --role or --name")
            return _print_created(generate_zookeeper_role_digests(args.dir), args.dir)
        return _generate(args.dir, args.role, args.name)
    return _list(args.dir, as_json=args.json)


def _generate(directory: Path, role: str | None, name: str) -> int:
    if role is None:
        if name:
            raise SparkmillError("--name needs --role (which role the named key is for)")
        created = generate_cluster_keys(directory)
    else:
        try:
            made = generate_key(directory, role, name)
        except ValueError as exc:
            raise SparkmillError(str(exc)) from None
        if made is None:
            raise SparkmillError(
                f"a key for {role}{'-' + name if name else ''} exists already in {directory}; "
                "keys are never overwritten (choose another --name to rotate)"
            )
        created = list(made)
    return _print_created(created, directory)


def _print_created(created: list[Path], directory: Path) -> int:
    for path in created:
        print(path)
    if not created:
        print(f"every key exists already in {directory}")
    return 0


def _list(directory: Path, *, as_json: bool) -> int:
    public_dir = directory / PUBLIC_DIR
    if not public_dir.is_dir():
        raise SparkmillError(f"no keys in {directory} ({public_dir} does not exist)")
    rows = []
    for path in sorted(public_dir.glob("*" + PUBLIC_SUFFIX)):
        stem = path.name.removesuffix(PUBLIC_SUFFIX)
        parsed = (SERVER, "") if stem == SERVER else parse_stem(stem)
        try:
            key = load_public_key(path, "keys").decode("ascii")
        except ConfigurationError as exc:
            key = f"(unreadable: {exc})"
        secret = directory / PRIVATE_DIR / (stem + SECRET_SUFFIX)
        rows.append(
            {
                "role": parsed[0] if parsed else "(no role: refused)",
                "name": parsed[1] if parsed else stem,
                "public_key": key,
                "file": str(path),
                "secret_key": _secret_state(secret),
            }
        )
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'ROLE':<18}{'NAME':<16}{'PUBLIC KEY':<14}SECRET KEY HERE")
    for row in rows:
        name, key = row["name"] or "-", row["public_key"][:12]
        print(f"{row['role']:<18}{name:<16}{key:<14}{row['secret_key']}")
    return 0


def _secret_state(path: Path) -> str:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return "no"
    return "yes" if not mode & 0o077 else f"yes, but mode {mode:04o}: run chmod 600 {path}"


def rest_tokens_note(config_path: Path) -> str:
    """Where a cluster's REST tokens are (the dashboard asks for one), or that it has none."""
    from sparkmill.common.config import options as opt
    from sparkmill.common.config.configuration import Configuration

    path = Configuration.load(config_path).get(opt.REST_AUTH_TOKEN_FILE)
    if not path:
        return "none (rest.auth.token-file is not set: the API is open)"
    return f"{path} (lines 'operator TOKEN' and 'viewer TOKEN'; the dashboard asks for one)"


def unanswered_hint(config_path: Path | None) -> str:
    """Why a secure cluster may not answer this client at all, for the CLI's error message.

    A key the servers do not admit is refused in the handshake, which the client reports at
    once (``PermissionDeniedError``); a client holding the wrong *server* key gets no such
    refusal, only silence, as does one whose servers are down: say what to check, naming the
    key file.
    """
    from sparkmill.common.config import options as opt
    from sparkmill.common.config.configuration import Configuration

    if config_path is None:
        return ""
    try:
        config = Configuration.load(config_path)
    except (ConfigurationError, OSError):
        return ""
    if not config.get(opt.SECURITY_CURVE_ENABLED):
        return ""
    secret = config.get(opt.SECURITY_CURVE_SECRET_KEY_FILE).replace("{role}", "client")
    return (
        "\nsparkmill: CurveZMQ is on, and the services never answer a client whose key is not "
        f"admitted: check that the public half of {secret} (sparkmill keys list) is in the "
        "public keys directory of every service host, and that the cluster is up"
    )
