"""Framing of the pipeline worker's channel: a 4-byte big-endian length, then one serialized
``PipelineWorkerMessage``, over a connected Unix stream socket.

Both ends are threads on blocking sockets: the task executor's event loop never touches the
socket (its attempts already run on threads of their own). A frame longer than the reader's
bound, or one that does not parse, ends the connection: the peer is confused or hostile, and
nothing after it can be trusted to be aligned.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

from google.protobuf.message import DecodeError

from sparkmill.common.v1 import pipeline_worker_pb2 as pw

_LENGTH = struct.Struct(">I")
# An attempt's deployment carries its operator payload and input gates (bounded by the
# JobMaster's batch limit), a result its collected rows (bounded by the runner): both fit.
MAX_FRAME_BYTES = 64 * 1024 * 1024


class ChannelClosed(ConnectionError):
    """The other end closed the channel, or sent something that is not a frame of ours."""


class Channel:
    """One end of the channel: whole messages out (thread-safe) and in (one reader thread)."""

    def __init__(self, sock: socket.socket, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.sock = sock
        self.max_frame_bytes = max_frame_bytes
        self._send_lock = threading.Lock()

    def send(self, message: pw.PipelineWorkerMessage) -> None:
        data = message.SerializeToString()
        if len(data) > self.max_frame_bytes:
            raise ValueError(
                f"a {message.WhichOneof('body')} message of {len(data)} bytes is over the "
                f"channel's {self.max_frame_bytes}-byte limit"
            )
        with self._send_lock:
            try:
                self.sock.sendall(_LENGTH.pack(len(data)) + data)
            except OSError as exc:
                raise ChannelClosed(f"the channel is closed: {exc}") from exc

    def receive(self) -> pw.PipelineWorkerMessage:
        """The next message; raises :class:`ChannelClosed` at the end or on a bad frame."""
        (length,) = _LENGTH.unpack(self._read_exactly(_LENGTH.size))
        if length > self.max_frame_bytes:
            raise ChannelClosed(
                f"the peer sent a {length}-byte frame (at most {self.max_frame_bytes})"
            )
        message = pw.PipelineWorkerMessage()
        try:
            message.ParseFromString(self._read_exactly(length))
        except DecodeError as exc:
            raise ChannelClosed(f"the peer sent a frame that does not parse: {exc}") from exc
        if message.WhichOneof("body") is None:
            raise ChannelClosed("the peer sent a message with no body")
        return message

    def _read_exactly(self, count: int) -> bytes:
        chunks: list[bytes] = []
        left = count
        while left:
            try:
                chunk = self.sock.recv(min(left, 1 << 20))
            except OSError as exc:
                raise ChannelClosed(f"the channel is closed: {exc}") from exc
            if not chunk:
                raise ChannelClosed("the peer closed the channel")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (the kernel's SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)
