"""``sparkmill cluster status``: every service of the cluster (leaders and standbys, job-master
processes, task executors), the slots and what waits for them, and whether CurveZMQ is on."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from sparkmill.cli.exit_codes import EXIT_OK
from sparkmill.cli.options import SubParsers, add_config_options
from sparkmill.cli.output import service_json
from sparkmill.common.rpc.security import INSECURE_WARNING
from sparkmill.common.runtime.service_base import http_url
from sparkmill.common.v1 import resource_manager_pb2

if TYPE_CHECKING:
    from sparkmill.client import ClusterClient


def add_parser(sub: SubParsers[argparse.ArgumentParser]) -> None:
    cluster = sub.add_parser("cluster", help="cluster overview")
    cluster_sub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = cluster_sub.add_parser(
        "status", help="services, leaders, task executors, slots and security"
    )
    status.add_argument("--json", action="store_true", help="print a JSON document")
    add_config_options(status)


def cluster_status(client: ClusterClient, *, as_json: bool) -> int:
    view = client.cluster_status()
    # A CURVE server refuses a client without keys: if this client got in without, the cluster
    # runs with security off.
    secure = bool(client.security.enabled)
    if not secure:
        print(f"WARNING: {INSECURE_WARNING}", file=sys.stderr)
    rm = view.resource_manager
    services = [
        view.dispatcher,
        rm.resource_manager,
        *view.standbys,
        *view.job_master_process_infos,
    ]
    services += [te.info for te in rm.task_executors]
    executors: list[dict[str, Any]] = [
        {
            "resource_id": te.resource_id,
            "address": te.address,
            "slots_total": len(te.slots),
            "slots_free": sum(1 for s in te.slots if not s.allocation_id),
            "spark_ui_url": http_url(te.info.spark_ui_url) or None,
            "slots": [
                {
                    "index": s.slot_index,
                    "allocation_id": s.allocation_id or None,
                    "job_id": s.job_id or None,
                }
                for s in te.slots
            ],
        }
        for te in rm.task_executors
    ]
    if as_json:
        document = {
            "services": [service_json(s) for s in services],
            "task_executors": executors,
            "slots": {
                "total": rm.slots_total,
                "free": rm.slots_free,
                "allocated": rm.slots_allocated,
                "pending": rm.slots_pending,
            },
            "pending_slot_requests": rm.pending_slot_requests,
            "jobs_with_job_master": list(rm.registered_jobs),
            "workers": _workers_json(rm.workers) if rm.HasField("workers") else None,
            "security": {"curve": secure},
        }
        print(json.dumps(document, indent=2))
        return EXIT_OK
    print(f"{'ROLE':<18}{'ID':<10}{'ADDRESS':<28}{'PID':>8}  LEADER")
    for s in services:
        leader = (
            "leader"
            if s.is_leader
            else ("standby" if s.role in ("dispatcher", "resource-manager") else "-")
        )
        print(f"{s.role:<18}{s.id[:8]:<10}{s.address:<28}{s.pid:>8}  {leader}")
    if view.dispatcher.rest_url:
        print(f"\ndashboard and REST API: {view.dispatcher.rest_url}")
    print(
        f"\nslots: {rm.slots_total} total, {rm.slots_free} free, {rm.slots_allocated} "
        f"allocated, {rm.slots_pending} pending; {rm.pending_slot_requests} requests waiting"
    )
    if rm.HasField("workers"):
        w = rm.workers
        print(
            f"workers ({w.driver} driver): {w.pending} pending, {w.registered} registered, "
            f"{w.releasing} releasing; {w.started_total} started, {w.failed_total} failed, "
            f"{w.released_total} released since it leads"
        )
        if w.starts_paused:
            print(
                f"  starting task executors is PAUSED: {w.recent_failures} failure(s) within a "
                "minute reached resourcemanager.start-worker.max-failure-rate (see the "
                "resource manager's log)"
            )
    for te in executors:
        print(
            f"  task executor {te['resource_id'][:8]} {te['address']}: "
            f"{te['slots_free']}/{te['slots_total']} free"
            + (f", Spark UI {te['spark_ui_url']}" if te["spark_ui_url"] else "")
        )
    print("\nsecurity: CurveZMQ on" if secure else "\nsecurity: OFF (see docs/security.md)")
    return EXIT_OK


def _workers_json(w: resource_manager_pb2.WorkerStats) -> dict[str, Any]:
    """The task executors the resource manager starts itself (resourcemanager.driver)."""
    return {
        "driver": w.driver,
        "pending": w.pending,
        "registered": w.registered,
        "releasing": w.releasing,
        "started_total": w.started_total,
        "failed_total": w.failed_total,
        "released_total": w.released_total,
        "max_slots": w.max_slots,
        "recent_failures": w.recent_failures,
        "starts_paused": w.starts_paused,
    }


__all__ = ["add_parser", "cluster_status"]
