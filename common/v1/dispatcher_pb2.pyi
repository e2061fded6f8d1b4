from sparkmill.common.v1 import common_pb2 as _common_pb2
from sparkmill.common.v1 import jobs_pb2 as _jobs_pb2
from sparkmill.common.v1 import options_pb2 as _options_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitJobRequest(_message.Message):
    __slots__ = ("job_graph",)
    JOB_GRAPH_FIELD_NUMBER: _ClassVar[int]
    job_graph: _common_pb2.JobGraph
    def __init__(self, job_graph: _Optional[_Union[_common_pb2.JobGraph, _Mapping]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class JobSummary(_message.Message):
    __slots__ = ("job_id", "name", "status", "submitted_at", "ended_at", "total_tasks", "finished_tasks", "restarts")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TASKS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_TASKS_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    status: _common_pb2.JobStatus
    submitted_at: float
    ended_at: float
    total_tasks: int
    finished_tasks: int
    restarts: int
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.JobStatus, str]] = ..., submitted_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., total_tasks: _Optional[int] = ..., finished_tasks: _Optional[int] = ..., restarts: _Optional[int] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobSummary]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetJobStatusRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResultRequest(_message.Message):
    __slots__ = ("job_id", "wait_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    wait_ms: int
    def __init__(self, job_id: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class RegisterJobMasterProcessRequest(_message.Message):
    __slots__ = ("process_id", "address", "info", "jobs")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    address: str
    info: _common_pb2.ServiceInfo
    jobs: _containers.RepeatedCompositeFieldContainer[_jobs_pb2.HostedJob]
    def __init__(self, process_id: _Optional[str] = ..., address: _Optional[str] = ..., info: _Optional[_Union[_common_pb2.ServiceInfo, _Mapping]] = ..., jobs: _Optional[_Iterable[_Union[_jobs_pb2.HostedJob, _Mapping]]] = ...) -> None: ...

class RegisterJobMasterProcessResponse(_message.Message):
    __slots__ = ("dispatcher_id",)
    DISPATCHER_ID_FIELD_NUMBER: _ClassVar[int]
    dispatcher_id: str
    def __init__(self, dispatcher_id: _Optional[str] = ...) -> None: ...

class JobStatusReport(_message.Message):
    __slots__ = ("job_id", "status", "job_master_session_id", "details", "result", "job_master_process_id", "job_master_address")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    status: _common_pb2.JobStatus
    job_master_session_id: str
    details: _jobs_pb2.JobDetails
    result: _jobs_pb2.JobResult
    job_master_process_id: str
    job_master_address: str
    def __init__(self, job_id: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.JobStatus, str]] = ..., job_master_session_id: _Optional[str] = ..., details: _Optional[_Union[_jobs_pb2.JobDetails, _Mapping]] = ..., result: _Optional[_Union[_jobs_pb2.JobResult, _Mapping]] = ..., job_master_process_id: _Optional[str] = ..., job_master_address: _Optional[str] = ...) -> None: ...

class GetClusterServicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterServices(_message.Message):
    __slots__ = ("dispatcher", "job_master_processes")
    DISPATCHER_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    dispatcher: _common_pb2.ServiceInfo
    job_master_processes: _containers.RepeatedCompositeFieldContainer[_common_pb2.ServiceInfo]
    def __init__(self, dispatcher: _Optional[_Union[_common_pb2.ServiceInfo, _Mapping]] = ..., job_master_processes: _Optional[_Iterable[_Union[_common_pb2.ServiceInfo, _Mapping]]] = ...) -> None: ...
