"""The exception hierarchy of sparkmill, in one place.

Every error that can cross a process boundary has an :class:`ErrorCode` (mirrored by the
``sparkmill.v1.ErrorCode`` protobuf enum) so that a server-side exception becomes the *same*
exception class at the caller::

    SparkmillError                      base of everything sparkmill raises on purpose
    ├── ConfigurationError              a bad key or value in a cluster/job config (names the key)
    ├── RpcError                        anything that went wrong with, or was refused by, an RPC
    │   ├── InvalidArgumentError        INVALID_ARGUMENT: the request is malformed or invalid
    │   │   └── InvalidJobGraphError    INVALID_JOB_GRAPH: the submitted job graph is invalid
    │   ├── NotFoundError               NOT_FOUND: job, slot, task, allocation... does not exist
    │   ├── AlreadyExistsError          ALREADY_EXISTS: e.g. a job id submitted twice
    │   ├── NotLeaderError              NOT_LEADER: the target is not (or no longer) the leader
    │   ├── FencingMismatchError        FENCING_MISMATCH: the caller's leader session id is stale
    │   ├── DeadlineExceededError       TIMEOUT: no reply before the request's deadline
    │   ├── UnavailableError            UNAVAILABLE: the target is unreachable or shutting down
    │   ├── FailedPreconditionError     FAILED_PRECONDITION: the target's state refuses this now
    │   ├── ResourceExhaustedError      RESOURCE_EXHAUSTED: e.g. a slot request cannot be served
    │   ├── UnimplementedError          UNIMPLEMENTED: unknown service or method
    │   ├── PermissionDeniedError       PERMISSION_DENIED: the caller's role may not call this
    │   └── InternalError               INTERNAL: the server failed unexpectedly (a bug there)
    ├── SuppressRestartsError           raised in a task: no restart can fix this failure
    │   └── DatabaseAccessError         the database refuses: credentials, table, URL
    │                                   (classify_task_exception finds others: a bad path...)
    ├── PipelineError (ValueError)      a pipeline is invalid (raised while built or compiled)
    ├── TaskCancelledError              raised in a task thread that noticed its cancellation
    └── DataPlaneError                  a ``spark`` task cannot produce its result
        ├── OperatorError (RuntimeError)            a user operator failed building its DataFrame
        ├── SparkJobError (RuntimeError)            a Spark job of the task failed
        ├── InputNotFoundError (FileNotFoundError)  a source path matches no file
        ├── MissingPartitionError (RuntimeError)    an input gate's partition is not on disk
        ├── PartitionNotFoundError (RuntimeError)   inputs are lost: their producers must rerun
        ├── SparkSessionUnavailableError (RuntimeError)  the Spark session could not start
        ├── CommitError (RuntimeError)              a sink's output cannot be published
        └── DatabaseError (RuntimeError)            reading or writing a database failed

A class in parentheses is a second base: code that catches, e.g., ``FileNotFoundError`` still
catches the sparkmill error.

:class:`IllegalStateBug` is deliberately *not* a :class:`SparkmillError`: it signals a broken
invariant inside this process, i.e. a bug, and must never be caught as an expected failure.

Expected refusals (a slot that is already taken, an offer that is rejected) are *return values*
in the APIs, not exceptions.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkmill.common.core.partitions import InputPartitionInfo


class ErrorCode(enum.IntEnum):
    """Wire error codes; the values equal ``sparkmill.v1.ErrorCode``."""

    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    ALREADY_EXISTS = 3
    NOT_LEADER = 4
    FENCING_MISMATCH = 5
    TIMEOUT = 6
    UNAVAILABLE = 7
    FAILED_PRECONDITION = 8
    RESOURCE_EXHAUSTED = 9
    UNIMPLEMENTED = 10
    INTERNAL = 11
    INVALID_JOB_GRAPH = 12
    PERMISSION_DENIED = 13


class SparkmillError(Exception):
    """Base class of every error sparkmill raises on purpose."""


class ConfigurationError(SparkmillError):
    """A configuration key or value is invalid; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"configuration key '{key}': {message}")
        self.key = key


class SuppressRestartsError(SparkmillError):
    """Raised inside a task for a failure that no restart can fix (Flink's
    ``SuppressRestartsException``), e.g. a user function that cannot be deserialized: the job
    fails at once instead of consuming its restart strategy."""


class PipelineError(SparkmillError, ValueError):
    """The pipeline is not valid (raised while it is built or compiled).

    ``origin`` is ``file:line`` of the pipeline's own code that created the operator at fault
    (empty when unknown): a check that runs at build time names the line that wrote the
    mistake, not the ``build_job_graph()`` call.
    """

    def __init__(self, message: str, *, origin: str = "") -> None:
        super().__init__(message)
        self.origin = origin
        if origin:
            # Shown under the traceback of a pipeline built from Python (the CLI prints it).
            self.add_note(f"(the operator was created at {origin})")


class TaskCancelledError(SparkmillError):
    """Raised inside a task thread when it notices it was cancelled."""


class DataPlaneError(SparkmillError):
    """Base of the failures of a ``spark`` task (reading, transforming, writing data)."""


class OperatorError(DataPlaneError, RuntimeError):
    """A user operator failed while its DataFrame was being built (or a column is unknown)."""


class SparkJobError(DataPlaneError, RuntimeError):
    """A Spark job of the task failed (e.g. a Python UDF raised inside Spark)."""


class InputNotFoundError(DataPlaneError, FileNotFoundError):
    """A source path matches no file."""


class MissingPartitionError(DataPlaneError, RuntimeError):
    """A result partition named by an input gate is not on disk."""


class PartitionNotFoundError(DataPlaneError, RuntimeError):
    """Input partitions of the task are missing or unreadable (Flink's
    ``PartitionNotFoundException``): running the task again cannot help until their producers
    have run again, so the failure names them and the JobMaster restarts those producers too."""

    def __init__(self, message: str, partitions: tuple[InputPartitionInfo, ...]) -> None:
        super().__init__(message)
        self.partitions = partitions


class SparkSessionUnavailableError(DataPlaneError, RuntimeError):
    """The Spark session could not be started (the cause is in the message)."""


class CommitError(DataPlaneError, RuntimeError):
    """A sink's output cannot be published."""


class DatabaseError(DataPlaneError, RuntimeError):
    """Reading, writing or committing a database table failed (a restart may help: the server
    was unreachable, a transaction was aborted). The message names the table, never a password."""


class DatabaseAccessError(SuppressRestartsError):
    """The database refuses what the pipeline asks (wrong credentials, an unknown table or
    database, no driver for the URL, an unreadable credentials file): no restart can help."""


class RpcError(SparkmillError):
    """An RPC failed or was refused. ``code`` says why; ``details`` is free text."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidArgumentError(RpcError):
    code = ErrorCode.INVALID_ARGUMENT


class InvalidJobGraphError(InvalidArgumentError):
    code = ErrorCode.INVALID_JOB_GRAPH


class NotFoundError(RpcError):
    code = ErrorCode.NOT_FOUND


class AlreadyExistsError(RpcError):
    code = ErrorCode.ALREADY_EXISTS


class NotLeaderError(RpcError):
    code = ErrorCode.NOT_LEADER


class FencingMismatchError(RpcError):
    code = ErrorCode.FENCING_MISMATCH


class DeadlineExceededError(RpcError):
    code = ErrorCode.TIMEOUT


class UnavailableError(RpcError):
    code = ErrorCode.UNAVAILABLE


class FailedPreconditionError(RpcError):
    code = ErrorCode.FAILED_PRECONDITION


class ResourceExhaustedError(RpcError):
    code = ErrorCode.RESOURCE_EXHAUSTED


class UnimplementedError(RpcError):
    code = ErrorCode.UNIMPLEMENTED


class PermissionDeniedError(RpcError):
    """The caller's authenticated role may not call this method (see options.proto callers)."""

    code = ErrorCode.PERMISSION_DENIED


class InternalError(RpcError):
    code = ErrorCode.INTERNAL


_BY_CODE: dict[ErrorCode, type[RpcError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        InvalidJobGraphError,
        NotFoundError,
        AlreadyExistsError,
        NotLeaderError,
        FencingMismatchError,
        DeadlineExceededError,
        UnavailableError,
        FailedPreconditionError,
        ResourceExhaustedError,
        UnimplementedError,
        PermissionDeniedError,
        InternalError,
    )
}


def error_from_code(code: int, message: str, details: str = "") -> RpcError:
    """Rebuild the typed exception for a wire error code (unknown codes become INTERNAL)."""
    try:
        cls = _BY_CODE[ErrorCode(code)]
    except (ValueError, KeyError):
        cls = InternalError
        message = f"unknown error code {code}: {message}"
    return cls(message, details=details)


class ThrowableType(enum.Enum):
    """What a task's exception says about running the task again (Flink's ``ThrowableType``,
    decided by :func:`classify_task_exception` where the exception object still exists: on the
    task executor; the JobMaster only sees the outcome)."""

    # No restart can fix it: the job fails at once with this as its root cause.
    NON_RECOVERABLE = "non-recoverable"
    # The task's inputs are gone: their producers must run again first.
    PARTITION_DATA_MISSING = "partition-data-missing"
    # The task executor's environment failed (its Spark session or JVM), not the task's code.
    ENVIRONMENT = "environment"
    # Raised by the task's own work; may be transient. Restarted, unless it repeats exactly.
    RECOVERABLE = "recoverable"


# Spark raises these from pyspark.errors without sparkmill importing pyspark here: matched by
# class name along the exception's MRO. An AnalysisException (unknown column, bad type, a path
# that does not exist) is the same on every attempt; a lost Py4J connection means the task
# executor's Spark JVM is gone, which is the environment's failure, not the task's.
_NON_RECOVERABLE_NAMES = frozenset({"AnalysisException"})
_ENVIRONMENT_NAMES = frozenset({"Py4JNetworkError"})
_MAX_CHAIN = 16


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < _MAX_CHAIN and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _named(exc: BaseException, names: frozenset[str]) -> bool:
    return any(cls.__name__ in names for cls in type(exc).__mro__)


def classify_task_exception(exc: BaseException) -> ThrowableType:
    """Classify what a task raised, looking through its causes (an :class:`OperatorError` that
    wraps an :class:`InputNotFoundError` is a bad path, not a transient failure)."""
    chain = _exception_chain(exc)
    if any(isinstance(e, PartitionNotFoundError) for e in chain):
        return ThrowableType.PARTITION_DATA_MISSING
    if any(
        isinstance(e, SuppressRestartsError | InputNotFoundError | PipelineError)
        or _named(e, _NON_RECOVERABLE_NAMES)
        for e in chain
    ):
        return ThrowableType.NON_RECOVERABLE
    if any(
        isinstance(e, SparkSessionUnavailableError | ConnectionError)
        or _named(e, _ENVIRONMENT_NAMES)
        for e in chain
    ):
        return ThrowableType.ENVIRONMENT
    return ThrowableType.RECOVERABLE


class IllegalStateBug(RuntimeError):
    """A broken invariant: this is a bug in sparkmill, please report it."""

    def __init__(self, message: str) -> None:
        super().__init__(f"BUG (broken invariant, please report): {message}")
