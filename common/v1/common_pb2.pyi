from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[ErrorCode]
    INVALID_ARGUMENT: _ClassVar[ErrorCode]
    NOT_FOUND: _ClassVar[ErrorCode]
    ALREADY_EXISTS: _ClassVar[ErrorCode]
    NOT_LEADER: _ClassVar[ErrorCode]
    FENCING_MISMATCH: _ClassVar[ErrorCode]
    TIMEOUT: _ClassVar[ErrorCode]
    UNAVAILABLE: _ClassVar[ErrorCode]
    FAILED_PRECONDITION: _ClassVar[ErrorCode]
    RESOURCE_EXHAUSTED: _ClassVar[ErrorCode]
    UNIMPLEMENTED: _ClassVar[ErrorCode]
    INTERNAL: _ClassVar[ErrorCode]
    INVALID_JOB_GRAPH: _ClassVar[ErrorCode]
    PERMISSION_DENIED: _ClassVar[ErrorCode]

class JobStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATUS_UNSPECIFIED: _ClassVar[JobStatus]
    INITIALIZING: _ClassVar[JobStatus]
    CREATED: _ClassVar[JobStatus]
    RUNNING: _ClassVar[JobStatus]
    FAILING: _ClassVar[JobStatus]
    FAILED: _ClassVar[JobStatus]
    CANCELLING: _ClassVar[JobStatus]
    CANCELED: _ClassVar[JobStatus]
    FINISHED: _ClassVar[JobStatus]
    RESTARTING: _ClassVar[JobStatus]
    SUSPENDED: _ClassVar[JobStatus]

class ExecutionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_STATE_UNSPECIFIED: _ClassVar[ExecutionState]
    EXECUTION_CREATED: _ClassVar[ExecutionState]
    SCHEDULED: _ClassVar[ExecutionState]
    DEPLOYING: _ClassVar[ExecutionState]
    EXECUTION_INITIALIZING: _ClassVar[ExecutionState]
    EXECUTION_RUNNING: _ClassVar[ExecutionState]
    EXECUTION_FINISHED: _ClassVar[ExecutionState]
    CANCELING: _ClassVar[ExecutionState]
    EXECUTION_CANCELED: _ClassVar[ExecutionState]
    EXECUTION_FAILED: _ClassVar[ExecutionState]

class DistributionPattern(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DISTRIBUTION_PATTERN_UNSPECIFIED: _ClassVar[DistributionPattern]
    POINTWISE: _ClassVar[DistributionPattern]
    ALL_TO_ALL: _ClassVar[DistributionPattern]

class ResultPartitionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_PARTITION_TYPE_UNSPECIFIED: _ClassVar[ResultPartitionType]
    BLOCKING: _ClassVar[ResultPartitionType]
    PIPELINED: _ClassVar[ResultPartitionType]
OK: ErrorCode
INVALID_ARGUMENT: ErrorCode
NOT_FOUND: ErrorCode
ALREADY_EXISTS: ErrorCode
NOT_LEADER: ErrorCode
FENCING_MISMATCH: ErrorCode
TIMEOUT: ErrorCode
UNAVAILABLE: ErrorCode
FAILED_PRECONDITION: ErrorCode
RESOURCE_EXHAUSTED: ErrorCode
UNIMPLEMENTED: ErrorCode
INTERNAL: ErrorCode
INVALID_JOB_GRAPH: ErrorCode
PERMISSION_DENIED: ErrorCode
JOB_STATUS_UNSPECIFIED: JobStatus
INITIALIZING: JobStatus
CREATED: JobStatus
RUNNING: JobStatus
FAILING: JobStatus
FAILED: JobStatus
CANCELLING: JobStatus
CANCELED: JobStatus
FINISHED: JobStatus
RESTARTING: JobStatus
SUSPENDED: JobStatus
EXECUTION_STATE_UNSPECIFIED: ExecutionState
EXECUTION_CREATED: ExecutionState
SCHEDULED: ExecutionState
DEPLOYING: ExecutionState
EXECUTION_INITIALIZING: ExecutionState
EXECUTION_RUNNING: ExecutionState
EXECUTION_FINISHED: ExecutionState
CANCELING: ExecutionState
EXECUTION_CANCELED: ExecutionState
EXECUTION_FAILED: ExecutionState
DISTRIBUTION_PATTERN_UNSPECIFIED: DistributionPattern
POINTWISE: DistributionPattern
ALL_TO_ALL: DistributionPattern
RESULT_PARTITION_TYPE_UNSPECIFIED: ResultPartitionType
BLOCKING: ResultPartitionType
PIPELINED: ResultPartitionType

class ErrorInfo(_message.Message):
    __slots__ = ("code", "message", "details", "exception_type")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    code: ErrorCode
    message: str
    details: str
    exception_type: str
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., details: _Optional[str] = ..., exception_type: _Optional[str] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResultPartitionRef(_message.Message):
    __slots__ = ("dataset_id", "partition_number", "producer_attempt_id")
    DATASET_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_NUMBER_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    dataset_id: str
    partition_number: int
    producer_attempt_id: str
    def __init__(self, dataset_id: _Optional[str] = ..., partition_number: _Optional[int] = ..., producer_attempt_id: _Optional[str] = ...) -> None: ...

class ResourceProfile(_message.Message):
    __slots__ = ("cpu_cores", "memory_mb")
    CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    cpu_cores: float
    memory_mb: int
    def __init__(self, cpu_cores: _Optional[float] = ..., memory_mb: _Optional[int] = ...) -> None: ...

class SlotStatus(_message.Message):
    __slots__ = ("slot_index", "resource_profile", "allocation_id", "job_id")
    SLOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_PROFILE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    slot_index: int
    resource_profile: ResourceProfile
    allocation_id: str
    job_id: str
    def __init__(self, slot_index: _Optional[int] = ..., resource_profile: _Optional[_Union[ResourceProfile, _Mapping]] = ..., allocation_id: _Optional[str] = ..., job_id: _Optional[str] = ...) -> None: ...

class SlotReport(_message.Message):
    __slots__ = ("resource_id", "slots", "spark_ui_url", "holds_result_partitions")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    SPARK_UI_URL_FIELD_NUMBER: _ClassVar[int]
    HOLDS_RESULT_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    slots: _containers.RepeatedCompositeFieldContainer[SlotStatus]
    spark_ui_url: str
    holds_result_partitions: bool
    def __init__(self, resource_id: _Optional[str] = ..., slots: _Optional[_Iterable[_Union[SlotStatus, _Mapping]]] = ..., spark_ui_url: _Optional[str] = ..., holds_result_partitions: _Optional[bool] = ...) -> None: ...

class ServiceInfo(_message.Message):
    __slots__ = ("role", "id", "address", "pid", "hostname", "is_leader", "leader_session_id", "metrics_url", "started_at", "rest_url", "spark_ui_url")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    REST_URL_FIELD_NUMBER: _ClassVar[int]
    SPARK_UI_URL_FIELD_NUMBER: _ClassVar[int]
    role: str
    id: str
    address: str
    pid: int
    hostname: str
    is_leader: bool
    leader_session_id: str
    metrics_url: str
    started_at: float
    rest_url: str
    spark_ui_url: str
    def __init__(self, role: _Optional[str] = ..., id: _Optional[str] = ..., address: _Optional[str] = ..., pid: _Optional[int] = ..., hostname: _Optional[str] = ..., is_leader: _Optional[bool] = ..., leader_session_id: _Optional[str] = ..., metrics_url: _Optional[str] = ..., started_at: _Optional[float] = ..., rest_url: _Optional[str] = ..., spark_ui_url: _Optional[str] = ...) -> None: ...

class GetServiceInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLeaderSessionRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LeaderSession(_message.Message):
    __slots__ = ("session_id", "address")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    address: str
    def __init__(self, session_id: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class OperatorSpec(_message.Message):
    __slots__ = ("kind", "payload")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    kind: str
    payload: bytes
    def __init__(self, kind: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class IntermediateDataSet(_message.Message):
    __slots__ = ("id", "result_type")
    ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_TYPE_FIELD_NUMBER: _ClassVar[int]
    id: str
    result_type: ResultPartitionType
    def __init__(self, id: _Optional[str] = ..., result_type: _Optional[_Union[ResultPartitionType, str]] = ...) -> None: ...

class JobEdge(_message.Message):
    __slots__ = ("source_dataset_id", "pattern", "partitioner")
    SOURCE_DATASET_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PARTITIONER_FIELD_NUMBER: _ClassVar[int]
    source_dataset_id: str
    pattern: DistributionPattern
    partitioner: str
    def __init__(self, source_dataset_id: _Optional[str] = ..., pattern: _Optional[_Union[DistributionPattern, str]] = ..., partitioner: _Optional[str] = ...) -> None: ...

class JobVertex(_message.Message):
    __slots__ = ("id", "name", "parallelism", "max_parallelism", "operator", "resource_profile", "slot_sharing_group", "produced", "inputs", "sink_paths", "source_paths", "skew_splittable_inputs")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_PROFILE_FIELD_NUMBER: _ClassVar[int]
    SLOT_SHARING_GROUP_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    SINK_PATHS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PATHS_FIELD_NUMBER: _ClassVar[int]
    SKEW_SPLITTABLE_INPUTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    parallelism: int
    max_parallelism: int
    operator: OperatorSpec
    resource_profile: ResourceProfile
    slot_sharing_group: str
    produced: _containers.RepeatedCompositeFieldContainer[IntermediateDataSet]
    inputs: _containers.RepeatedCompositeFieldContainer[JobEdge]
    sink_paths: _containers.RepeatedScalarFieldContainer[str]
    source_paths: _containers.RepeatedScalarFieldContainer[str]
    skew_splittable_inputs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., parallelism: _Optional[int] = ..., max_parallelism: _Optional[int] = ..., operator: _Optional[_Union[OperatorSpec, _Mapping]] = ..., resource_profile: _Optional[_Union[ResourceProfile, _Mapping]] = ..., slot_sharing_group: _Optional[str] = ..., produced: _Optional[_Iterable[_Union[IntermediateDataSet, _Mapping]]] = ..., inputs: _Optional[_Iterable[_Union[JobEdge, _Mapping]]] = ..., sink_paths: _Optional[_Iterable[str]] = ..., source_paths: _Optional[_Iterable[str]] = ..., skew_splittable_inputs: _Optional[_Iterable[int]] = ...) -> None: ...

class JobGraph(_message.Message):
    __slots__ = ("job_id", "name", "vertices", "config")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    vertices: _containers.RepeatedCompositeFieldContainer[JobVertex]
    config: _containers.ScalarMap[str, str]
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., vertices: _Optional[_Iterable[_Union[JobVertex, _Mapping]]] = ..., config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("sender_id",)
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    sender_id: str
    def __init__(self, sender_id: _Optional[str] = ...) -> None: ...
