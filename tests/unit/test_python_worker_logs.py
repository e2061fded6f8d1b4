"""What UDFs print in Spark's Python workers reaches their attempt's log (no Spark here: the
sender's task context is given by the test; tests/integration/test_attempt_logs_history.py runs
it with real Spark)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmill.services.taskexecutor.attempt_logs import AttemptKey, AttemptLogStore
from sparkmill.services.taskexecutor.spark.python_daemon import AttemptLineSender
from sparkmill.services.taskexecutor.spark.python_worker_logs import (
    MAX_LINE_BYTES,
    PythonWorkerLogReceiver,
    decode_line,
    encode_line,
    socket_address,
)


class RecordingSink:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str]] = []
        self.arrived = threading.Event()

    def write_attempt_line(self, attempt_id: str, stream: str, line: str) -> bool:
        self.lines.append((attempt_id, stream, line))
        self.arrived.set()
        return True


class TestingLineSender(AttemptLineSender):
    """A sender whose running task is set by the test instead of Spark's TaskContext."""

    __test__ = False  # a testing double, not a test class

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address
        self.attempt_id: str | None = "attempt-1"

    def _attempt(self) -> tuple[str, str] | None:
        return None if self.attempt_id is None else (self.attempt_id, self.address)


@pytest.fixture
def sink() -> Iterator[tuple[RecordingSink, PythonWorkerLogReceiver]]:
    recording = RecordingSink()
    receiver = PythonWorkerLogReceiver(recording)
    try:
        yield recording, receiver
    finally:
        receiver.stop()


def wait_for(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)
    assert condition(), "nothing arrived"  # type: ignore[operator]


def test_lines_are_joined_across_writes_and_tagged_with_their_attempt(
    sink: tuple[RecordingSink, PythonWorkerLogReceiver],
) -> None:
    recording, receiver = sink
    sender = TestingLineSender(receiver.address)
    sender.write("stdout", "hello ")
    sender.write("stdout", "world\nsecond line\nunfinished")
    sender.write("stderr", "a warning\n")
    wait_for(lambda: len(recording.lines) == 3)
    assert recording.lines == [
        ("attempt-1", "stdout", "hello world"),
        ("attempt-1", "stdout", "second line"),
        ("attempt-1", "stderr", "a warning"),
    ]
    # The next task in the same worker: the earlier attempt's unfinished line goes first.
    sender.attempt_id = "attempt-2"
    sender.write("stdout", "next task\n")
    wait_for(lambda: len(recording.lines) == 5)
    assert recording.lines[3:] == [
        ("attempt-1", "stdout", "unfinished"),
        ("attempt-2", "stdout", "next task"),
    ]
    # Outside a sparkmill task nothing is sent.
    sender.attempt_id = None
    sender.write("stdout", "not ours\n")
    time.sleep(0.2)
    assert len(recording.lines) == 5


def test_flush_returns_once_every_line_sent_before_it_is_kept(
    sink: tuple[RecordingSink, PythonWorkerLogReceiver],
) -> None:
    recording, receiver = sink
    sender = TestingLineSender(receiver.address)
    for i in range(100):
        sender.write("stdout", f"line {i}\n")
    assert receiver.flush()  # no waiting after it: an attempt ends right after its flush
    assert [line for _, _, line in recording.lines] == [f"line {i}" for i in range(100)]
    assert receiver.refused == 0  # the marker is not taken for a line


def test_a_datagram_that_is_not_a_line_is_refused_and_the_receiver_goes_on(
    sink: tuple[RecordingSink, PythonWorkerLogReceiver],
) -> None:
    recording, receiver = sink
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as raw:
        raw.sendto(b"no separators at all", socket_address(receiver.address))
        raw.sendto(b"a\0not-a-stream\0line", socket_address(receiver.address))
    TestingLineSender(receiver.address).write("stdout", "still here\n")
    wait_for(lambda: recording.lines == [("attempt-1", "stdout", "still here")])
    assert receiver.refused == 2


@pytest.mark.skipif(os.getuid() != 0, reason="sending as another user needs root")
def test_a_line_from_another_user_is_refused(
    sink: tuple[RecordingSink, PythonWorkerLogReceiver],
) -> None:
    recording, receiver = sink
    child = os.fork()
    if child == 0:  # pragma: no cover - the child process
        try:
            os.setuid(65534)  # nobody
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as raw:
                raw.sendto(
                    encode_line("attempt-1", "stdout", "forged"), socket_address(receiver.address)
                )
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    wait_for(lambda: receiver.refused == 1)
    assert recording.lines == []


def test_a_huge_line_is_cut_and_nothing_blocks_without_a_receiver() -> None:
    assert decode_line(encode_line("a", "stdout", "x" * 100_000)) == (
        "a",
        "stdout",
        "x" * MAX_LINE_BYTES,
    )
    sender = TestingLineSender("@sparkmill-test-nobody-listens")
    started = time.monotonic()
    for _ in range(1000):
        sender.write("stdout", "dropped\n")
    assert time.monotonic() - started < 2.0


def test_the_store_keeps_lines_of_running_attempts_only(tmp_path: Path) -> None:
    store = AttemptLogStore(tmp_path, max_bytes=4096, retention_s=60.0)
    key = AttemptKey("f" * 32, "v1", "map", 0, 0, 1, "attempt-1")
    assert not store.write_attempt_line("attempt-1", "stdout", "before it runs")
    with store.bind(key):
        assert store.write_attempt_line("attempt-1", "stdout", "udf says hi")
        assert not store.write_attempt_line("attempt-9", "stdout", "someone else's")
    text = store.read(key, 0, 1 << 20).text
    assert "stdout (python worker): udf says hi" in text
    assert "before it runs" not in text and "someone else's" not in text
