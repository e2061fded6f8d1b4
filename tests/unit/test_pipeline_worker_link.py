"""The task executor's end of the pipeline worker channel, against a hand-written worker.

:class:`TestingPipelineWorker` listens on a Unix socket in the test's directory (the way a
socket-activated worker does) and answers from a script; nothing starts Spark here.
"""

from __future__ import annotations

import os
import pwd
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkmill.common.core.errors import (
    ErrorCode,
    PartitionNotFoundError,
    TaskCancelledError,
    ThrowableType,
    classify_task_exception,
)
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.partitions import InputGateInfo, InputPartitionInfo
from sparkmill.common.v1 import pipeline_worker_pb2 as pw
from sparkmill.services.taskexecutor.context import TaskContext, TaskOutcome
from sparkmill.services.taskexecutor.pipeline import launch
from sparkmill.services.taskexecutor.pipeline.channel import Channel, ChannelClosed
from sparkmill.services.taskexecutor.pipeline.codec import (
    RemoteAttemptError,
    attempt_from_proto,
    attempt_to_proto,
    failed_result,
    finished_result,
    outcome_of,
)
from sparkmill.services.taskexecutor.pipeline.link import (
    PipelineWorkerInvokable,
    PipelineWorkerLink,
    PipelineWorkerLost,
)
from sparkmill.services.taskexecutor.pipeline.worker_logs import ForwardingAttemptLogs
from sparkmill.services.taskexecutor.task import failure_of

Answer = Callable[[Channel, pw.PipelineAttempt], None]


def _context(attempt_id: str = "a1", inputs: list[InputGateInfo] | None = None) -> TaskContext:
    return TaskContext(
        job_id="j" * 32,
        job_name="job",
        vertex_id="v" * 32,
        vertex_name="count",
        subtask_index=1,
        parallelism=3,
        attempt_id=attempt_id,
        attempt_number=2,
        payload=b"\x00plan",
        job_master_epoch=7,
        job_config={"k": "v"},
        inputs=inputs or [],
        produced_dataset_ids=["d1"],
        consumer_parallelism={"d1": 4},
        resource_id="te-1",
        allocation_id="alloc",
        slot_index=None,
        exchange_dir="/x",
        protected_dirs=("/x", "/ha"),
    )


class TestingPipelineWorker:
    __test__ = False  # a test double, not a test class

    """A scripted worker: ``answer`` is called for each attempt it is given."""

    def __init__(self, path: Path, answer: Answer) -> None:
        self.path = path
        self.answer = answer
        self.setups: list[pw.PipelineWorkerSetup] = []
        self.cancelled: list[str] = []
        self.answers_cancel = True
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            channel = Channel(sock)
            try:
                while True:
                    message = channel.receive()
                    kind = message.WhichOneof("body")
                    if kind == "setup":
                        self.setups.append(message.setup)
                    elif kind == "run":
                        self.answer(channel, message.run)
                    elif kind == "cancel":
                        self.cancelled.append(message.cancel.attempt_id)
                        if not self.answers_cancel:
                            continue
                        channel.send(
                            pw.PipelineWorkerMessage(
                                result=pw.PipelineAttemptResult(
                                    attempt_id=message.cancel.attempt_id, cancelled=True
                                )
                            )
                        )
            except ChannelClosed:
                channel.close()

    def close(self) -> None:
        self.listener.close()


@dataclass
class Linked:
    link: PipelineWorkerLink
    worker: TestingPipelineWorker
    lines: list[tuple[str, str]]


LinkFactory = Callable[[Answer], Linked]


def _kept(lines: list[tuple[str, str]], attempt: str, line: str) -> bool:
    lines.append((attempt, line))
    return True


@pytest.fixture
def worker_factory(tmp_path: Path) -> Iterator[LinkFactory]:
    made: list[tuple[TestingPipelineWorker, PipelineWorkerLink]] = []
    lines: list[tuple[str, str]] = []

    def make(answer: Answer) -> Linked:
        worker = TestingPipelineWorker(tmp_path / f"w{len(made)}.sock", answer)
        link = PipelineWorkerLink(
            pw.PipelineWorkerSetup(spark_master="local[1]", slots=2),
            socket_path=str(worker.path),
            log_lines=lambda attempt, line: _kept(lines, attempt, line),
        )
        made.append((worker, link))
        return Linked(link, worker, lines)

    yield make
    for worker, link in made:
        link.stop(timeout_s=5)
        worker.close()


def _finish(channel: Channel, attempt: pw.PipelineAttempt) -> None:
    channel.send(
        pw.PipelineWorkerMessage(log=pw.PipelineLogLine(attempt_id=attempt.attempt_id, line="hi"))
    )
    channel.send(
        pw.PipelineWorkerMessage(log=pw.PipelineLogLine(attempt_id="other", line="forged"))
    )
    channel.send(
        pw.PipelineWorkerMessage(
            result=finished_result(attempt.attempt_id, TaskOutcome(IOCounters(1, 2, 3, 4), b"rows"))
        )
    )


# -- the channel -----------------------------------------------------------------------------


def test_frames_cross_whole_and_a_bad_frame_ends_the_channel() -> None:
    a, b = socket.socketpair()
    ours, theirs = Channel(a), Channel(b, max_frame_bytes=1024)
    ours.send(pw.PipelineWorkerMessage(cancel=pw.CancelPipelineAttempt(attempt_id="x")))
    assert theirs.receive().cancel.attempt_id == "x"
    ours.send(pw.PipelineWorkerMessage(run=pw.PipelineAttempt(payload=b"p" * 4096)))
    with pytest.raises(ChannelClosed, match=r"4[0-9]{3}-byte frame"):
        theirs.receive()
    a2, b2 = socket.socketpair()
    a2.sendall(struct.pack(">I", 3) + b"\xff\xff\xff")
    with pytest.raises(ChannelClosed, match="does not parse"):
        Channel(b2).receive()
    a3, b3 = socket.socketpair()
    a3.sendall(struct.pack(">I", 0))
    with pytest.raises(ChannelClosed, match="no body"):
        Channel(b3).receive()
    a3.close()
    with pytest.raises(ChannelClosed, match="closed"):
        Channel(b3).receive()
    for s in (a, b, a2, b2, b3):
        s.close()


# -- the codec -------------------------------------------------------------------------------


def test_an_attempts_context_crosses_unchanged() -> None:
    gate = InputGateInfo(
        "d0", "ALL_TO_ALL", "hash", 2, (InputPartitionInfo("d0", 1, "p1", "te-9"),)
    )
    sent = _context(inputs=[gate])
    got = attempt_from_proto(attempt_to_proto(sent))
    for name in TaskContext.__dataclass_fields__:
        if name not in ("cancelled", "services"):
            assert getattr(got, name) == getattr(sent, name), name
    sent.slot_index = 3
    assert attempt_from_proto(attempt_to_proto(sent)).slot_index == 3


def test_a_failure_crosses_classified_with_its_lost_partitions() -> None:
    lost = (InputPartitionInfo("d0", 1, "p1", "te-9"),)
    try:
        raise PartitionNotFoundError("gone", lost)
    except PartitionNotFoundError as exc:
        result = failed_result("a1", exc)
    with pytest.raises(RemoteAttemptError) as raised:
        outcome_of(result)
    assert raised.value.kind is ThrowableType.PARTITION_DATA_MISSING
    assert raised.value.lost_partitions == lost
    assert raised.value.exception_type == "PartitionNotFoundError"
    assert "raise PartitionNotFoundError" in raised.value.details
    # A kind the task executor does not know is an ordinary failure, never a suppressing one.
    forged = pw.PipelineAttemptResult(attempt_id="a1", exception_type="X", throwable="bogus")
    with pytest.raises(RemoteAttemptError) as raised:
        outcome_of(forged)
    assert raised.value.kind is ThrowableType.RECOVERABLE
    with pytest.raises(TaskCancelledError):
        outcome_of(pw.PipelineAttemptResult(attempt_id="a1", cancelled=True))


def test_the_task_reports_what_the_worker_said_not_the_carrier_exception() -> None:
    error = RemoteAttemptError(
        "ValueError", "bad row", "Traceback: worker side", ThrowableType.NON_RECOVERABLE
    )
    try:
        raise error
    except RemoteAttemptError as exc:
        failure = failure_of(exc, ["last line"])
    assert (failure.code, failure.exception_type, failure.message) == (
        ErrorCode.INTERNAL,
        "ValueError",
        "bad row",
    )
    assert failure.suppress_restarts and "worker side" in failure.details
    assert "last line" in failure.details
    lost = PipelineWorkerLost("the pipeline worker was killed by signal 9")
    assert classify_task_exception(lost) is ThrowableType.ENVIRONMENT


# -- the link --------------------------------------------------------------------------------


def test_an_attempt_runs_on_the_worker_and_only_its_own_lines_are_kept(
    worker_factory: LinkFactory,
) -> None:
    linked = worker_factory(_finish)
    outcome = PipelineWorkerInvokable(linked.link).invoke(_context())
    assert outcome == TaskOutcome(IOCounters(1, 2, 3, 4), b"rows")
    assert linked.lines == [("a1", "hi")]


def test_a_result_for_an_attempt_not_handed_over_is_ignored(worker_factory: LinkFactory) -> None:
    def forge_then_finish(channel: Channel, attempt: pw.PipelineAttempt) -> None:
        channel.send(
            pw.PipelineWorkerMessage(
                result=pw.PipelineAttemptResult(attempt_id="zz", finished=True)
            )
        )
        _finish(channel, attempt)

    link = worker_factory(forge_then_finish).link
    assert link.run(_context()).accumulator == b"rows"


def test_lost_partitions_are_only_the_attempts_own_inputs(worker_factory: LinkFactory) -> None:
    own = InputPartitionInfo("d0", 0, "p0", "te-1")

    def claim(channel: Channel, attempt: pw.PipelineAttempt) -> None:
        other = InputPartitionInfo("d9", 5, "p9", "te-1")
        try:
            raise PartitionNotFoundError("gone", (own, other))
        except PartitionNotFoundError as exc:
            channel.send(pw.PipelineWorkerMessage(result=failed_result(attempt.attempt_id, exc)))

    link = worker_factory(claim).link
    gate = InputGateInfo("d0", "ALL_TO_ALL", "hash", 1, (own,))
    with pytest.raises(RemoteAttemptError) as raised:
        link.run(_context(inputs=[gate]))
    assert raised.value.lost_partitions == (own,)


def test_a_worker_that_dies_fails_its_attempts_as_an_environment_failure(
    worker_factory: LinkFactory,
) -> None:
    def die(channel: Channel, attempt: pw.PipelineAttempt) -> None:
        channel.close()

    link = worker_factory(die).link
    with pytest.raises(PipelineWorkerLost, match="closed its socket"):
        link.run(_context())
    # The next attempt gets a new connection (here: the same scripted worker again).
    with pytest.raises(PipelineWorkerLost):
        link.run(_context("a2"))


def test_a_worker_sending_what_only_the_task_executor_sends_is_cut_off(
    worker_factory: LinkFactory,
) -> None:
    def confused(channel: Channel, attempt: pw.PipelineAttempt) -> None:
        channel.send(pw.PipelineWorkerMessage(run=attempt))

    link = worker_factory(confused).link
    with pytest.raises(PipelineWorkerLost):
        link.run(_context())


def test_cancel_reaches_the_worker_and_the_attempt_ends_cancelled(
    worker_factory: LinkFactory,
) -> None:
    started = threading.Event()

    def hang(channel: Channel, attempt: pw.PipelineAttempt) -> None:
        started.set()  # answers only the cancel

    link = worker_factory(hang).link
    invokable = PipelineWorkerInvokable(link)
    context = _context()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            invokable.invoke(context)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(5)
    context.cancelled.set()
    invokable.cancel()
    thread.join(5)
    assert len(errors) == 1 and isinstance(errors[0], TaskCancelledError)


def test_the_setup_is_the_first_message(worker_factory: LinkFactory) -> None:
    linked = worker_factory(_finish)
    linked.link.run(_context())
    linked.link.run(_context("a2"))
    setups = linked.worker.setups
    assert [(s.spark_master, s.slots) for s in setups] == [("local[1]", 2)]  # one connection


# -- the worker's side and the launch --------------------------------------------------------


def test_the_worker_forwards_a_bound_threads_lines_with_its_attempt() -> None:
    sent: list[tuple[str, str]] = []
    logs = ForwardingAttemptLogs(lambda attempt, line: sent.append((attempt, line)))
    assert not logs.write_stream("stdout", "unbound\n")
    with logs.bind("a1"):
        logs.write_line("logged")
        assert logs.write_stream("stdout", "half ")
        assert logs.write_stream("stdout", "line\nrest")
        assert logs.write_attempt_line("a1", "stderr", "from a UDF")
    assert not logs.write_attempt_line("a1", "stderr", "after the end")
    texts = [line for attempt, line in sent if attempt == "a1"]
    assert texts[0] == "logged"
    assert texts[1].endswith("stdout: half line")
    assert texts[2].endswith("stderr (python worker): from a UDF")
    assert texts[3] == "rest"  # the unfinished line, when the attempt ends
    assert len(sent) == 4


def test_the_worker_inherits_no_secret_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    monkeypatch.setenv("SPARKMILL_REST_TOKEN", "t0ken")
    monkeypatch.setenv("JAVA_HOME", "/jvm")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    user = launch.PipelineUser("sparkmill-pipeline", 999, 999)
    env = launch.worker_environment(user, Path("/work/dir"))
    assert "s3cret" not in env.values() and "t0ken" not in env.values()
    assert env["JAVA_HOME"] == "/jvm" and env["LC_ALL"] == "C.UTF-8"
    assert (env["HOME"], env["USER"]) == ("/work/dir", "sparkmill-pipeline")


def test_a_non_root_task_executor_runs_the_worker_as_itself_and_says_so(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 4242)  # nobody can switch users but root
    assert launch.resolve_pipeline_user("sparkmill-pipeline") is None
    assert "SECURITY: pipeline code runs as this task executor's own user" in caplog.text
    caplog.clear()
    assert launch.resolve_pipeline_user(launch.SAME_USER) is None  # asked for: no warning
    assert "SECURITY" not in caplog.text


def test_an_attempt_that_ignores_its_cancellation_ends_its_worker(
    worker_factory: LinkFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkmill.services.taskexecutor.pipeline import link as link_module

    monkeypatch.setattr(link_module, "CANCEL_WATCHDOG_S", 0.3)
    started = threading.Event()
    linked = worker_factory(lambda channel, attempt: started.set())
    linked.worker.answers_cancel = False  # pipeline code that never returns
    context = _context()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            linked.link.run(context)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(5)
    context.cancelled.set()
    linked.link.cancel(context.attempt_id)
    thread.join(10)
    assert not thread.is_alive()
    assert set(linked.worker.cancelled) == {"a1"}  # once or twice: run() checks too
    assert len(errors) == 1 and isinstance(errors[0], TaskCancelledError)


def test_a_refused_file_access_names_the_user_pipeline_code_runs_as() -> None:
    from sparkmill.services.taskexecutor.pipeline.worker import with_user_hint

    name = pwd.getpwuid(os.geteuid()).pw_name
    hinted = with_user_hint("operator 'write' failed: [Errno 13] Permission denied: '/out'")
    assert hinted.endswith(
        f"(pipeline code runs as user {name!r}, uid {os.geteuid()}: that user must be able to "
        "read the job's inputs and write its outputs)"
    )
    assert with_user_hint("division by zero") == "division by zero"
