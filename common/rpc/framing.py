"""The one place that knows how an RPC message looks on the wire.

Every message is a ZeroMQ multipart message of exactly three frames::

    [MAGIC, header, payload]

* ``MAGIC`` is ``b"SM1"``: protocol family and version. A peer speaking anything else (a port
  scanner, an old version, random bytes) is detected on the first frame.
* ``header`` is a serialized ``sparkmill.v1.RequestHeader`` (request id, service, method,
  timeout, fencing token, caller) or ``sparkmill.v1.ResponseHeader`` (request id, error code,
  message, details).
* ``payload`` is the serialized request or response message (empty for an error reply).

A ROUTER socket prepends the peer's identity frame on receive and expects it on send; that frame
is handled by the server and never reaches these functions.

Decoding never trusts its input: anything malformed raises :class:`FrameError`, which the server
counts and (when it can still find a request id) answers with ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError, Message

from sparkmill.common.core.errors import ErrorCode, RpcError
from sparkmill.common.core.proto_convert import error_code_to_proto
from sparkmill.common.v1 import envelope_pb2

MAGIC = b"SM1"
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
HANDSHAKE_TIMEOUT_S = 5.0
"""How long a peer has to complete the ZMTP and CURVE handshake before it is dropped."""
DEFAULT_MAX_CONTROL_MESSAGE_BYTES = 4 * 1024 * 1024


class FrameError(Exception):
    """A received message is not a valid sparkmill RPC message (internal to the RPC layer)."""

    def __init__(self, reason: str, request_id: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One RPC method, derived from its service descriptor by scripts/gen_protos.py."""

    name: str  # e.g. "SubmitJob"
    handler_name: str  # e.g. "submit_job"
    request_type: Any  # the protobuf message class (Any: protobuf classes are untyped here)
    response_type: Any
    fenced: bool
    default_timeout_s: float
    # Roles allowed to call it (("*",): any admitted member); see options.proto ``callers``.
    callers: tuple[str, ...] = ("*",)
    # May be as large as rpc.max-message-size; others get rpc.max-control-message-size.
    large_request: bool = False


# Every FrameError reason starts with a fixed "kind: " prefix (never input data): the server
# counts malformed messages by that prefix, and garbage must not grow its counters without bound.


def _check_shape(frames: list[bytes]) -> None:
    if len(frames) != 3:
        raise FrameError(
            f"wrong frame count: expected 3 frames [magic, header, payload], got {len(frames)}"
        )
    if frames[0] != MAGIC:
        raise FrameError(f"bad magic: first frame {frames[0][:16]!r}, expected {MAGIC!r}")


def _check_size(frames: list[bytes], max_bytes: int, request_id: int | None = None) -> None:
    size = len(frames[1]) + len(frames[2])
    if size > max_bytes:
        raise FrameError(
            f"message too large: {size} bytes exceed the limit of {max_bytes} bytes", request_id
        )


def encode_request(header: envelope_pb2.RequestHeader, payload: Message) -> list[bytes]:
    return [MAGIC, header.SerializeToString(), payload.SerializeToString()]


def decode_request(
    frames: list[bytes], max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> tuple[envelope_pb2.RequestHeader, bytes]:
    """Split a request into its header and still-serialized payload, or raise FrameError."""
    _check_shape(frames)
    if len(frames[1]) > max_bytes:
        _check_size(frames, max_bytes)  # not even the header is worth decoding
    header = envelope_pb2.RequestHeader()
    try:
        header.ParseFromString(frames[1])
    except DecodeError as exc:
        raise FrameError(f"undecodable request header: {exc}") from None
    # An oversized payload behind a readable header is answered (INVALID_ARGUMENT), so the caller
    # fails fast instead of waiting for its timeout.
    _check_size(frames, max_bytes, header.request_id or None)
    if not header.request_id or not header.method or not header.service:
        raise FrameError("request header lacks request_id, service or method", header.request_id)
    return header, frames[2]


def decode_payload(payload: bytes, message_type: Any, request_id: int) -> Message:
    message: Message = message_type()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise FrameError(
            f"undecodable {message_type.DESCRIPTOR.full_name} payload: {exc}", request_id
        ) from None
    return message


def encode_response(request_id: int, payload: Message) -> list[bytes]:
    header = envelope_pb2.ResponseHeader(
        request_id=request_id, code=error_code_to_proto(ErrorCode.OK)
    )
    return [MAGIC, header.SerializeToString(), payload.SerializeToString()]


def _wire_text(text: str) -> str:
    """Protobuf strings must be valid UTF-8; error text may not be (surrogate-escaped paths)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def encode_error(request_id: int, error: RpcError) -> list[bytes]:
    header = envelope_pb2.ResponseHeader(
        request_id=request_id,
        code=error_code_to_proto(error.code),
        message=_wire_text(error.message),
        details=_wire_text(error.details),
    )
    return [MAGIC, header.SerializeToString(), b""]


def decode_response(
    frames: list[bytes], max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> tuple[envelope_pb2.ResponseHeader, bytes]:
    _check_shape(frames)
    _check_size(frames, max_bytes)
    header = envelope_pb2.ResponseHeader()
    try:
        header.ParseFromString(frames[1])
    except DecodeError as exc:
        raise FrameError(f"undecodable response header: {exc}") from None
    return header, frames[2]
