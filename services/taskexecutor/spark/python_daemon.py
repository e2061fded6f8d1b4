"""Spark's Python daemon, with what user code prints in a Python worker sent to its attempt's log.

UDFs (``udf``, ``pandas_udf``, ``mapInPandas``, RDD functions) run in Spark's Python worker
processes, which Spark forks from a daemon (``pyspark.daemon``) and which write to the Spark
JVM's stderr: the task executor's own log, with nothing saying which attempt a line belongs to.
The task executor starts its local Spark with ``spark.python.daemon.module`` naming this module.
It runs Spark's daemon unchanged, except that each forked worker first wraps ``sys.stdout`` and
``sys.stderr``: every write still goes where it went, and each complete line is also sent as
one datagram to the task executor (an abstract Unix socket whose name the attempt's thread sets
as a Spark local property), tagged with the attempt id taken from the task's job group
(``sparkmill-<attempt id>``, set by the ``spark`` task). The task executor keeps the line in that
attempt's log (:mod:`.python_worker_logs`). Python's ``logging`` writes to ``sys.stderr`` (its
last-resort handler, or a ``StreamHandler`` the UDF creates), so UDF log records come along.

Sending never fails a task and hardly slows it: a line waits at most 0.2 s for room in the
task executor's queue (it reads as fast as lines come; the queue holds only ten datagrams), after
such a wait lines are dropped from the attempt log for a few seconds, and an absent receiver
drops the line at once; every line is still in the task executor's own log. Only what goes through
``sys.stdout``/``sys.stderr`` is seen, not writes to the file descriptors by native code.

This module is imported by the daemon *before* it forks its workers: it must start no thread
and import nothing heavy (Spark's daemon says the same of the worker module).
"""

from __future__ import annotations

import functools
import socket
import sys
import time
from typing import Any, TextIO

import pyspark.daemon as spark_daemon

from sparkmill.services.taskexecutor.attempt_logs import CopyingStream
from sparkmill.services.taskexecutor.spark.python_worker_logs import (
    ADDRESS_PROPERTY,
    JOB_GROUP_PREFIX,
    MAX_PENDING_CHARS,
    encode_line,
    socket_address,
)

# How long one line may wait for room in the task executor's queue, and how long lines are
# then dropped from the attempt log (never from the executor's log) before trying again.
SEND_TIMEOUT_S = 0.2
PAUSE_AFTER_TIMEOUT_S = 5.0


class AttemptLineSender:
    """Sends complete lines to the task executor, tagged with the running task's attempt."""

    def __init__(self) -> None:
        self._socket: socket.socket | None = None
        self._address = ""
        self._paused_until = 0.0
        self._pending: dict[tuple[str, str], str] = {}  # (attempt, stream) -> unfinished line

    def _attempt(self) -> tuple[str, str] | None:
        from pyspark.taskcontext import TaskContext  # set by the worker for each task

        context = TaskContext.get()
        if context is None:
            return None
        group = context.getLocalProperty("spark.jobGroup.id") or ""
        address = context.getLocalProperty(ADDRESS_PROPERTY) or ""
        if not group.startswith(JOB_GROUP_PREFIX) or not address:
            return None
        return group[len(JOB_GROUP_PREFIX) :], address

    def write(self, stream: str, text: str) -> None:
        found = self._attempt()
        if found is None:
            return
        attempt_id, address = found
        key = (attempt_id, stream)
        # One task at a time runs in a worker: lines left unfinished by an earlier one go now.
        for other in [k for k in self._pending if k[0] != attempt_id]:
            self._send(address, *other, self._pending.pop(other))
        pending = self._pending.pop(key, "") + text
        *lines, rest = pending.split("\n")
        for line in lines:
            self._send(address, attempt_id, stream, line)
        if len(rest) > MAX_PENDING_CHARS:  # a very long line without an end: send what is there
            self._send(address, attempt_id, stream, rest)
        elif rest:
            self._pending[key] = rest

    def _send(self, address: str, attempt_id: str, stream: str, line: str) -> None:
        if time.monotonic() < self._paused_until:
            return  # the task executor did not keep up a moment ago: do not slow the UDF
        try:
            if self._socket is None or self._address != address:
                self._close()
                # Connected: a send waits (briefly) while the receiver's queue is full, which
                # a burst of prints fills at once (net.unix.max_dgram_qlen is 10 datagrams).
                sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sender.settimeout(SEND_TIMEOUT_S)
                self._socket, self._address = sender, address
                sender.connect(socket_address(address))
            self._socket.send(encode_line(attempt_id, stream, line))
        except TimeoutError:
            self._paused_until = time.monotonic() + PAUSE_AFTER_TIMEOUT_S
        except OSError:
            self._close()  # the task executor is gone: the line stays in its own log only

    def _close(self) -> None:
        if self._socket is not None:
            self._socket.close()
        self._socket, self._address = None, ""


class _AttemptStream(CopyingStream):
    """``sys.stdout``/``sys.stderr`` of a Python worker: writes go on as before, and their
    lines also to the running attempt's log."""

    def __init__(self, inner: TextIO, name: str, sender: AttemptLineSender) -> None:
        super().__init__(inner, functools.partial(sender.write, name))


_spark_worker = spark_daemon.worker


def _worker(sock: Any, authenticated: bool) -> int:
    """Spark's per-task worker entry, with the worker's streams wrapped (once per process)."""
    if not isinstance(sys.stdout, _AttemptStream):
        sender = AttemptLineSender()
        sys.stdout = _AttemptStream(sys.stdout, "stdout", sender)
        sys.stderr = _AttemptStream(sys.stderr, "stderr", sender)
    return _spark_worker(sock, authenticated)


if __name__ == "__main__":
    spark_daemon.worker = _worker  # looked up by name when the daemon forks a worker
    spark_daemon.manager()
