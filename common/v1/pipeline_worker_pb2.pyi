from sparkmill.common.v1 import task_executor_pb2 as _task_executor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PipelineWorkerSetup(_message.Message):
    __slots__ = ("task_executor", "spark_master", "spark_conf", "spark_ui_enabled", "warm_up", "slots", "start_eagerly", "app_name")
    class SparkConfEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    SPARK_MASTER_FIELD_NUMBER: _ClassVar[int]
    SPARK_CONF_FIELD_NUMBER: _ClassVar[int]
    SPARK_UI_ENABLED_FIELD_NUMBER: _ClassVar[int]
    WARM_UP_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    START_EAGERLY_FIELD_NUMBER: _ClassVar[int]
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    task_executor: str
    spark_master: str
    spark_conf: _containers.ScalarMap[str, str]
    spark_ui_enabled: bool
    warm_up: bool
    slots: int
    start_eagerly: bool
    app_name: str
    def __init__(self, task_executor: _Optional[str] = ..., spark_master: _Optional[str] = ..., spark_conf: _Optional[_Mapping[str, str]] = ..., spark_ui_enabled: _Optional[bool] = ..., warm_up: _Optional[bool] = ..., slots: _Optional[int] = ..., start_eagerly: _Optional[bool] = ..., app_name: _Optional[str] = ...) -> None: ...

class PipelineAttempt(_message.Message):
    __slots__ = ("attempt_id", "job_id", "job_name", "vertex_id", "vertex_name", "subtask_index", "parallelism", "attempt_number", "job_master_epoch", "payload", "job_config", "inputs", "produced_dataset_ids", "consumer_parallelism", "resource_id", "allocation_id", "slot_index", "exchange_dir", "protected_dirs")
    class JobConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ConsumerParallelismEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    VERTEX_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    JOB_CONFIG_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_DATASET_IDS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_DIR_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_DIRS_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    job_id: str
    job_name: str
    vertex_id: str
    vertex_name: str
    subtask_index: int
    parallelism: int
    attempt_number: int
    job_master_epoch: int
    payload: bytes
    job_config: _containers.ScalarMap[str, str]
    inputs: _containers.RepeatedCompositeFieldContainer[_task_executor_pb2.InputGate]
    produced_dataset_ids: _containers.RepeatedScalarFieldContainer[str]
    consumer_parallelism: _containers.ScalarMap[str, int]
    resource_id: str
    allocation_id: str
    slot_index: int
    exchange_dir: str
    protected_dirs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, attempt_id: _Optional[str] = ..., job_id: _Optional[str] = ..., job_name: _Optional[str] = ..., vertex_id: _Optional[str] = ..., vertex_name: _Optional[str] = ..., subtask_index: _Optional[int] = ..., parallelism: _Optional[int] = ..., attempt_number: _Optional[int] = ..., job_master_epoch: _Optional[int] = ..., payload: _Optional[bytes] = ..., job_config: _Optional[_Mapping[str, str]] = ..., inputs: _Optional[_Iterable[_Union[_task_executor_pb2.InputGate, _Mapping]]] = ..., produced_dataset_ids: _Optional[_Iterable[str]] = ..., consumer_parallelism: _Optional[_Mapping[str, int]] = ..., resource_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., slot_index: _Optional[int] = ..., exchange_dir: _Optional[str] = ..., protected_dirs: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelPipelineAttempt(_message.Message):
    __slots__ = ("attempt_id",)
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    def __init__(self, attempt_id: _Optional[str] = ...) -> None: ...

class PipelineAttemptResult(_message.Message):
    __slots__ = ("attempt_id", "finished", "cancelled", "records_in", "records_out", "bytes_in", "bytes_out", "accumulator", "exception_type", "message", "details", "throwable", "lost_partitions", "written")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_IN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_OUT_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    ACCUMULATOR_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    THROWABLE_FIELD_NUMBER: _ClassVar[int]
    LOST_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    finished: bool
    cancelled: bool
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int
    accumulator: bytes
    exception_type: str
    message: str
    details: str
    throwable: str
    lost_partitions: _containers.RepeatedCompositeFieldContainer[_task_executor_pb2.InputPartition]
    written: _containers.RepeatedCompositeFieldContainer[_task_executor_pb2.SubpartitionSizes]
    def __init__(self, attempt_id: _Optional[str] = ..., finished: _Optional[bool] = ..., cancelled: _Optional[bool] = ..., records_in: _Optional[int] = ..., records_out: _Optional[int] = ..., bytes_in: _Optional[int] = ..., bytes_out: _Optional[int] = ..., accumulator: _Optional[bytes] = ..., exception_type: _Optional[str] = ..., message: _Optional[str] = ..., details: _Optional[str] = ..., throwable: _Optional[str] = ..., lost_partitions: _Optional[_Iterable[_Union[_task_executor_pb2.InputPartition, _Mapping]]] = ..., written: _Optional[_Iterable[_Union[_task_executor_pb2.SubpartitionSizes, _Mapping]]] = ...) -> None: ...

class PipelineLogLine(_message.Message):
    __slots__ = ("attempt_id", "line")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    line: str
    def __init__(self, attempt_id: _Optional[str] = ..., line: _Optional[str] = ...) -> None: ...

class PipelineWorkerStatus(_message.Message):
    __slots__ = ("session_up", "spark_ui_url", "error", "pid", "uid")
    SESSION_UP_FIELD_NUMBER: _ClassVar[int]
    SPARK_UI_URL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    session_up: bool
    spark_ui_url: str
    error: str
    pid: int
    uid: int
    def __init__(self, session_up: _Optional[bool] = ..., spark_ui_url: _Optional[str] = ..., error: _Optional[str] = ..., pid: _Optional[int] = ..., uid: _Optional[int] = ...) -> None: ...

class PipelineWorkerShutdown(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PipelineWorkerMessage(_message.Message):
    __slots__ = ("setup", "run", "cancel", "result", "log", "status", "shutdown")
    SETUP_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    setup: PipelineWorkerSetup
    run: PipelineAttempt
    cancel: CancelPipelineAttempt
    result: PipelineAttemptResult
    log: PipelineLogLine
    status: PipelineWorkerStatus
    shutdown: PipelineWorkerShutdown
    def __init__(self, setup: _Optional[_Union[PipelineWorkerSetup, _Mapping]] = ..., run: _Optional[_Union[PipelineAttempt, _Mapping]] = ..., cancel: _Optional[_Union[CancelPipelineAttempt, _Mapping]] = ..., result: _Optional[_Union[PipelineAttemptResult, _Mapping]] = ..., log: _Optional[_Union[PipelineLogLine, _Mapping]] = ..., status: _Optional[_Union[PipelineWorkerStatus, _Mapping]] = ..., shutdown: _Optional[_Union[PipelineWorkerShutdown, _Mapping]] = ...) -> None: ...
