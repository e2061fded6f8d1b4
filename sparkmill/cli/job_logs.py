"""``sparkmill jobs logs JOB_ID``: what the job's subtask attempts logged and printed on their
task executors (see docs/pipelines.md, "Logs").

Without ``--vertex`` every attempt of the job is printed, each under a header line; with it,
one subtask's attempt (``--subtask``, default 0; ``--attempt``, default the latest).
``--follow`` keeps reading the attempt's log until the attempt ends (like ``tail -f``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from sparkmill.cli.exit_codes import EXIT_OK
from sparkmill.cli.options import SubParsers, add_config_options
from sparkmill.common.v1 import jobs_pb2

if TYPE_CHECKING:
    from sparkmill.client import ClusterClient

FOLLOW_POLL_S = 1.0
READ_BYTES = 256 * 1024


def add_parser(jobs_sub: SubParsers[argparse.ArgumentParser]) -> None:
    p = jobs_sub.add_parser("logs", help="print what a job's subtask attempts logged")
    p.add_argument("job_id", metavar="JOB_ID", help="the job's id (see jobs list)")
    p.add_argument("--vertex", help="a vertex name or id (default: every attempt of the job)")
    p.add_argument("--subtask", type=int, default=0, help="subtask index (default 0)")
    p.add_argument("--attempt", type=int, default=-1, help="attempt number (default: latest)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
    add_config_options(p)


def header(ref: jobs_pb2.AttemptLogRef) -> str:
    return (
        f"==> {ref.vertex_name} subtask {ref.subtask_index} attempt #{ref.attempt_number} "
        f"(epoch {ref.job_master_epoch}) on {ref.task_executor} <=="
    )


def logs(client: ClusterClient, args: argparse.Namespace) -> int:
    if args.vertex is None:
        index = client.attempt_logs(args.job_id)
        if not index.logs:
            print(f"no attempt logs of job {args.job_id} are kept", file=sys.stderr)
        for ref in index.logs:
            print(header(ref))
            _print_attempt(
                client,
                args.job_id,
                ref.vertex_id,
                ref.subtask_index,
                ref.attempt_number,
                follow=False,
            )
        return EXIT_OK
    _print_attempt(client, args.job_id, args.vertex, args.subtask, args.attempt, follow=args.follow)
    return EXIT_OK


def _print_attempt(
    client: ClusterClient, job_id: str, vertex: str, subtask: int, attempt: int, *, follow: bool
) -> None:
    offset = 0
    while True:
        chunk = client.attempt_log(
            jobs_pb2.GetAttemptLogRequest(
                job_id=job_id,
                vertex=vertex,
                subtask_index=subtask,
                attempt_number=attempt,
                offset=offset,
                max_bytes=READ_BYTES,
            )
        )
        # Pin the attempt once found: "latest" must not jump to a newer attempt mid-way.
        attempt = chunk.ref.attempt_number
        vertex = chunk.ref.vertex_id or vertex
        if chunk.dropped_bytes:
            print(f"[... {chunk.dropped_bytes} bytes dropped by the log's size cap ...]")
        if chunk.text:
            sys.stdout.write(chunk.text)
            sys.stdout.flush()
        offset = chunk.next_offset
        more = chunk.next_offset > chunk.offset
        if more:
            continue
        if not follow or chunk.ended:
            return
        time.sleep(FOLLOW_POLL_S)
