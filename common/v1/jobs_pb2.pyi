from sparkmill.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VertexDetails(_message.Message):
    __slots__ = ("vertex_id", "name", "parallelism", "tasks_by_state", "subtask_attempts", "records_in", "records_out", "bytes_in", "bytes_out", "subtask_task_executors", "subtask_states", "subtask_start_times", "subtask_end_times", "parallelism_decision", "speculative_attempts", "speculative_wins", "subtask_speculative_running")
    class TasksByStateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    TASKS_BY_STATE_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_IN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_OUT_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_TASK_EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_STATES_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_START_TIMES_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_END_TIMES_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_DECISION_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_WINS_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_SPECULATIVE_RUNNING_FIELD_NUMBER: _ClassVar[int]
    vertex_id: str
    name: str
    parallelism: int
    tasks_by_state: _containers.ScalarMap[int, int]
    subtask_attempts: _containers.RepeatedScalarFieldContainer[int]
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int
    subtask_task_executors: _containers.RepeatedScalarFieldContainer[str]
    subtask_states: _containers.RepeatedScalarFieldContainer[int]
    subtask_start_times: _containers.RepeatedScalarFieldContainer[float]
    subtask_end_times: _containers.RepeatedScalarFieldContainer[float]
    parallelism_decision: str
    speculative_attempts: int
    speculative_wins: int
    subtask_speculative_running: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, vertex_id: _Optional[str] = ..., name: _Optional[str] = ..., parallelism: _Optional[int] = ..., tasks_by_state: _Optional[_Mapping[int, int]] = ..., subtask_attempts: _Optional[_Iterable[int]] = ..., records_in: _Optional[int] = ..., records_out: _Optional[int] = ..., bytes_in: _Optional[int] = ..., bytes_out: _Optional[int] = ..., subtask_task_executors: _Optional[_Iterable[str]] = ..., subtask_states: _Optional[_Iterable[int]] = ..., subtask_start_times: _Optional[_Iterable[float]] = ..., subtask_end_times: _Optional[_Iterable[float]] = ..., parallelism_decision: _Optional[str] = ..., speculative_attempts: _Optional[int] = ..., speculative_wins: _Optional[int] = ..., subtask_speculative_running: _Optional[_Iterable[int]] = ...) -> None: ...

class BlockedTaskExecutor(_message.Message):
    __slots__ = ("resource_id", "until")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    until: float
    def __init__(self, resource_id: _Optional[str] = ..., until: _Optional[float] = ...) -> None: ...

class TaskFailure(_message.Message):
    __slots__ = ("timestamp", "vertex_name", "subtask_index", "attempt_number", "task_executor", "error")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VERTEX_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    TASK_EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    timestamp: float
    vertex_name: str
    subtask_index: int
    attempt_number: int
    task_executor: str
    error: _common_pb2.ErrorInfo
    def __init__(self, timestamp: _Optional[float] = ..., vertex_name: _Optional[str] = ..., subtask_index: _Optional[int] = ..., attempt_number: _Optional[int] = ..., task_executor: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ...) -> None: ...

class JobDetails(_message.Message):
    __slots__ = ("job_id", "name", "status", "submitted_at", "ended_at", "vertices", "failure", "job_master_address", "restarts", "exceptions", "recovered_subtasks", "job_master", "pipeline_args", "slot_wait_reason", "blocked_task_executors")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    EXCEPTIONS_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_SUBTASKS_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ARGS_FIELD_NUMBER: _ClassVar[int]
    SLOT_WAIT_REASON_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_TASK_EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    status: _common_pb2.JobStatus
    submitted_at: float
    ended_at: float
    vertices: _containers.RepeatedCompositeFieldContainer[VertexDetails]
    failure: _common_pb2.ErrorInfo
    job_master_address: str
    restarts: int
    exceptions: _containers.RepeatedCompositeFieldContainer[TaskFailure]
    recovered_subtasks: int
    job_master: _common_pb2.ServiceInfo
    pipeline_args: _containers.RepeatedScalarFieldContainer[str]
    slot_wait_reason: str
    blocked_task_executors: _containers.RepeatedCompositeFieldContainer[BlockedTaskExecutor]
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.JobStatus, str]] = ..., submitted_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., vertices: _Optional[_Iterable[_Union[VertexDetails, _Mapping]]] = ..., failure: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., job_master_address: _Optional[str] = ..., restarts: _Optional[int] = ..., exceptions: _Optional[_Iterable[_Union[TaskFailure, _Mapping]]] = ..., recovered_subtasks: _Optional[int] = ..., job_master: _Optional[_Union[_common_pb2.ServiceInfo, _Mapping]] = ..., pipeline_args: _Optional[_Iterable[str]] = ..., slot_wait_reason: _Optional[str] = ..., blocked_task_executors: _Optional[_Iterable[_Union[BlockedTaskExecutor, _Mapping]]] = ...) -> None: ...

class JobResult(_message.Message):
    __slots__ = ("job_id", "status", "failure", "details", "accumulators")
    class AccumulatorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    ACCUMULATORS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    status: _common_pb2.JobStatus
    failure: _common_pb2.ErrorInfo
    details: JobDetails
    accumulators: _containers.ScalarMap[str, bytes]
    def __init__(self, job_id: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.JobStatus, str]] = ..., failure: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., details: _Optional[_Union[JobDetails, _Mapping]] = ..., accumulators: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class HostedJob(_message.Message):
    __slots__ = ("job_id", "status", "job_master_session_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    status: _common_pb2.JobStatus
    job_master_session_id: str
    def __init__(self, job_id: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.JobStatus, str]] = ..., job_master_session_id: _Optional[str] = ...) -> None: ...

class AttemptLogRef(_message.Message):
    __slots__ = ("job_id", "vertex_id", "vertex_name", "subtask_index", "attempt_number", "job_master_epoch", "attempt_id", "task_executor")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    VERTEX_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    vertex_id: str
    vertex_name: str
    subtask_index: int
    attempt_number: int
    job_master_epoch: int
    attempt_id: str
    task_executor: str
    def __init__(self, job_id: _Optional[str] = ..., vertex_id: _Optional[str] = ..., vertex_name: _Optional[str] = ..., subtask_index: _Optional[int] = ..., attempt_number: _Optional[int] = ..., job_master_epoch: _Optional[int] = ..., attempt_id: _Optional[str] = ..., task_executor: _Optional[str] = ...) -> None: ...

class ListAttemptLogsRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class AttemptLogIndex(_message.Message):
    __slots__ = ("logs",)
    LOGS_FIELD_NUMBER: _ClassVar[int]
    logs: _containers.RepeatedCompositeFieldContainer[AttemptLogRef]
    def __init__(self, logs: _Optional[_Iterable[_Union[AttemptLogRef, _Mapping]]] = ...) -> None: ...

class GetAttemptLogRequest(_message.Message):
    __slots__ = ("job_id", "vertex", "subtask_index", "attempt_number", "offset", "max_bytes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    VERTEX_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    vertex: str
    subtask_index: int
    attempt_number: int
    offset: int
    max_bytes: int
    def __init__(self, job_id: _Optional[str] = ..., vertex: _Optional[str] = ..., subtask_index: _Optional[int] = ..., attempt_number: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class AttemptLogChunk(_message.Message):
    __slots__ = ("ref", "text", "offset", "next_offset", "dropped_bytes", "first_offset", "ended")
    REF_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    ref: AttemptLogRef
    text: str
    offset: int
    next_offset: int
    dropped_bytes: int
    first_offset: int
    ended: bool
    def __init__(self, ref: _Optional[_Union[AttemptLogRef, _Mapping]] = ..., text: _Optional[str] = ..., offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., dropped_bytes: _Optional[int] = ..., first_offset: _Optional[int] = ..., ended: _Optional[bool] = ...) -> None: ...

class ArchivedJob(_message.Message):
    __slots__ = ("result", "plan", "logs", "archived_at")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_AT_FIELD_NUMBER: _ClassVar[int]
    result: JobResult
    plan: _common_pb2.JobGraph
    logs: AttemptLogIndex
    archived_at: float
    def __init__(self, result: _Optional[_Union[JobResult, _Mapping]] = ..., plan: _Optional[_Union[_common_pb2.JobGraph, _Mapping]] = ..., logs: _Optional[_Union[AttemptLogIndex, _Mapping]] = ..., archived_at: _Optional[float] = ...) -> None: ...
