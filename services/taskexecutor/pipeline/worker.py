"""The pipeline worker process (``sparkmill pipeline-worker``): runs a task executor's data-plane
attempts - the operator chain's unpickled functions, the Spark session, Spark's Python workers.

It serves exactly one task executor over one connection and exits when that connection ends:
after a ``PipelineWorkerShutdown``, on end of file (its task executor is gone), or on a frame it
cannot read. Every attempt runs on a thread of its own with the data plane's
:class:`~sparkmill.services.taskexecutor.spark.invokable.SparkInvokable`, as it would in the task
executor; its log lines and its result go back over the channel.

Two ways to get the connection:

* ``--fd N``: a connected socket inherited from the task executor that started it;
* systemd socket activation (``LISTEN_FDS=1``): it accepts one connection on fd 3, and only
  from ``--peer-user`` (the kernel's SO_PEERCRED), the user the task executor runs as.

The worker needs no configuration file and no key: the task executor sends what it needs
(``PipelineWorkerSetup``) as the first message.
"""

from __future__ import annotations

import argparse
import logging
import os
import pwd
import socket
import sys
import threading
import time
from collections.abc import Sequence

from sparkmill.common.v1 import pipeline_worker_pb2 as pw
from sparkmill.services.taskexecutor import attempt_logs
from sparkmill.services.taskexecutor.pipeline.channel import Channel, ChannelClosed, peer_uid
from sparkmill.services.taskexecutor.pipeline.codec import (
    attempt_from_proto,
    cancelled_result,
    failed_result,
    finished_result,
)
from sparkmill.services.taskexecutor.pipeline.worker_logs import ForwardingAttemptLogs

log = logging.getLogger("sparkmill.pipeline-worker")

SYSTEMD_FIRST_FD = 3
STATUS_POLL_S = 0.5
STOP_ATTEMPTS_S = 20.0  # how long the attempts cancelled at the end get to end, in all
MAX_RUNNING_ATTEMPTS = 1024  # far above any task executor's slots: a bound, not a limit in use


class PipelineWorker:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._lock = threading.Lock()
        self._running: dict[str, tuple[threading.Event, object]] = {}
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._manager: object = None
        self._services: dict[str, object] = {}

    # -- the connection ----------------------------------------------------------------------

    def serve(self) -> int:
        try:
            first = self.channel.receive()
        except ChannelClosed as exc:
            log.error("no set-up from the task executor: %s", exc)
            return 1
        if first.WhichOneof("body") != "setup":
            log.error(
                "the task executor's first message is a %s, not a set-up", first.WhichOneof("body")
            )
            return 1
        self._set_up(first.setup)
        try:
            while True:
                message = self.channel.receive()
                kind = message.WhichOneof("body")
                if kind == "run":
                    self._start_attempt(message.run)
                elif kind == "cancel":
                    self._cancel(message.cancel.attempt_id)
                elif kind == "shutdown":
                    log.info("the task executor asks the pipeline worker to stop")
                    break
                else:
                    log.error("a %s message from the task executor: ending the connection", kind)
                    break
        except ChannelClosed as exc:
            log.info("the task executor's channel ended (%s): stopping", exc)
        self._stop()
        return 0

    def _set_up(self, setup: pw.PipelineWorkerSetup) -> None:
        from sparkmill.services.taskexecutor.spark.session import SERVICE_KEY, SparkSessionManager

        attempt_logs.install(ForwardingAttemptLogs(self._send_log_line))
        conf = dict(setup.spark_conf)
        # Hadoop's local file system applies its own umask, not the process's: make them agree,
        # so the exchange files this worker writes are as writable by the service group.
        umask = os.umask(0)
        os.umask(umask)
        conf.setdefault("spark.hadoop.fs.permissions.umask-mode", f"{umask:03o}")
        manager = SparkSessionManager(
            setup.spark_master,
            app_name=setup.app_name or "sparkmill",
            ui_enabled=setup.spark_ui_enabled,
            conf=conf,
            warm_up=setup.warm_up,
            slots=setup.slots,
        )
        self._manager = manager
        self._services[SERVICE_KEY] = manager
        if setup.start_eagerly:
            manager.start()
        threading.Thread(target=self._report_status, name="status", daemon=True).start()
        log.info(
            "pipeline worker of task executor %s up (pid %d, uid %d)",
            setup.task_executor[:128],
            os.getpid(),
            os.geteuid(),
        )

    def _send(self, message: pw.PipelineWorkerMessage) -> None:
        try:
            self.channel.send(message)
        except ChannelClosed:
            self._stopped.set()

    def _send_log_line(self, attempt_id: str, line: str) -> None:
        self._send(
            pw.PipelineWorkerMessage(log=pw.PipelineLogLine(attempt_id=attempt_id, line=line))
        )

    def _report_status(self) -> None:
        from sparkmill.services.taskexecutor.spark.session import SparkSessionManager

        manager = self._manager
        assert isinstance(manager, SparkSessionManager)
        last: tuple[bool, str, str] | None = None
        while not self._stopped.is_set():
            error = manager.error
            now = (
                manager.is_up,
                manager.ui_url,
                f"{type(error).__name__}: {error}" if error else "",
            )
            if now != last:
                last = now
                self._send(
                    pw.PipelineWorkerMessage(
                        status=pw.PipelineWorkerStatus(
                            session_up=now[0],
                            spark_ui_url=now[1],
                            error=now[2],
                            pid=os.getpid(),
                            uid=os.geteuid(),
                        )
                    )
                )
            self._stopped.wait(STATUS_POLL_S)

    # -- attempts ----------------------------------------------------------------------------

    def _start_attempt(self, attempt: pw.PipelineAttempt) -> None:
        from sparkmill.services.taskexecutor.spark.invokable import SparkInvokable

        attempt_id = attempt.attempt_id
        with self._lock:
            if attempt_id in self._running or len(self._running) >= MAX_RUNNING_ATTEMPTS:
                refused = True
            else:
                refused = False
                invokable = SparkInvokable()
                context = attempt_from_proto(attempt)
                context.services = self._services
                self._running[attempt_id] = (context.cancelled, invokable)
        if refused:
            log.error(
                "attempt %s is already running here (or too many are): refused", attempt_id[:64]
            )
            return
        thread = threading.Thread(
            target=self._run_attempt,
            args=(context, invokable),
            name=f"task-{attempt.vertex_name[:40]}-{attempt.subtask_index}",
            daemon=True,
        )
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def _run_attempt(self, context: object, invokable: object) -> None:
        from sparkmill.services.taskexecutor.context import TaskContext
        from sparkmill.services.taskexecutor.spark.invokable import SparkInvokable

        assert isinstance(context, TaskContext) and isinstance(invokable, SparkInvokable)
        capture = attempt_logs.installed()
        assert isinstance(capture, ForwardingAttemptLogs)
        attempt_id = context.attempt_id
        with capture.bind(attempt_id):
            try:
                outcome = invokable.invoke(context)
                result = (
                    cancelled_result(attempt_id)
                    if context.cancelled.is_set()
                    else finished_result(attempt_id, outcome)
                )
            except BaseException as exc:
                if context.cancelled.is_set():
                    result = cancelled_result(attempt_id)
                else:
                    result = failed_result(attempt_id, exc)
                    result.message = with_user_hint(result.message)
        with self._lock:
            self._running.pop(attempt_id, None)
        self._send(pw.PipelineWorkerMessage(result=result))

    def _cancel(self, attempt_id: str) -> None:
        with self._lock:
            running = self._running.get(attempt_id)
        if running is None:
            return  # it ended already (its result is on its way) or never ran here
        cancelled, invokable = running
        cancelled.set()
        cancel = getattr(invokable, "cancel", None)
        if callable(cancel):
            cancel()

    def _stop(self) -> None:
        with self._lock:
            running = list(self._running)
        for attempt_id in running:
            self._cancel(attempt_id)
        deadline = time.monotonic() + STOP_ATTEMPTS_S
        for thread in list(self._threads):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._stopped.set()
        manager = self._manager
        stop = getattr(manager, "stop", None)
        if callable(stop):
            stop()
        self.channel.close()


def with_user_hint(message: str) -> str:
    """``message``, with who runs pipeline code when the error is a refused file access: the
    one fix is on the data's side (its owner grants this user access)."""
    if "permission denied" not in message.lower() and "AccessDenied" not in message:
        return message
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return (
        f"{message} (pipeline code runs as user {name!r}, uid {uid}: that user must be able to "
        "read the job's inputs and write its outputs)"
    )


def _systemd_connection(peer_user: str) -> socket.socket:
    if (
        os.environ.get("LISTEN_PID") not in (None, str(os.getpid()))
        or os.environ.get("LISTEN_FDS") != "1"
    ):
        raise SystemExit(
            "pipeline-worker: give --fd N, or run it socket-activated with one listening socket"
        )
    listener = socket.socket(fileno=SYSTEMD_FIRST_FD)
    expected = pwd.getpwnam(peer_user).pw_uid if peer_user else None
    while True:
        connection, _ = listener.accept()
        uid = peer_uid(connection)
        if expected is None or uid == expected:
            listener.close()  # one task executor per worker: systemd listens again after us
            return connection
        log.error(
            "refused a connection from uid %d: only %s (uid %s) may connect",
            uid,
            peer_user,
            expected,
        )
        connection.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sparkmill pipeline-worker",
        description="Run a task executor's pipeline code (started by the task executor, or by "
        "systemd socket activation).",
    )
    parser.add_argument(
        "--fd", type=int, help="a connected socket inherited from the task executor"
    )
    parser.add_argument(
        "--peer-user", default="", help="socket activation: the only user that may connect"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)-5s pipeline-worker[%(process)d] %(name)s: %(message)s",
    )
    if os.geteuid() == 0:
        log.warning(
            "SECURITY: the pipeline worker runs as root: pipeline code can read every secret"
        )
    sock = (
        socket.socket(fileno=args.fd)
        if args.fd is not None
        else _systemd_connection(args.peer_user)
    )
    return PipelineWorker(Channel(sock)).serve()
