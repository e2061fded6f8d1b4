from sparkmill.common.v1 import common_pb2 as _common_pb2
from sparkmill.common.v1 import options_pb2 as _options_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterTaskExecutorRequest(_message.Message):
    __slots__ = ("resource_id", "address", "total_resources", "default_slot_profile", "number_slots", "info")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_SLOT_PROFILE_FIELD_NUMBER: _ClassVar[int]
    NUMBER_SLOTS_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    address: str
    total_resources: _common_pb2.ResourceProfile
    default_slot_profile: _common_pb2.ResourceProfile
    number_slots: int
    info: _common_pb2.ServiceInfo
    def __init__(self, resource_id: _Optional[str] = ..., address: _Optional[str] = ..., total_resources: _Optional[_Union[_common_pb2.ResourceProfile, _Mapping]] = ..., default_slot_profile: _Optional[_Union[_common_pb2.ResourceProfile, _Mapping]] = ..., number_slots: _Optional[int] = ..., info: _Optional[_Union[_common_pb2.ServiceInfo, _Mapping]] = ...) -> None: ...

class RegisterTaskExecutorResponse(_message.Message):
    __slots__ = ("instance_id", "resource_manager_id", "heartbeat_interval_ms")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_MANAGER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    resource_manager_id: str
    heartbeat_interval_ms: int
    def __init__(self, instance_id: _Optional[str] = ..., resource_manager_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ...) -> None: ...

class SendSlotReportRequest(_message.Message):
    __slots__ = ("instance_id", "slot_report")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_REPORT_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    slot_report: _common_pb2.SlotReport
    def __init__(self, instance_id: _Optional[str] = ..., slot_report: _Optional[_Union[_common_pb2.SlotReport, _Mapping]] = ...) -> None: ...

class NotifySlotAvailableRequest(_message.Message):
    __slots__ = ("instance_id", "slot_index", "allocation_id")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    slot_index: int
    allocation_id: str
    def __init__(self, instance_id: _Optional[str] = ..., slot_index: _Optional[int] = ..., allocation_id: _Optional[str] = ...) -> None: ...

class DisconnectTaskExecutorRequest(_message.Message):
    __slots__ = ("resource_id", "cause")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    cause: str
    def __init__(self, resource_id: _Optional[str] = ..., cause: _Optional[str] = ...) -> None: ...

class RegisterJobMasterRequest(_message.Message):
    __slots__ = ("job_id", "job_master_address", "job_master_session_id", "job_master_resource_id", "declaration")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    DECLARATION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_master_address: str
    job_master_session_id: str
    job_master_resource_id: str
    declaration: DeclareRequiredResourcesRequest
    def __init__(self, job_id: _Optional[str] = ..., job_master_address: _Optional[str] = ..., job_master_session_id: _Optional[str] = ..., job_master_resource_id: _Optional[str] = ..., declaration: _Optional[_Union[DeclareRequiredResourcesRequest, _Mapping]] = ...) -> None: ...

class RegisterJobMasterResponse(_message.Message):
    __slots__ = ("resource_manager_id", "heartbeat_interval_ms", "declaration")
    RESOURCE_MANAGER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    DECLARATION_FIELD_NUMBER: _ClassVar[int]
    resource_manager_id: str
    heartbeat_interval_ms: int
    declaration: DeclareRequiredResourcesResponse
    def __init__(self, resource_manager_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ..., declaration: _Optional[_Union[DeclareRequiredResourcesResponse, _Mapping]] = ...) -> None: ...

class DisconnectJobMasterRequest(_message.Message):
    __slots__ = ("job_id", "job_master_session_id", "cause")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_master_session_id: str
    cause: str
    def __init__(self, job_id: _Optional[str] = ..., job_master_session_id: _Optional[str] = ..., cause: _Optional[str] = ...) -> None: ...

class RequestSlotRequest(_message.Message):
    __slots__ = ("job_id", "allocation_id", "resource_profile", "job_master_address", "timeout_ms", "job_master_session_id", "excluded_task_executors")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_PROFILE_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_TASK_EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    allocation_id: str
    resource_profile: _common_pb2.ResourceProfile
    job_master_address: str
    timeout_ms: int
    job_master_session_id: str
    excluded_task_executors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., resource_profile: _Optional[_Union[_common_pb2.ResourceProfile, _Mapping]] = ..., job_master_address: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., job_master_session_id: _Optional[str] = ..., excluded_task_executors: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelSlotRequestRequest(_message.Message):
    __slots__ = ("allocation_id",)
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    def __init__(self, allocation_id: _Optional[str] = ...) -> None: ...

class RequestSlotsRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[RequestSlotRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[RequestSlotRequest, _Mapping]]] = ...) -> None: ...

class RefusedSlotRequest(_message.Message):
    __slots__ = ("allocation_id", "error")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    error: _common_pb2.ErrorInfo
    def __init__(self, allocation_id: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ...) -> None: ...

class RequestSlotsResponse(_message.Message):
    __slots__ = ("refused",)
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    refused: _containers.RepeatedCompositeFieldContainer[RefusedSlotRequest]
    def __init__(self, refused: _Optional[_Iterable[_Union[RefusedSlotRequest, _Mapping]]] = ...) -> None: ...

class CancelSlotRequestsRequest(_message.Message):
    __slots__ = ("allocation_ids",)
    ALLOCATION_IDS_FIELD_NUMBER: _ClassVar[int]
    allocation_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, allocation_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ResourceRequirement(_message.Message):
    __slots__ = ("resource_profile", "count", "excluded_task_executors")
    RESOURCE_PROFILE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_TASK_EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    resource_profile: _common_pb2.ResourceProfile
    count: int
    excluded_task_executors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resource_profile: _Optional[_Union[_common_pb2.ResourceProfile, _Mapping]] = ..., count: _Optional[int] = ..., excluded_task_executors: _Optional[_Iterable[str]] = ...) -> None: ...

class DeclareRequiredResourcesRequest(_message.Message):
    __slots__ = ("job_id", "job_master_session_id", "version", "requirements", "received_allocation_ids", "timeout_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUIREMENTS_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_ALLOCATION_IDS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_master_session_id: str
    version: int
    requirements: _containers.RepeatedCompositeFieldContainer[ResourceRequirement]
    received_allocation_ids: _containers.RepeatedScalarFieldContainer[str]
    timeout_ms: int
    def __init__(self, job_id: _Optional[str] = ..., job_master_session_id: _Optional[str] = ..., version: _Optional[int] = ..., requirements: _Optional[_Iterable[_Union[ResourceRequirement, _Mapping]]] = ..., received_allocation_ids: _Optional[_Iterable[str]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class RefusedRequirement(_message.Message):
    __slots__ = ("index", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    error: _common_pb2.ErrorInfo
    def __init__(self, index: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ...) -> None: ...

class DeclareRequiredResourcesResponse(_message.Message):
    __slots__ = ("refused",)
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    refused: _containers.RepeatedCompositeFieldContainer[RefusedRequirement]
    def __init__(self, refused: _Optional[_Iterable[_Union[RefusedRequirement, _Mapping]]] = ...) -> None: ...

class GetClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TaskExecutorStatus(_message.Message):
    __slots__ = ("resource_id", "instance_id", "address", "total_resources", "slots", "info", "registered_at", "last_heartbeat_at")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AT_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    instance_id: str
    address: str
    total_resources: _common_pb2.ResourceProfile
    slots: _containers.RepeatedCompositeFieldContainer[_common_pb2.SlotStatus]
    info: _common_pb2.ServiceInfo
    registered_at: float
    last_heartbeat_at: float
    def __init__(self, resource_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., address: _Optional[str] = ..., total_resources: _Optional[_Union[_common_pb2.ResourceProfile, _Mapping]] = ..., slots: _Optional[_Iterable[_Union[_common_pb2.SlotStatus, _Mapping]]] = ..., info: _Optional[_Union[_common_pb2.ServiceInfo, _Mapping]] = ..., registered_at: _Optional[float] = ..., last_heartbeat_at: _Optional[float] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("resource_manager", "task_executors", "slots_total", "slots_free", "slots_allocated", "slots_pending", "pending_slot_requests", "registered_jobs", "workers")
    RESOURCE_MANAGER_FIELD_NUMBER: _ClassVar[int]
    TASK_EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FREE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    SLOTS_PENDING_FIELD_NUMBER: _ClassVar[int]
    PENDING_SLOT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_JOBS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    resource_manager: _common_pb2.ServiceInfo
    task_executors: _containers.RepeatedCompositeFieldContainer[TaskExecutorStatus]
    slots_total: int
    slots_free: int
    slots_allocated: int
    slots_pending: int
    pending_slot_requests: int
    registered_jobs: _containers.RepeatedScalarFieldContainer[str]
    workers: WorkerStats
    def __init__(self, resource_manager: _Optional[_Union[_common_pb2.ServiceInfo, _Mapping]] = ..., task_executors: _Optional[_Iterable[_Union[TaskExecutorStatus, _Mapping]]] = ..., slots_total: _Optional[int] = ..., slots_free: _Optional[int] = ..., slots_allocated: _Optional[int] = ..., slots_pending: _Optional[int] = ..., pending_slot_requests: _Optional[int] = ..., registered_jobs: _Optional[_Iterable[str]] = ..., workers: _Optional[_Union[WorkerStats, _Mapping]] = ...) -> None: ...

class WorkerStats(_message.Message):
    __slots__ = ("driver", "pending", "registered", "releasing", "started_total", "failed_total", "released_total", "max_slots", "recent_failures", "starts_paused")
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    RELEASING_FIELD_NUMBER: _ClassVar[int]
    STARTED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FAILED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RELEASED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    RECENT_FAILURES_FIELD_NUMBER: _ClassVar[int]
    STARTS_PAUSED_FIELD_NUMBER: _ClassVar[int]
    driver: str
    pending: int
    registered: int
    releasing: int
    started_total: int
    failed_total: int
    released_total: int
    max_slots: int
    recent_failures: int
    starts_paused: bool
    def __init__(self, driver: _Optional[str] = ..., pending: _Optional[int] = ..., registered: _Optional[int] = ..., releasing: _Optional[int] = ..., started_total: _Optional[int] = ..., failed_total: _Optional[int] = ..., released_total: _Optional[int] = ..., max_slots: _Optional[int] = ..., recent_failures: _Optional[int] = ..., starts_paused: _Optional[bool] = ...) -> None: ...
