from sparkmill.common.v1 import common_pb2 as _common_pb2
from sparkmill.common.v1 import jobs_pb2 as _jobs_pb2
from sparkmill.common.v1 import options_pb2 as _options_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskExecutorRequestSlotRequest(_message.Message):
    __slots__ = ("slot_index", "job_id", "allocation_id", "resource_profile", "job_master_address", "resource_manager_id", "job_master_session_id")
    SLOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_PROFILE_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_MANAGER_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    slot_index: int
    job_id: str
    allocation_id: str
    resource_profile: _common_pb2.ResourceProfile
    job_master_address: str
    resource_manager_id: str
    job_master_session_id: str
    def __init__(self, slot_index: _Optional[int] = ..., job_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., resource_profile: _Optional[_Union[_common_pb2.ResourceProfile, _Mapping]] = ..., job_master_address: _Optional[str] = ..., resource_manager_id: _Optional[str] = ..., job_master_session_id: _Optional[str] = ...) -> None: ...

class InputPartition(_message.Message):
    __slots__ = ("dataset_id", "partition_number", "producer_attempt_id", "producer_resource_id")
    DATASET_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_NUMBER_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    dataset_id: str
    partition_number: int
    producer_attempt_id: str
    producer_resource_id: str
    def __init__(self, dataset_id: _Optional[str] = ..., partition_number: _Optional[int] = ..., producer_attempt_id: _Optional[str] = ..., producer_resource_id: _Optional[str] = ...) -> None: ...

class SubpartitionSizes(_message.Message):
    __slots__ = ("dataset_id", "bytes")
    DATASET_ID_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    dataset_id: str
    bytes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dataset_id: _Optional[str] = ..., bytes: _Optional[_Iterable[int]] = ...) -> None: ...

class InputGate(_message.Message):
    __slots__ = ("dataset_id", "pattern", "partitioner", "partitions", "producer_parallelism", "shared_gate_id", "generation", "subpartitions", "subpartition_bounds", "read_slices")
    DATASET_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PARTITIONER_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    SHARED_GATE_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SUBPARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SUBPARTITION_BOUNDS_FIELD_NUMBER: _ClassVar[int]
    READ_SLICES_FIELD_NUMBER: _ClassVar[int]
    dataset_id: str
    pattern: _common_pb2.DistributionPattern
    partitioner: str
    partitions: _containers.RepeatedCompositeFieldContainer[InputPartition]
    producer_parallelism: int
    shared_gate_id: str
    generation: int
    subpartitions: int
    subpartition_bounds: _containers.RepeatedScalarFieldContainer[int]
    read_slices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dataset_id: _Optional[str] = ..., pattern: _Optional[_Union[_common_pb2.DistributionPattern, str]] = ..., partitioner: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[InputPartition, _Mapping]]] = ..., producer_parallelism: _Optional[int] = ..., shared_gate_id: _Optional[str] = ..., generation: _Optional[int] = ..., subpartitions: _Optional[int] = ..., subpartition_bounds: _Optional[_Iterable[int]] = ..., read_slices: _Optional[_Iterable[int]] = ...) -> None: ...

class TaskDeploymentDescriptor(_message.Message):
    __slots__ = ("job_id", "job_name", "vertex_id", "vertex_name", "subtask_index", "parallelism", "attempt_id", "attempt_number", "allocation_id", "operator", "inputs", "produced_dataset_ids", "vertex_version", "job_config", "job_master_epoch", "consumer_parallelism")
    class JobConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    VERTEX_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_DATASET_IDS_FIELD_NUMBER: _ClassVar[int]
    VERTEX_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_CONFIG_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_name: str
    vertex_id: str
    vertex_name: str
    subtask_index: int
    parallelism: int
    attempt_id: str
    attempt_number: int
    allocation_id: str
    operator: _common_pb2.OperatorSpec
    inputs: _containers.RepeatedCompositeFieldContainer[InputGate]
    produced_dataset_ids: _containers.RepeatedScalarFieldContainer[str]
    vertex_version: int
    job_config: _containers.ScalarMap[str, str]
    job_master_epoch: int
    consumer_parallelism: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job_id: _Optional[str] = ..., job_name: _Optional[str] = ..., vertex_id: _Optional[str] = ..., vertex_name: _Optional[str] = ..., subtask_index: _Optional[int] = ..., parallelism: _Optional[int] = ..., attempt_id: _Optional[str] = ..., attempt_number: _Optional[int] = ..., allocation_id: _Optional[str] = ..., operator: _Optional[_Union[_common_pb2.OperatorSpec, _Mapping]] = ..., inputs: _Optional[_Iterable[_Union[InputGate, _Mapping]]] = ..., produced_dataset_ids: _Optional[_Iterable[str]] = ..., vertex_version: _Optional[int] = ..., job_config: _Optional[_Mapping[str, str]] = ..., job_master_epoch: _Optional[int] = ..., consumer_parallelism: _Optional[_Iterable[int]] = ...) -> None: ...

class SubmitTaskRequest(_message.Message):
    __slots__ = ("tdd", "job_master_address")
    TDD_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    tdd: TaskDeploymentDescriptor
    job_master_address: str
    def __init__(self, tdd: _Optional[_Union[TaskDeploymentDescriptor, _Mapping]] = ..., job_master_address: _Optional[str] = ...) -> None: ...

class SubmitTasksRequest(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[SubmitTaskRequest]
    def __init__(self, tasks: _Optional[_Iterable[_Union[SubmitTaskRequest, _Mapping]]] = ...) -> None: ...

class RefusedTask(_message.Message):
    __slots__ = ("attempt_id", "error")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    error: _common_pb2.ErrorInfo
    def __init__(self, attempt_id: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ...) -> None: ...

class SubmitTasksResponse(_message.Message):
    __slots__ = ("refused",)
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    refused: _containers.RepeatedCompositeFieldContainer[RefusedTask]
    def __init__(self, refused: _Optional[_Iterable[_Union[RefusedTask, _Mapping]]] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("job_id", "attempt_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt_id: str
    def __init__(self, job_id: _Optional[str] = ..., attempt_id: _Optional[str] = ...) -> None: ...

class FreeSlotRequest(_message.Message):
    __slots__ = ("job_id", "allocation_id", "cause")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    allocation_id: str
    cause: str
    def __init__(self, job_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., cause: _Optional[str] = ...) -> None: ...

class TaskExecutorJobHeartbeatRequest(_message.Message):
    __slots__ = ("job_id", "sender_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    sender_id: str
    def __init__(self, job_id: _Optional[str] = ..., sender_id: _Optional[str] = ...) -> None: ...

class AllocatedSlotReport(_message.Message):
    __slots__ = ("resource_id", "slots", "hosted_attempt_ids")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    HOSTED_ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    slots: _containers.RepeatedCompositeFieldContainer[_common_pb2.SlotStatus]
    hosted_attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resource_id: _Optional[str] = ..., slots: _Optional[_Iterable[_Union[_common_pb2.SlotStatus, _Mapping]]] = ..., hosted_attempt_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DisconnectJobMasterFromTaskExecutorRequest(_message.Message):
    __slots__ = ("job_id", "cause")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    cause: str
    def __init__(self, job_id: _Optional[str] = ..., cause: _Optional[str] = ...) -> None: ...

class TaskExecutorDisconnectResourceManagerRequest(_message.Message):
    __slots__ = ("cause",)
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    cause: str
    def __init__(self, cause: _Optional[str] = ...) -> None: ...
