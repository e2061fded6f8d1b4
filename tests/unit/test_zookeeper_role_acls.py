"""Per-role ZooKeeper identities: who may do what on which znode, and the configuration."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from kazoo.security import ACL, make_acl

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.ha.zookeeper.acl import (
    SERVICE_ROLES,
    WORLD,
    C,
    D,
    R,
    W,
    narrower_acl,
    role_acl_for,
    role_grants,
    zookeeper_auth_from_config,
)
from sparkmill.common.rpc.keys import generate_cluster_keys, generate_zookeeper_digest

JOB = "job-" + "a" * 32
WRITES = W | C | D


def writers(relative: str) -> set[str]:
    return {who for who, perms in role_grants(relative).items() if perms & WRITES}


def readers(relative: str) -> set[str]:
    return {who for who, perms in role_grants(relative).items() if perms & R}


def test_only_the_dispatcher_touches_the_job_graph_store() -> None:
    for path in ("jobgraphs", f"jobgraphs/{JOB[4:]}", f"jobgraphs/{JOB[4:]}/locks/x"):
        assert writers(path) == {"dispatcher"}, path
        assert readers(path) == {"dispatcher"}, path


def test_each_election_belongs_to_its_own_role() -> None:
    for role, node in (
        ("dispatcher", "dispatcher"),
        ("resource-manager", "resource-manager"),
        ("job-master", JOB),
    ):
        for child in ("", "/latch", "/latch/n_0000000001", "/connection_info", "/epoch"):
            assert writers(f"leader/{node}{child}") == {role}, (node, child)


def test_job_masters_may_delete_a_finished_jobs_election_under_leader_and_create_nothing_else() -> (
    None
):
    grants = role_grants("leader")
    assert grants["job-master"] == R | C | D  # a finished job's leader/job-<id>
    # The roles' elections always have children (latch, epoch): ZooKeeper refuses to delete
    # them whatever the grant. Nothing else under the root is the job masters' to delete.
    assert grants["dispatcher"] == grants["resource-manager"] == R | C
    for path in ("", "members", "jobgraphs"):
        assert not role_grants(path).get("job-master", 0) & D, path


def test_an_earlier_versions_narrower_acl_is_accepted_a_wider_or_foreign_one_is_not() -> None:
    identities = {role: f"sparkmill-{role}:hash-of-{role}" for role in SERVICE_ROLES}
    acl_of = role_acl_for(identities)
    now = acl_of("leader")
    earlier = [ACL(acl.perms & ~D, acl.id) if "job-master" in acl.id.id else acl for acl in now]
    assert earlier != now and narrower_acl(earlier, now)
    assert narrower_acl(now, now)
    assert not narrower_acl(now, earlier)  # wider than what it may be
    stranger = make_acl("digest", "someone-else:hash", read=True)
    assert not narrower_acl([*earlier, stranger], now)  # another identity on it
    assert not narrower_acl(earlier[1:], now)  # a role missing from it


def test_task_executors_write_only_their_own_announcement() -> None:
    paths = [
        "",
        "leader",
        "jobgraphs",
        "members",
        *(f"leader/{n}{c}" for n in ("dispatcher", JOB) for c in ("", "/latch", "/epoch")),
        *(f"members/{role}" for role in SERVICE_ROLES if role != "task-executor"),
    ]
    for path in paths:
        assert "task-executor" not in writers(path), path
    assert writers("members/task-executor/x") == {"task-executor"}


def test_what_anyone_may_read_is_what_clients_learn_over_rpc_anyway() -> None:
    public = {
        "leader/dispatcher/connection_info",
        "leader/resource-manager/connection_info",
        "members",
        "members/dispatcher",
        "members/dispatcher/x",
        "members/resource-manager",
        "members/resource-manager/x",
    }
    every = [
        *public,
        "",
        "leader",
        "jobgraphs",
        f"jobgraphs/{JOB[4:]}",
        f"leader/{JOB}/connection_info",
        f"leader/{JOB}/latch",
        "leader/dispatcher/latch",
        "leader/dispatcher/epoch",
        "members/task-executor/x",
        "members/job-master/x",
    ]
    for path in every:
        grants = role_grants(path)
        assert (WORLD in grants) == (path in public), path
        assert grants.get(WORLD, R) == R, path  # never more than read
    # The services that talk to a job's leader find it; nobody else.
    assert readers(f"leader/{JOB}/connection_info") == set(SERVICE_ROLES)


def _config(tmp_path: Path, **values: str) -> Configuration:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(values))
    return Configuration.load(path)


def _per_role(tmp_path: Path, digest: str = "zookeeper-{role}.digest") -> Configuration:
    generate_cluster_keys(tmp_path)
    return _config(
        tmp_path,
        **{
            "security.zookeeper.digest-file": str(tmp_path / "private" / digest),
            "security.zookeeper.identities-file": str(tmp_path / "public/zookeeper.identities"),
        },
    )


def test_each_role_authenticates_as_itself_and_clients_as_nobody(tmp_path: Path) -> None:
    config = _per_role(tmp_path)
    for role in SERVICE_ROLES:
        auth = zookeeper_auth_from_config(config, role)
        assert auth.per_role and auth.user == f"sparkmill-{role}"
        assert auth.auth_data[0][1].startswith(f"sparkmill-{role}:")
    client = zookeeper_auth_from_config(config, "client")
    assert client.auth_data == [] and client.per_role


def test_another_roles_digest_is_refused(tmp_path: Path) -> None:
    config = _per_role(tmp_path, "zookeeper-dispatcher.digest")
    assert zookeeper_auth_from_config(config, "dispatcher").user == "sparkmill-dispatcher"
    with pytest.raises(ConfigurationError, match="not the task-executor's ZooKeeper identity"):
        zookeeper_auth_from_config(config, "task-executor")


def test_a_loose_digest_or_writable_identities_file_is_refused(tmp_path: Path) -> None:
    config = _per_role(tmp_path)
    (tmp_path / "public" / "zookeeper.identities").chmod(0o666)
    with pytest.raises(ConfigurationError, match="chmod go-w"):
        zookeeper_auth_from_config(config, "job-master")
    (tmp_path / "public" / "zookeeper.identities").chmod(0o644)
    (tmp_path / "private" / "zookeeper-job-master.digest").chmod(0o640)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        zookeeper_auth_from_config(config, "job-master")


def test_an_identities_file_missing_a_role_is_refused(tmp_path: Path) -> None:
    config = _per_role(tmp_path)
    identities = tmp_path / "public" / "zookeeper.identities"
    kept = [line for line in identities.read_text().splitlines() if "job-master" not in line]
    identities.unlink()
    identities.write_text("\n".join(kept) + "\n")
    identities.chmod(0o644)
    with pytest.raises(ConfigurationError, match="no ZooKeeper identity for job-master"):
        zookeeper_auth_from_config(config, "dispatcher")


def test_one_shared_digest_still_works_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = generate_zookeeper_digest(tmp_path)
    assert shared is not None
    config = _config(tmp_path, **{"security.zookeeper.digest-file": str(shared)})
    with caplog.at_level(logging.WARNING):
        auth = zookeeper_auth_from_config(config, "task-executor")
    assert not auth.per_role and auth.user == "sparkmill"
    assert auth.acl_for("jobgraphs") == auth.default_acl  # all permissions, as before
    assert "shares one digest identity" in caplog.text
