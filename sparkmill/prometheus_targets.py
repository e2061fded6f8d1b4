"""Prometheus file_sd targets of a running cluster, from what ``sparkmill cluster status`` knows.

Every service reports its metrics URL in its ServiceInfo (the dispatcher lists itself and the
job-master processes, the resource manager lists itself and the task executors), so a cluster
whose processes picked free metrics ports (``metrics.port: 0``, e.g. a local cluster) can still be
scraped::

    python -m sparkmill.prometheus_targets --config DIR/cluster.yaml --out DIR/targets.json
    python -m sparkmill.prometheus_targets --config DIR/cluster.yaml --out F --interval 30

The cluster status lists the *leading* dispatcher and resource manager only. For a local cluster
with standbys, ``--local-dir DIR`` reads every process's URL from its log in ``DIR/logs`` instead
(each process logs ``... metrics at URL`` when it starts).

The file is written atomically (Prometheus re-reads it when it changes); with ``--interval`` the
command keeps it up to date as task executors come and go.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sparkmill.common.v1 import common_pb2


def file_sd_groups(services: Iterable[common_pb2.ServiceInfo]) -> list[dict[str, Any]]:
    """One file_sd group per role: ``{"targets": ["host:port", ...], "labels": {...}}``.

    Services without a metrics URL (``metrics.enabled: false``) are left out; the metrics path
    must be ``/metrics`` (the scrape configuration's default).
    """
    by_role: dict[str, set[str]] = {}
    for info in services:
        if not info.metrics_url:
            continue
        url = urlsplit(info.metrics_url)
        if url.netloc:
            by_role.setdefault(info.role, set()).add(url.netloc)
    return [
        {"targets": sorted(targets), "labels": {"sparkmill_service": role}}
        for role, targets in sorted(by_role.items())
    ]


def cluster_services(config: Path, timeout: float = 10.0) -> list[common_pb2.ServiceInfo]:
    from sparkmill.client import ClusterClient

    with ClusterClient.from_config_file(config) as client:
        view = client.cluster_status(timeout=timeout)
    rm = view.resource_manager
    return [
        view.dispatcher,
        rm.resource_manager,
        *view.job_master_process_infos,
        *(te.info for te in rm.task_executors),
    ]


_LOGGED_URL = re.compile(r" metrics at (http://\S+)")


def local_cluster_services(directory: Path) -> list[common_pb2.ServiceInfo]:
    """The services of a local cluster (``sparkmill local-cluster up --dir DIR``) that are alive,
    with the metrics URL each logged last."""
    from sparkmill.common.runtime.service_process import is_alive
    from sparkmill.local_cluster import LocalCluster

    found = []
    for proc in LocalCluster.attach(directory).processes:
        log = Path(proc.log_file)
        if not log.exists() or not is_alive(proc.pid):
            continue
        urls = _LOGGED_URL.findall(log.read_text(errors="replace"))
        if urls:
            found.append(common_pb2.ServiceInfo(role=proc.role, metrics_url=urls[-1]))
    return found


def write_atomically(path: Path, groups: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:
        json.dump(groups, out, indent=2)
        out.write("\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sparkmill.prometheus_targets", description=__doc__.split("\n\n")[0]
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", type=Path, help="the cluster's configuration")
    source.add_argument("--local-dir", type=Path, help="a local cluster's directory")
    parser.add_argument("--out", type=Path, help="file_sd JSON file (default: standard output)")
    parser.add_argument("--interval", type=float, default=0.0, help="rewrite every N seconds")
    args = parser.parse_args(argv)
    while True:
        try:
            if args.local_dir is not None:
                groups = file_sd_groups(local_cluster_services(args.local_dir))
            else:
                groups = file_sd_groups(cluster_services(args.config))
        except Exception as exc:
            print(f"cannot read the cluster status: {type(exc).__name__}: {exc}", file=sys.stderr)
            if not args.interval:
                return 3
        else:
            if args.out is None:
                print(json.dumps(groups, indent=2))
            else:
                write_atomically(args.out, groups)
        if not args.interval:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
