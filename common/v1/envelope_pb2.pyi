from sparkmill.common.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RequestHeader(_message.Message):
    __slots__ = ("request_id", "service", "method", "timeout_ms", "fencing_token", "caller", "one_way")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ONE_WAY_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    service: str
    method: str
    timeout_ms: int
    fencing_token: str
    caller: str
    one_way: bool
    def __init__(self, request_id: _Optional[int] = ..., service: _Optional[str] = ..., method: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., fencing_token: _Optional[str] = ..., caller: _Optional[str] = ..., one_way: _Optional[bool] = ...) -> None: ...

class ResponseHeader(_message.Message):
    __slots__ = ("request_id", "code", "message", "details")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    code: _common_pb2.ErrorCode
    message: str
    details: str
    def __init__(self, request_id: _Optional[int] = ..., code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ..., details: _Optional[str] = ...) -> None: ...
