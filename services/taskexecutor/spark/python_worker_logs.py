"""The Python workers' log lines: their wire format, and the task executor's receiver (the
sending end is :mod:`.python_daemon`; this module imports only the standard library, as the
daemon imports it before forking its workers).

A thread receives datagrams on an abstract Unix socket with a random name and appends each line
to the log of the attempt it names, if that attempt runs on this task executor now. A datagram
is accepted only from a process of this task executor's own user (the kernel's
``SCM_CREDENTIALS``, requested with ``SO_PASSCRED``): an abstract socket has no file mode, and
another local user must not write into a job's logs. Lines of attempts that do not run here are
dropped; each line is bounded by the sender and by the receive buffer size.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import struct
import threading
from typing import Protocol

log = logging.getLogger(__name__)

# The Spark local property holding the receiver's address ("@name": Linux's abstract namespace).
ADDRESS_PROPERTY = "sparkmill.python-worker-log.address"
# The job group of a sparkmill attempt's Spark jobs: this prefix, then the attempt id.
JOB_GROUP_PREFIX = "sparkmill-"
MAX_LINE_BYTES = 8192
MAX_PENDING_CHARS = 65536  # an unfinished line longer than this is sent as it is
_RECEIVE_BYTES = 16384
_FLUSH_MARKER = b"\0flush\0"  # never a line: a line's datagram starts with its attempt id
_CREDENTIALS = struct.Struct("iII")  # struct ucred: pid, uid, gid


class AttemptLineSink(Protocol):
    def write_attempt_line(self, attempt_id: str, stream: str, line: str) -> bool:
        """Append ``line`` to the running attempt ``attempt_id``'s log; False if none runs."""


def encode_line(attempt_id: str, stream: str, line: str) -> bytes:
    """One datagram: ``attempt id NUL stream NUL line``, the line cut to a bounded size."""
    data = line.encode("utf-8", "replace")[:MAX_LINE_BYTES]
    return attempt_id.encode("ascii", "replace") + b"\0" + stream.encode("ascii") + b"\0" + data


def socket_address(address: str) -> str:
    """The ``socket`` form of an address given as ``@name`` (abstract) or a path."""
    return "\0" + address[1:] if address.startswith("@") else address


def decode_line(data: bytes) -> tuple[str, str, str] | None:
    """``(attempt id, stream, line)`` of a datagram, or None when it is not one of ours."""
    parts = data.split(b"\0", 2)
    if len(parts) != 3:
        return None
    attempt_id, stream, line = (p.decode("utf-8", "replace") for p in parts)
    if stream not in ("stdout", "stderr") or not attempt_id or len(attempt_id) > 64:
        return None
    return attempt_id, stream, line


class PythonWorkerLogReceiver:
    """Receives the Python workers' lines for ``sink`` until :meth:`stop`."""

    def __init__(self, sink: AttemptLineSink) -> None:
        self._sink = sink
        self.address = f"@sparkmill-python-workers-{os.getpid()}-{secrets.token_hex(8)}"
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._socket.bind(socket_address(self.address))
        self._socket.settimeout(1.0)  # stop() also wakes it with an empty datagram
        self._stopped = threading.Event()
        self._uid = os.getuid()
        self.received = 0
        self.refused = 0  # from another user, or not a line of ours
        self._flushes: dict[bytes, threading.Event] = {}  # marker -> set once it is read
        self._flushes_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="python-worker-logs", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        space = socket.CMSG_SPACE(_CREDENTIALS.size)
        while not self._stopped.is_set():
            try:
                data, ancillary, _flags, _peer = self._socket.recvmsg(_RECEIVE_BYTES, space)
            except TimeoutError:
                continue
            except OSError:
                if not self._stopped.is_set():
                    log.warning("the Python workers' log socket failed", exc_info=True)
                return
            if self._stopped.is_set():
                return
            if not self._from_own_user(ancillary):
                self.refused += 1
                continue
            if data.startswith(_FLUSH_MARKER):
                with self._flushes_lock:
                    flushed = self._flushes.get(data)
                if flushed is not None:
                    flushed.set()
                continue
            decoded = decode_line(data)
            if decoded is None:
                self.refused += 1
                continue
            self.received += 1
            try:
                self._sink.write_attempt_line(*decoded)
            except Exception:  # a log line must never stop the receiver
                log.debug("a Python worker's line could not be kept", exc_info=True)

    def _from_own_user(self, ancillary: list[tuple[int, int, bytes]]) -> bool:
        for level, kind, payload in ancillary:
            if (
                level == socket.SOL_SOCKET
                and kind == socket.SCM_CREDENTIALS
                and len(payload) >= _CREDENTIALS.size
            ):
                uid: int = _CREDENTIALS.unpack_from(payload)[1]
                return uid == self._uid
        return False

    def flush(self, timeout_s: float = 2.0) -> bool:
        """Return once every line sent before this call has been handled (False after
        ``timeout_s``). An attempt calls it as its Spark jobs are done and before it ends: its
        UDFs sent their last lines before those jobs ended, and one socket's datagrams are read
        in the order they arrived, so a marker sent now comes after all of them; without it a
        last line could arrive when the attempt no longer runs, and be dropped."""
        marker = _FLUSH_MARKER + secrets.token_hex(8).encode()
        flushed = threading.Event()
        with self._flushes_lock:
            self._flushes[marker] = flushed
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
                sender.sendto(marker, socket_address(self.address))
            return flushed.wait(timeout_s)
        except OSError:
            return False
        finally:
            with self._flushes_lock:
                self._flushes.pop(marker, None)

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as wake:
            wake.sendto(b"", socket_address(self.address))  # the thread need not time out
        self._thread.join(timeout=2.0)
        self._socket.close()
