"""Lifecycle states of a job (:class:`JobStatus`) and of one task attempt (:class:`ExecutionState`).

Both follow Flink's state sets. The numeric values are stable (1..N in declaration order) because
they mirror the ``sparkmill.v1`` protobuf enums; never renumber them.

The allowed transitions are data (:data:`JOB_STATUS_TRANSITIONS`,
:data:`EXECUTION_STATE_TRANSITIONS`); a caller that attempts anything else has a bug and gets an
:class:`~sparkmill.common.core.errors.IllegalStateBug` from
:meth:`~sparkmill.common.core.state_machine.TransitionTable.check`.

Job status, main paths (the tables below are complete)::

    INITIALIZING -> CREATED -> RUNNING -> FINISHED
    RUNNING -> RESTARTING -> RUNNING               a recoverable failure
    RUNNING -> FAILING -> RESTARTING -> RUNNING    a failure handled by cancelling first
    RUNNING -> FAILING -> FAILED                   no restart left
    RUNNING -> CANCELLING -> CANCELED              cancelled by the user

    Every non-terminal status may also become SUSPENDED (this job master lost leadership).

Execution state (the main paths)::

    CREATED -> SCHEDULED -> DEPLOYING -> INITIALIZING -> RUNNING -> FINISHED

    Any of these but FINISHED may become FAILED or CANCELING (-> CANCELED); before deployment,
    or when the task executor cancels by itself, CANCELED may also be reached directly.
"""

from __future__ import annotations

import enum

from sparkmill.common.core.state_machine import TransitionTable


class JobStatus(enum.Enum):
    """The status of a whole job, as the job master sees it (Flink's ``JobStatus``)."""

    INITIALIZING = 1  # the job was received; the job master is not set up yet
    CREATED = 2  # the execution graph exists, nothing scheduled yet
    RUNNING = 3  # tasks are being scheduled or run
    FAILING = 4  # a failure is being handled: tasks are being cancelled
    FAILED = 5  # failed for good (no restart left)
    CANCELLING = 6  # the user cancelled the job: tasks are being cancelled
    CANCELED = 7
    FINISHED = 8  # every task finished
    RESTARTING = 9  # all tasks are terminal and a restart is pending
    SUSPENDED = 10  # this job master stopped working on the job (e.g. lost leadership)

    @property
    def is_globally_terminal(self) -> bool:
        """Done for good, cluster-wide: no other job master will ever resume the job."""
        return self in _GLOBALLY_TERMINAL_JOB_STATUSES

    @property
    def is_terminal(self) -> bool:
        """Done as far as this job master is concerned (globally terminal, or SUSPENDED)."""
        return self in _TERMINAL_JOB_STATUSES


_GLOBALLY_TERMINAL_JOB_STATUSES = frozenset(
    {JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED}
)
_TERMINAL_JOB_STATUSES = _GLOBALLY_TERMINAL_JOB_STATUSES | {JobStatus.SUSPENDED}


class ExecutionState(enum.Enum):
    """The state of one execution attempt of one subtask (Flink's ``ExecutionState``)."""

    CREATED = 1  # the attempt exists; no slot asked for yet
    SCHEDULED = 2  # a slot is being acquired for it
    DEPLOYING = 3  # the task was (or is being) submitted to a task executor
    INITIALIZING = 4  # the task executor started it and it is restoring its state
    RUNNING = 5
    FINISHED = 6  # completed successfully; its result partitions are complete
    CANCELING = 7  # a cancel request was sent, the task executor has not confirmed yet
    CANCELED = 8
    FAILED = 9

    # A member is its own only instance, so identity is its hash: Enum's own hashes the
    # member's name in Python, and the JobMaster hashes states some 35 times per subtask
    # (transition tables, the counts per state, ``is_terminal``).
    __hash__ = object.__hash__

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_EXECUTION_STATES


_TERMINAL_EXECUTION_STATES = frozenset(
    {ExecutionState.FINISHED, ExecutionState.CANCELED, ExecutionState.FAILED}
)

UNKNOWN_STATE_NAME = "UNKNOWN"
"""What a number outside the enum (unspecified, or from a newer peer) is shown as."""


def job_status_of(number: int) -> JobStatus | None:
    """The job status with wire number ``number``; None for 0 (unspecified) or an unknown one."""
    return _JOB_STATUS_BY_NUMBER.get(number)


def execution_state_of(number: int) -> ExecutionState | None:
    """The execution state with wire number ``number``; None for 0 or an unknown one."""
    return _EXECUTION_STATE_BY_NUMBER.get(number)


def job_status_name(number: int) -> str:
    """The name of job status ``number`` (Flink's spelling), :data:`UNKNOWN_STATE_NAME` if none."""
    status = _JOB_STATUS_BY_NUMBER.get(number)
    return UNKNOWN_STATE_NAME if status is None else status.name


def execution_state_name(number: int) -> str:
    """The name of execution state ``number`` (Flink's spelling, never the proto's
    ``EXECUTION_`` prefix), :data:`UNKNOWN_STATE_NAME` if none."""
    state = _EXECUTION_STATE_BY_NUMBER.get(number)
    return UNKNOWN_STATE_NAME if state is None else state.name


_JOB_STATUS_BY_NUMBER = {status.value: status for status in JobStatus}
_EXECUTION_STATE_BY_NUMBER = {state.value: state for state in ExecutionState}

_J = JobStatus
JOB_STATUS_TRANSITIONS: TransitionTable[JobStatus] = TransitionTable(
    "job status",
    {
        # A job can be cancelled or fail while its job master is still being set up.
        _J.INITIALIZING: {_J.CREATED, _J.FAILED, _J.CANCELED, _J.SUSPENDED},
        _J.CREATED: {_J.RUNNING, _J.FAILING, _J.CANCELLING, _J.SUSPENDED},
        _J.RUNNING: {
            _J.FINISHED,
            _J.FAILING,
            _J.RESTARTING,  # a recoverable failure: restart without a FAILING phase
            _J.CANCELLING,
            _J.SUSPENDED,
        },
        _J.FAILING: {_J.FAILED, _J.RESTARTING, _J.CANCELLING, _J.SUSPENDED},
        # While restarting every task is already terminal, so cancelling or failing for good can
        # end at once; RESTARTING -> CREATED -> RUNNING is the "reset then reschedule" path.
        _J.RESTARTING: {
            _J.RUNNING,
            _J.CREATED,
            _J.FAILING,
            _J.FAILED,
            _J.CANCELLING,
            _J.CANCELED,
            _J.SUSPENDED,
        },
        # FAILED: the cancellation itself could not be completed.
        _J.CANCELLING: {_J.CANCELED, _J.FAILED, _J.SUSPENDED},
        _J.FAILED: set(),
        _J.CANCELED: set(),
        _J.FINISHED: set(),
        _J.SUSPENDED: set(),
    },
)

_E = ExecutionState
EXECUTION_STATE_TRANSITIONS: TransitionTable[ExecutionState] = TransitionTable(
    "execution state",
    {
        # Nothing is deployed yet: cancelling may complete at once (CANCELED) or pass CANCELING.
        _E.CREATED: {_E.SCHEDULED, _E.CANCELING, _E.CANCELED, _E.FAILED},
        _E.SCHEDULED: {_E.DEPLOYING, _E.CANCELING, _E.CANCELED, _E.FAILED},
        # A very fast task may report FINISHED before the job master saw it initializing; a task
        # executor may cancel a task on its own (CANCELED without CANCELING).
        _E.DEPLOYING: {_E.INITIALIZING, _E.FINISHED, _E.CANCELING, _E.CANCELED, _E.FAILED},
        _E.INITIALIZING: {_E.RUNNING, _E.FINISHED, _E.CANCELING, _E.CANCELED, _E.FAILED},
        _E.RUNNING: {_E.FINISHED, _E.CANCELING, _E.CANCELED, _E.FAILED},
        # A failure or a finish reported while cancelling completes the cancellation instead.
        _E.CANCELING: {_E.CANCELED},
        _E.FINISHED: set(),
        _E.CANCELED: set(),
        _E.FAILED: set(),
    },
)

__all__ = [
    "EXECUTION_STATE_TRANSITIONS",
    "JOB_STATUS_TRANSITIONS",
    "UNKNOWN_STATE_NAME",
    "ExecutionState",
    "JobStatus",
    "execution_state_name",
    "execution_state_of",
    "job_status_name",
    "job_status_of",
]
