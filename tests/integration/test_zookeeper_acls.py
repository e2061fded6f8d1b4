"""A cluster refuses ZooKeeper nodes that someone else created before it first started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkmill.common.ha.zookeeper.server import ZooKeeperServer, zookeeper_available
from sparkmill.local_cluster import LocalCluster

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
