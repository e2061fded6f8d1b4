from sparkmill.common.v1 import common_pb2 as _common_pb2
from sparkmill.common.v1 import jobs_pb2 as _jobs_pb2
from sparkmill.common.v1 import options_pb2 as _options_pb2
from sparkmill.common.v1 import task_executor_pb2 as _task_executor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartJobRequest(_message.Message):
    __slots__ = ("job_graph", "dispatcher_address", "submitted_at")
    JOB_GRAPH_FIELD_NUMBER: _ClassVar[int]
    DISPATCHER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    job_graph: _common_pb2.JobGraph
    dispatcher_address: str
    submitted_at: float
    def __init__(self, job_graph: _Optional[_Union[_common_pb2.JobGraph, _Mapping]] = ..., dispatcher_address: _Optional[str] = ..., submitted_at: _Optional[float] = ...) -> None: ...

class StartJobResponse(_message.Message):
    __slots__ = ("job_master_session_id", "job_master_address")
    JOB_MASTER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    job_master_session_id: str
    job_master_address: str
    def __init__(self, job_master_session_id: _Optional[str] = ..., job_master_address: _Optional[str] = ...) -> None: ...

class JobMasterCancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobDetailsRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class JobMasterRegisterTaskExecutorRequest(_message.Message):
    __slots__ = ("job_id", "resource_id", "address")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    resource_id: str
    address: str
    def __init__(self, job_id: _Optional[str] = ..., resource_id: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class JobMasterRegisterTaskExecutorResponse(_message.Message):
    __slots__ = ("job_master_resource_id", "heartbeat_interval_ms")
    JOB_MASTER_RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    job_master_resource_id: str
    heartbeat_interval_ms: int
    def __init__(self, job_master_resource_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ...) -> None: ...

class SlotOffer(_message.Message):
    __slots__ = ("allocation_id", "slot_index", "resource_profile")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_PROFILE_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    slot_index: int
    resource_profile: _common_pb2.ResourceProfile
    def __init__(self, allocation_id: _Optional[str] = ..., slot_index: _Optional[int] = ..., resource_profile: _Optional[_Union[_common_pb2.ResourceProfile, _Mapping]] = ...) -> None: ...

class OfferSlotsRequest(_message.Message):
    __slots__ = ("job_id", "resource_id", "address", "offers")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OFFERS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    resource_id: str
    address: str
    offers: _containers.RepeatedCompositeFieldContainer[SlotOffer]
    def __init__(self, job_id: _Optional[str] = ..., resource_id: _Optional[str] = ..., address: _Optional[str] = ..., offers: _Optional[_Iterable[_Union[SlotOffer, _Mapping]]] = ...) -> None: ...

class OfferSlotsResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: _containers.RepeatedCompositeFieldContainer[SlotOffer]
    def __init__(self, accepted: _Optional[_Iterable[_Union[SlotOffer, _Mapping]]] = ...) -> None: ...

class IOMetrics(_message.Message):
    __slots__ = ("records_in", "records_out", "bytes_in", "bytes_out")
    RECORDS_IN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_OUT_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int
    def __init__(self, records_in: _Optional[int] = ..., records_out: _Optional[int] = ..., bytes_in: _Optional[int] = ..., bytes_out: _Optional[int] = ...) -> None: ...

class TaskExecutionState(_message.Message):
    __slots__ = ("attempt_id", "state", "error", "io_metrics", "accumulator", "lost_partitions", "suppress_restarts", "written")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    IO_METRICS_FIELD_NUMBER: _ClassVar[int]
    ACCUMULATOR_FIELD_NUMBER: _ClassVar[int]
    LOST_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SUPPRESS_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    state: _common_pb2.ExecutionState
    error: _common_pb2.ErrorInfo
    io_metrics: IOMetrics
    accumulator: bytes
    lost_partitions: _containers.RepeatedCompositeFieldContainer[_common_pb2.ResultPartitionRef]
    suppress_restarts: bool
    written: _containers.RepeatedCompositeFieldContainer[_task_executor_pb2.SubpartitionSizes]
    def __init__(self, attempt_id: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., io_metrics: _Optional[_Union[IOMetrics, _Mapping]] = ..., accumulator: _Optional[bytes] = ..., lost_partitions: _Optional[_Iterable[_Union[_common_pb2.ResultPartitionRef, _Mapping]]] = ..., suppress_restarts: _Optional[bool] = ..., written: _Optional[_Iterable[_Union[_task_executor_pb2.SubpartitionSizes, _Mapping]]] = ...) -> None: ...

class UpdateTaskExecutionStateRequest(_message.Message):
    __slots__ = ("job_id", "resource_id", "updates")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    resource_id: str
    updates: _containers.RepeatedCompositeFieldContainer[TaskExecutionState]
    def __init__(self, job_id: _Optional[str] = ..., resource_id: _Optional[str] = ..., updates: _Optional[_Iterable[_Union[TaskExecutionState, _Mapping]]] = ...) -> None: ...

class GetInputGateRequest(_message.Message):
    __slots__ = ("job_id", "shared_gate_id", "generation")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SHARED_GATE_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    shared_gate_id: str
    generation: int
    def __init__(self, job_id: _Optional[str] = ..., shared_gate_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class NotifySlotAllocationFailureRequest(_message.Message):
    __slots__ = ("job_id", "allocation_id", "error")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    allocation_id: str
    error: _common_pb2.ErrorInfo
    def __init__(self, job_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ...) -> None: ...

class JobMasterDisconnectTaskExecutorRequest(_message.Message):
    __slots__ = ("job_id", "resource_id", "cause")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    resource_id: str
    cause: str
    def __init__(self, job_id: _Optional[str] = ..., resource_id: _Optional[str] = ..., cause: _Optional[str] = ...) -> None: ...

class DisconnectResourceManagerRequest(_message.Message):
    __slots__ = ("job_id", "resource_manager_id", "cause")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_MANAGER_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    resource_manager_id: str
    cause: str
    def __init__(self, job_id: _Optional[str] = ..., resource_manager_id: _Optional[str] = ..., cause: _Optional[str] = ...) -> None: ...

class JobMasterHeartbeatRequest(_message.Message):
    __slots__ = ("job_id", "sender_id", "slot_wait_reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_WAIT_REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    sender_id: str
    slot_wait_reason: str
    def __init__(self, job_id: _Optional[str] = ..., sender_id: _Optional[str] = ..., slot_wait_reason: _Optional[str] = ...) -> None: ...

class HostedJobs(_message.Message):
    __slots__ = ("process_id", "jobs")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    jobs: _containers.RepeatedCompositeFieldContainer[_jobs_pb2.HostedJob]
    def __init__(self, process_id: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[_jobs_pb2.HostedJob, _Mapping]]] = ...) -> None: ...
