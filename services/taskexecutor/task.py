"""One execution attempt of one subtask on a task executor (Flink's ``Task``).

The task's work runs on a thread of its own (reused from an ended attempt:
:mod:`.task_threads`); its *state* belongs to the task executor's event loop.
The thread never touches state: it posts each transition to the loop through a
:class:`LoopMailbox`, where :meth:`Task._apply` checks it against the execution state table and
hands it to the task executor, which records it and reports it to the JobMaster.

Lifecycle: DEPLOYING (on submission) → INITIALIZING → RUNNING → FINISHED | FAILED | CANCELED.
``cancel()`` and ``fail_externally()`` may come at any point; the thread notices and the attempt
ends CANCELED (cancel) or FAILED with the external cause (e.g. its slot was freed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import traceback
from collections.abc import Callable, Mapping

from sparkmill.common.core.errors import (
    ErrorCode,
    PartitionNotFoundError,
    TaskCancelledError,
    ThrowableType,
    classify_task_exception,
)
from sparkmill.common.core.ids import AllocationID, ExecutionAttemptID, JobID
from sparkmill.common.core.log_tail import LOG_TAIL_LINES, with_log_tail
from sparkmill.common.core.partitions import InputGateInfo
from sparkmill.common.core.states import EXECUTION_STATE_TRANSITIONS, ExecutionState
from sparkmill.common.deployment.descriptor import SharedGateKey, TaskDeployment
from sparkmill.common.deployment.state_update import LostPartition, TaskFailure
from sparkmill.common.v1 import task_executor_pb2
from sparkmill.services.taskexecutor import attempt_logs
from sparkmill.services.taskexecutor.context import Invokable, TaskContext, TaskOutcome
from sparkmill.services.taskexecutor.pipeline.codec import RemoteAttemptError
from sparkmill.services.taskexecutor.task_threads import TASK_THREADS, TaskThreads

log = logging.getLogger(__name__)


StateListener = Callable[["Task", ExecutionState, TaskFailure | None, TaskOutcome | None], None]


class LoopMailbox:
    """What task threads hand to the event loop, delivered in batches: a thread wakes the loop
    (``call_soon_threadsafe``) only when the mailbox was empty, and the loop runs everything
    posted meanwhile in one callback, in the order posted. A short attempt's INITIALIZING,
    RUNNING and FINISHED, and those of the attempts that end beside it, cost one wakeup of the
    loop instead of three each; a long attempt's RUNNING still arrives at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._posted: list[Callable[[], None]] = []

    def post(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._posted.append(callback)
            first = len(self._posted) == 1
        if first:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
                self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            posted, self._posted = self._posted, []
        for callback in posted:
            try:
                callback()
            except Exception:
                log.exception("a task's state change failed on the event loop")


class Task:
    def __init__(
        self,
        tdd: task_executor_pb2.TaskDeploymentDescriptor,
        invokable_factory: Callable[[], Invokable],
        listener: StateListener,
        loop: asyncio.AbstractEventLoop,
        shared_gates: Mapping[SharedGateKey, InputGateInfo] | None = None,
        mailbox: LoopMailbox | None = None,
    ) -> None:
        self.tdd = tdd
        self._factory = invokable_factory
        self._listener = listener
        self._mailbox = mailbox if mailbox is not None else LoopMailbox(loop)
        self.state = ExecutionState.DEPLOYING
        # Offloaded input gates come fetched and parsed once, shared by every task reading them.
        deployment = TaskDeployment.from_proto(tdd, shared_gates)
        self.context = TaskContext(
            job_id=deployment.job_id,
            job_name=deployment.job_name,
            vertex_id=deployment.vertex_id,
            vertex_name=deployment.vertex_name,
            subtask_index=deployment.subtask_index,
            parallelism=deployment.parallelism,
            attempt_id=deployment.attempt_id,
            attempt_number=deployment.attempt_number,
            job_master_epoch=deployment.job_master_epoch,
            payload=deployment.operator_payload,
            job_config=dict(deployment.job_config),
            inputs=list(deployment.inputs),
            produced_dataset_ids=list(deployment.produced_dataset_ids),
            consumer_parallelism={
                dataset: count
                for dataset, count in zip(
                    deployment.produced_dataset_ids, deployment.consumer_parallelism, strict=False
                )
                if count > 0
            },
        )
        self._invokable: Invokable | None = None
        self._lock = threading.Lock()  # guards _invokable between the loop and the task thread
        self._external_failure: TaskFailure | None = None
        self._ended = threading.Event()  # the attempt's thread is done with it

    # SlotTask protocol (used by the TaskSlotTable)
    @property
    def attempt_id(self) -> ExecutionAttemptID:
        return ExecutionAttemptID(self.tdd.attempt_id)

    @property
    def job_id(self) -> JobID:
        return JobID(self.tdd.job_id)

    @property
    def allocation_id(self) -> AllocationID:
        return AllocationID(self.tdd.allocation_id)

    @property
    def name(self) -> str:
        return (
            f"{self.tdd.vertex_name} ({self.tdd.subtask_index + 1}/{self.tdd.parallelism})"
            f" attempt #{self.tdd.attempt_number}"
        )

    def start(self, threads: TaskThreads = TASK_THREADS) -> None:
        threads.run(self._run, f"task-{self.tdd.vertex_name}-{self.tdd.subtask_index}")

    def cancel(self) -> None:
        """Ask the attempt to stop; it ends CANCELED (unless it finishes first)."""
        self.context.cancelled.set()
        with self._lock:
            invokable = self._invokable
        if invokable is not None:
            try:
                invokable.cancel()
            except Exception:
                log.exception("cancelling %s failed", self.name)

    def fail_externally(self, cause: BaseException) -> None:
        """Fail the attempt for a reason outside it (slot freed, JobMaster lost...)."""
        if self._external_failure is None:
            self._external_failure = TaskFailure(
                ErrorCode.FAILED_PRECONDITION, type(cause).__name__, str(cause), ""
            )
        self.cancel()

    def join(self, timeout: float | None = None) -> None:
        self._ended.wait(timeout)

    # -- task thread ------------------------------------------------------------------------

    def _post(
        self,
        state: ExecutionState,
        failure: TaskFailure | None = None,
        outcome: TaskOutcome | None = None,
    ) -> None:
        # A closed loop means the process is shutting down: nobody is left to tell.
        self._mailbox.post(functools.partial(self._apply, state, failure, outcome))

    def _run(self) -> None:
        try:
            store = attempt_logs.installed()
            if not isinstance(store, attempt_logs.AttemptLogStore):
                self._run_attempt(None)
                return
            with store.bind(self._log_key()):
                self._run_attempt(store)
        finally:
            self._ended.set()

    def _log_key(self) -> attempt_logs.AttemptKey:
        return attempt_logs.AttemptKey(
            job_id=self.tdd.job_id,
            vertex_id=self.tdd.vertex_id,
            vertex_name=self.tdd.vertex_name,
            subtask_index=self.tdd.subtask_index,
            attempt_number=self.tdd.attempt_number,
            job_master_epoch=self.tdd.job_master_epoch,
            attempt_id=self.tdd.attempt_id,
        )

    def _run_attempt(self, store: attempt_logs.AttemptLogStore | None) -> None:
        # The lifecycle lines go to the task executor's log and (bound) to the attempt's own.
        log.info("%s (%s) deploying", self.name, self.tdd.attempt_id[:8])
        try:
            self._post(ExecutionState.INITIALIZING)
            invokable = self._factory()
            with self._lock:
                self._invokable = invokable
            if self.context.cancelled.is_set():
                raise TaskCancelledError("cancelled before it started running")
            self._post(ExecutionState.RUNNING)
            log.info("%s running", self.name)
            outcome = invokable.invoke(self.context)
            if self.context.cancelled.is_set():
                raise TaskCancelledError("cancelled while running")
            log.info("%s finished", self.name)
            self._post(ExecutionState.FINISHED, outcome=outcome)
        except BaseException as exc:
            if self.context.cancelled.is_set():
                log.info("%s canceled", self.name)
                self._post(ExecutionState.CANCELED)
            else:
                log.warning("%s failed: %s: %s", self.name, type(exc).__name__, exc, exc_info=True)
                tail = store.tail(self._log_key(), LOG_TAIL_LINES) if store is not None else []
                self._post(ExecutionState.FAILED, failure=failure_of(exc, tail))

    # -- event loop -------------------------------------------------------------------------

    def _apply(
        self,
        state: ExecutionState,
        failure: TaskFailure | None,
        outcome: TaskOutcome | None,
    ) -> None:
        if state is ExecutionState.CANCELED and self._external_failure is not None:
            state, failure = ExecutionState.FAILED, self._external_failure
        if self.state.is_terminal:
            return
        if not EXECUTION_STATE_TRANSITIONS.can_transition(self.state, state):
            # e.g. RUNNING arrives after cancel already moved us on: keep the later state.
            log.debug("%s: ignoring %s -> %s", self.name, self.state.name, state.name)
            return
        self.state = state
        self._listener(self, state, failure, outcome)


def failure_of(exc: BaseException, tail: list[str]) -> TaskFailure:
    """The failure an attempt reports for ``exc`` (called in the ``except`` block): from the
    exception itself, or - when the attempt ran in the pipeline worker - from what the worker
    said of the exception it caught there."""
    if isinstance(exc, RemoteAttemptError):
        kind, name, message, details = exc.kind, exc.exception_type, exc.message, exc.details
        lost = tuple(LostPartition.of(p) for p in exc.lost_partitions)
    else:
        kind, name, message = classify_task_exception(exc), type(exc).__name__, str(exc)
        details, lost = traceback.format_exc(), lost_partitions(exc)
    return TaskFailure(
        # UNAVAILABLE: this executor's environment failed, not the task's code, so the
        # JobMaster never takes it for a deterministic error of the task.
        ErrorCode.UNAVAILABLE if kind is ThrowableType.ENVIRONMENT else ErrorCode.INTERNAL,
        name,
        message,
        with_log_tail(details, tail),
        lost,
        suppress_restarts=kind is ThrowableType.NON_RECOVERABLE,
    )


def lost_partitions(error: BaseException) -> tuple[LostPartition, ...]:
    """The input partitions ``error`` says the task could not read (none for most errors)."""
    if isinstance(error, PartitionNotFoundError):
        return tuple(LostPartition.of(p) for p in error.partitions)
    return ()
