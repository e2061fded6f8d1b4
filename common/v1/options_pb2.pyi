from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
FENCED_FIELD_NUMBER: _ClassVar[int]
fenced: _descriptor.FieldDescriptor
DEFAULT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
default_timeout_ms: _descriptor.FieldDescriptor
CALLERS_FIELD_NUMBER: _ClassVar[int]
callers: _descriptor.FieldDescriptor
LARGE_REQUEST_FIELD_NUMBER: _ClassVar[int]
large_request: _descriptor.FieldDescriptor
