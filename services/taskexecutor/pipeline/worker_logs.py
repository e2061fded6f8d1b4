"""The pipeline worker's attempt logs: every line goes to the task executor, which keeps them.

Capture works as in the task executor (:mod:`..attempt_logs`): by thread, while an attempt's
thread is bound to it, plus the lines Spark's Python workers send tagged with their attempt.
Each line is formatted here and sent as a ``PipelineLogLine``; the task executor appends it to
that attempt's log if the attempt runs there (a line for any other attempt is dropped there).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

# An unfinished printed line longer than MAX_PENDING_CHARS is sent as it is.
from sparkmill.services.taskexecutor.spark.python_worker_logs import (
    MAX_LINE_BYTES,
    MAX_PENDING_CHARS,
)

Send = Callable[[str, str], None]  # (attempt id, line)


class ForwardingAttemptLogs:
    """The worker's :class:`~sparkmill.services.taskexecutor.attempt_logs.AttemptCapture`."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._bound: dict[int, str] = {}  # thread ident -> attempt id
        self._partial: dict[tuple[int, str], str] = {}  # (thread, stream) -> unfinished line
        self._running: set[str] = set()

    @contextlib.contextmanager
    def bind(self, attempt_id: str) -> Iterator[None]:
        ident = threading.get_ident()
        with self._lock:
            self._bound[ident] = attempt_id
            self._running.add(attempt_id)
        try:
            yield
        finally:
            with self._lock:
                self._bound.pop(ident, None)
                self._running.discard(attempt_id)
                rest = [
                    self._partial.pop(key) for key in [k for k in self._partial if k[0] == ident]
                ]
            for text in rest:
                self._forward(attempt_id, text)

    def bound(self) -> bool:
        return threading.get_ident() in self._bound

    def write_line(self, line: str) -> None:
        attempt_id = self._bound.get(threading.get_ident())
        if attempt_id is not None:
            self._forward(attempt_id, line)

    def write_stream(self, stream: str, text: str) -> bool:
        ident = threading.get_ident()
        attempt_id = self._bound.get(ident)
        if attempt_id is None:
            return False
        with self._lock:
            pending = self._partial.get((ident, stream), "") + text
            *complete, rest = pending.split("\n")
            if len(rest) > MAX_PENDING_CHARS:
                complete.append(rest)
                rest = ""
            if rest:
                self._partial[(ident, stream)] = rest
            else:
                self._partial.pop((ident, stream), None)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        for line in complete:
            self._forward(attempt_id, f"{stamp} {stream}: {line}")
        return True

    def write_attempt_line(self, attempt_id: str, stream: str, line: str) -> bool:
        with self._lock:
            if attempt_id not in self._running:
                return False
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._forward(attempt_id, f"{stamp} {stream} (python worker): {line}")
        return True

    def _forward(self, attempt_id: str, line: str) -> None:
        # Never let a log line fail the code that printed it (the channel may be closing).
        with contextlib.suppress(Exception):
            self._send(attempt_id, line[: 4 * MAX_LINE_BYTES])
