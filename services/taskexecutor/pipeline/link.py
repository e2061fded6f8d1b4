"""The task executor's end of its pipeline worker: starts (or connects to) the worker, hands it
attempts, and gives each attempt's thread its outcome.

Everything here runs on threads: an attempt's own thread blocks in :meth:`PipelineWorkerLink.run`
until the worker answers, one reader thread per connection receives the worker's messages, and
the event loop only calls the non-blocking :meth:`PipelineWorkerLink.cancel` and reads
:attr:`PipelineWorkerLink.ui_url`. When the worker ends (it crashed, pipeline code killed it),
every attempt it ran fails with an environment error - the JobMaster runs them again, never
taking it for the task's own fault - and the next attempt starts a new worker.

The worker is the less trusted side: a result counts only for an attempt this link handed over
and has not heard of yet, a log line only for an attempt that runs, lost partitions only among
the attempt's own inputs, and a message that breaks the protocol ends the connection.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparkmill.common.core.errors import TaskCancelledError
from sparkmill.common.v1 import pipeline_worker_pb2 as pw
from sparkmill.services.taskexecutor.context import TaskContext, TaskOutcome
from sparkmill.services.taskexecutor.pipeline import launch
from sparkmill.services.taskexecutor.pipeline.channel import Channel, ChannelClosed
from sparkmill.services.taskexecutor.pipeline.codec import (
    RemoteAttemptError,
    attempt_to_proto,
    outcome_of,
)

log = logging.getLogger(__name__)

SERVICE_KEY = "pipeline-worker"
"""Key of the link in the task executor's task services."""
CONNECT_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
CANCEL_WATCHDOG_S = 60.0

LineSink = Callable[[str, str], bool]  # (attempt id, line) -> kept


class PipelineWorkerLost(ConnectionError):
    """The pipeline worker ended, or its channel broke, while an attempt ran on it (an
    environment failure: the attempt runs again, elsewhere or on a new worker)."""


@dataclass
class _Pending:
    context: TaskContext
    done: threading.Event = field(default_factory=threading.Event)
    result: pw.PipelineAttemptResult | None = None
    lost: str = ""


class _Connection:
    """One worker and its channel."""

    def __init__(
        self, channel: Channel, process: subprocess.Popen[bytes] | None, workdir: Path | None
    ) -> None:
        self.channel = channel
        self.process = process
        self.workdir = workdir
        self.alive = True
        self.pending: dict[str, _Pending] = {}

    def describe_end(self) -> str:
        if self.process is None:
            return "the pipeline worker closed its socket"
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=2.0)
        code = self.process.returncode
        if code is None:
            return "the pipeline worker's channel broke"
        if code < 0:
            return f"the pipeline worker was killed by signal {-code}"
        return f"the pipeline worker exited with code {code}"


class PipelineWorkerLink:
    def __init__(
        self,
        setup: pw.PipelineWorkerSetup,
        *,
        socket_path: str = "",
        user: str = launch.SAME_USER,
        exchange_dir: str = "",
        resource_id: str = "",
        log_lines: LineSink | None = None,
    ) -> None:
        self.setup = setup
        self._socket_path = socket_path
        self._configured_user = user
        self._exchange_dir = exchange_dir
        self._resource_id = resource_id
        self._log_lines = log_lines
        # Resolved (and created, as root) when the first worker starts: not in a constructor.
        self._user: launch.PipelineUser | None = None
        self._user_resolved = False
        # _lock guards the state below and is only ever held briefly (the event loop takes it
        # to cancel); _opening serializes starting a worker, which may take seconds.
        self._lock = threading.Lock()
        self._opening = threading.Lock()
        self._connection: _Connection | None = None
        self._stopped = False
        self.ui_url = ""
        self.session_error = ""
        self.session_up = False
        self.worker_pid = 0
        self.worker_uid = -1
        # For the metrics: workers started (or connected to), and workers that ended while the
        # task executor still needed them.
        self.starts_total = 0
        self.losses_total = 0

    @property
    def is_up(self) -> bool:
        """True while the worker's Spark session is up (the ``spark_session_up`` gauge)."""
        connection = self._connection
        return self.session_up and connection is not None and connection.alive

    @property
    def worker_running(self) -> bool:
        connection = self._connection
        return connection is not None and connection.alive

    @property
    def runs_as(self) -> str:
        """Who runs pipeline code (for the log and the docs' checks)."""
        if self._socket_path:
            return f"the worker behind {self._socket_path}"
        return self._user.name if self._user is not None else "this task executor's user"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker in the background (its Spark session comes up eagerly if set)."""
        threading.Thread(
            target=self._start_quietly, name="pipeline-worker-start", daemon=True
        ).start()

    def _start_quietly(self) -> None:
        try:
            self._connected()
        except Exception as exc:
            log.warning(
                "the pipeline worker did not start: %s (the first attempt tries again)", exc
            )

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Tell the worker to end its attempts and its Spark session, and wait for it."""
        with self._lock:
            self._stopped = True
            connection, self._connection = self._connection, None
        if connection is None:
            return
        with contextlib.suppress(ChannelClosed, ValueError):
            connection.channel.send(pw.PipelineWorkerMessage(shutdown=pw.PipelineWorkerShutdown()))
        if connection.process is not None:
            try:
                connection.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("the pipeline worker did not stop within %.0fs: killing it", timeout_s)
                connection.process.kill()
                connection.process.wait(timeout=10)
        connection.channel.close()
        if connection.workdir is not None:
            launch.remove_directory(connection.workdir)

    def _connected(self) -> _Connection:
        with self._opening:
            with self._lock:
                if self._stopped:
                    raise PipelineWorkerLost("the task executor is stopping")
                if self._connection is not None and self._connection.alive:
                    return self._connection
            connection = self._open()
            if not self._adopt(connection):
                connection.channel.close()
                raise PipelineWorkerLost("the task executor is stopping")
        threading.Thread(
            target=self._read, args=(connection,), name="pipeline-worker-reader", daemon=True
        ).start()
        return connection

    def _adopt(self, connection: _Connection) -> bool:
        """Make ``connection`` the link's; False when the task executor stopped meanwhile."""
        with self._lock:
            if self._stopped:
                return False
            self._connection = connection
            self.starts_total += 1
            return True

    def _open(self) -> _Connection:
        process: subprocess.Popen[bytes] | None = None
        workdir: Path | None = None
        if self._socket_path:
            sock = launch.connect_socket(self._socket_path, CONNECT_TIMEOUT_S)
        else:
            if not self._user_resolved:
                self._user = launch.resolve_pipeline_user(self._configured_user)
                self._user_resolved = True
            workdir = launch.prepare_directories(self._user, self._exchange_dir, self._resource_id)
            try:
                process, sock = launch.spawn_worker(self._user, workdir)
            except OSError as exc:
                launch.remove_directory(workdir)
                raise PipelineWorkerLost(
                    f"the pipeline worker cannot be started as {self.runs_as}: {exc} (that "
                    "user must be able to run this Python and read sparkmill's installation, "
                    "e.g. a virtualenv under /opt; or set taskmanager.pipeline-worker.user: "
                    f"{launch.SAME_USER})"
                ) from exc
            log.info("started the pipeline worker (pid %d) as %s", process.pid, self.runs_as)
        channel = Channel(sock)
        try:
            channel.send(pw.PipelineWorkerMessage(setup=self.setup))
        except ChannelClosed:
            channel.close()
            raise
        return _Connection(channel, process, workdir)

    # -- attempts (task threads) -------------------------------------------------------------

    def run(self, context: TaskContext) -> TaskOutcome:
        """Run ``context``'s attempt on the worker; blocks until it ends there."""
        try:
            connection = self._connected()
        except PipelineWorkerLost:
            raise
        except (OSError, ChannelClosed) as exc:
            raise PipelineWorkerLost(f"the pipeline worker cannot be reached: {exc}") from exc
        pending = _Pending(context)
        with self._lock:
            if not connection.alive:
                raise PipelineWorkerLost("the pipeline worker ended before the attempt started")
            connection.pending[context.attempt_id] = pending
        try:
            connection.channel.send(pw.PipelineWorkerMessage(run=attempt_to_proto(context)))
            if context.cancelled.is_set():
                self._send_cancel(connection, context.attempt_id)
            pending.done.wait()
        finally:
            with self._lock:
                connection.pending.pop(context.attempt_id, None)
        if pending.result is None:
            if context.cancelled.is_set():
                raise TaskCancelledError(f"cancelled; {pending.lost}")
            raise PipelineWorkerLost(f"{pending.lost} while the attempt ran")
        try:
            return outcome_of(pending.result)
        except RemoteAttemptError as exc:
            # Only the attempt's own inputs can be lost: the worker names nothing else.
            own = {
                (p.dataset_id, p.partition_number, p.producer_attempt_id)
                for gate in context.inputs
                for p in gate.partitions
            }
            exc.lost_partitions = tuple(
                p
                for p in exc.lost_partitions
                if (p.dataset_id, p.partition_number, p.producer_attempt_id) in own
            )
            raise

    def cancel(self, attempt_id: str) -> None:
        """Ask the worker to stop an attempt (called on any thread; never blocks long).

        An attempt still running :data:`CANCEL_WATCHDOG_S` later ends its worker (Flink's task
        cancellation watchdog ends the TaskManager): pipeline code that ignores cancellation
        must not keep a slot forever.
        """
        with self._lock:
            connection = self._connection
            if connection is None or attempt_id not in connection.pending:
                return
        # Sent from a thread of its own: a task thread may hold the channel's send lock while
        # it sends a large deployment, and the event loop must never wait for that.
        threading.Thread(
            target=self._send_cancel, args=(connection, attempt_id), daemon=True
        ).start()
        watchdog = threading.Timer(
            CANCEL_WATCHDOG_S, self._cancel_overdue, args=(connection, attempt_id)
        )
        watchdog.daemon = True
        watchdog.start()

    def _cancel_overdue(self, connection: _Connection, attempt_id: str) -> None:
        with self._lock:
            overdue = connection.alive and attempt_id in connection.pending
        if not overdue:
            return
        log.warning(
            "attempt %s did not end within %.0fs of its cancellation: ending the pipeline worker",
            attempt_id[:32],
            CANCEL_WATCHDOG_S,
        )
        if connection.process is not None:
            with contextlib.suppress(OSError):
                connection.process.kill()
        connection.channel.close()  # the reader thread fails what still runs there

    def _send_cancel(self, connection: _Connection, attempt_id: str) -> None:
        message = pw.PipelineWorkerMessage(cancel=pw.CancelPipelineAttempt(attempt_id=attempt_id))
        with contextlib.suppress(ChannelClosed):
            connection.channel.send(message)

    # -- the reader thread -------------------------------------------------------------------

    def _read(self, connection: _Connection) -> None:
        try:
            while True:
                self._handle(connection, connection.channel.receive())
        except ChannelClosed as exc:
            ending = str(exc)
        except Exception as exc:  # a bug here must not leave attempts waiting forever
            log.exception("reading from the pipeline worker failed")
            ending = f"reading from the pipeline worker failed: {exc}"
        self._lost(connection, ending)

    def _handle(self, connection: _Connection, message: pw.PipelineWorkerMessage) -> None:
        kind = message.WhichOneof("body")
        if kind == "result":
            with self._lock:
                pending = connection.pending.get(message.result.attempt_id)
                if pending is None or pending.done.is_set():
                    log.warning(
                        "the pipeline worker sent a result for attempt %r, which does not run "
                        "there: ignored",
                        message.result.attempt_id[:64],
                    )
                    return
                pending.result = message.result
                pending.done.set()
        elif kind == "log":
            if self._log_lines is not None and message.log.attempt_id in connection.pending:
                self._log_lines(message.log.attempt_id, message.log.line[:65536])
        elif kind == "status":
            status = message.status
            self.session_up = status.session_up
            self.ui_url = (
                status.spark_ui_url[:2048] if status.spark_ui_url.startswith("http") else ""
            )
            self.session_error = status.error[:4096]
            self.worker_pid, self.worker_uid = status.pid, status.uid
            if status.error:
                log.error("the pipeline worker's Spark session failed: %s", status.error[:4096])
        else:
            raise ChannelClosed(
                f"the pipeline worker sent a {kind} message, which only the task executor sends"
            )

    def _lost(self, connection: _Connection, ending: str) -> None:
        with self._lock:
            connection.alive = False
            waiting = list(connection.pending.values())
            if self._connection is connection:
                self._connection = None
            stopping = self._stopped
        connection.channel.close()
        if stopping and not waiting:
            return
        if not stopping:
            self.losses_total += 1
        reason = connection.describe_end()
        log.log(
            logging.INFO if stopping else logging.WARNING,
            "%s (%s); %d attempt(s) on it fail",
            reason,
            ending,
            len(waiting),
        )
        for pending in waiting:
            pending.lost = reason
            pending.done.set()
        self.ui_url = ""
        self.session_up = False
        if connection.workdir is not None and connection.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                connection.process.wait(timeout=5)
            launch.remove_directory(connection.workdir)


class PipelineWorkerInvokable:
    """The ``spark`` operator kind in a task executor: the attempt runs in the pipeline worker."""

    def __init__(self, link: PipelineWorkerLink) -> None:
        self._link = link
        self._attempt_id = ""

    def invoke(self, context: TaskContext) -> TaskOutcome:
        self._attempt_id = context.attempt_id
        return self._link.run(context)

    def cancel(self) -> None:
        if self._attempt_id:
            self._link.cancel(self._attempt_id)
