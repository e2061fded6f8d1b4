"""Log records stay one line each, whatever names they carry."""

from __future__ import annotations

import io
import logging
import logging.handlers
import queue
import threading

from sparkmill.common.runtime.logs import (
    FORMAT,
    OneLineFormatter,
    ThreadOffLoadingHandler,
    escape_controls,
)


def test_a_newline_in_a_name_cannot_forge_a_log_line() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter(FORMAT))
    logger = logging.getLogger("test.one-line")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        name = "daily\n2026-01-01 00:00:00,000 INFO    sparkmill: job x FINISHED\x1b[2J"
        logger.warning("job %s submitted", name)
    finally:
        logger.removeHandler(handler)
    written = stream.getvalue()
    assert written.count("\n") == 1  # the record's own end of line only
    assert "daily\\n2026-01-01" in written and "\\x1b[2J" in written


def test_escaping_keeps_tabs_and_printable_text() -> None:
    assert escape_controls("a\tb é ü 日本") == "a\tb é ü 日本"
    assert escape_controls("a\rb\u2028c\x7f") == "a\\rb\\u2028c\\x7f"


def test_records_written_by_the_writer_thread_keep_their_values_lines_and_tracebacks() -> None:
    stream = io.StringIO()
    writer = logging.StreamHandler(stream)
    writer.setFormatter(OneLineFormatter(FORMAT))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(records, writer)
    logger = logging.getLogger("test.off-loaded")
    logger.addHandler(ThreadOffLoadingHandler(records))
    logger.propagate = False
    listener.start()
    try:
        names = ["first"]
        logger.warning("job %s submitted", names)
        names[0] = "changed after logging"  # the line shows the value when it was logged
        logger.warning("name with a newline: %s", "a\nb")
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("task failed")

        def many(n: int) -> None:
            for i in range(200):
                logger.warning("thread %d line %d", n, i)

        threads = [threading.Thread(target=many, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        listener.stop()  # what the process does when it exits: every queued line is written
        logger.handlers.clear()
    written = stream.getvalue()
    assert "job ['first'] submitted" in written and "changed after logging" not in written
    assert "name with a newline: a\\nb" in written
    task_failed = written[written.index("task failed") :]
    assert "Traceback (most recent call last):\n" in task_failed  # multi-line, its own stack
    assert "ValueError: boom" in task_failed
    lines = {line.split(": ", 1)[1] for line in written.splitlines() if ": thread " in line}
    assert lines == {f"thread {n} line {i}" for n in range(4) for i in range(200)}
