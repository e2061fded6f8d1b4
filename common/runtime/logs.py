"""Process logging: one line per record, whatever the record's arguments hold.

Names in log messages come from outside (a job's name, a vertex's name, a peer's address, an
exception text of pipeline code): a newline or a terminal escape in one of them could forge a
log line or rewrite an operator's terminal. :class:`OneLineFormatter` escapes every control
character of the formatted message (``\\n`` becomes the two characters ``\\`` ``n``). A
traceback appended to a record stays multi-line: it is the process's own stack.

A service's threads never write a log line themselves: :class:`ThreadOffLoadingHandler` puts the
record, its message already formatted, on a queue, and one thread of the process writes the
lines out. A write to stderr can block (journald or a terminal that falls behind), and an event
loop blocked on it misses heartbeats; task threads logging at once waited on the handler's lock
for each other's writes. The writer empties the queue when the process exits normally; a
process killed with SIGKILL may lose the lines of its last milliseconds.
"""

from __future__ import annotations

import atexit
import copy
import logging
import logging.handlers
import queue
import re
import sys

# C0 controls but the tab, DEL, C1 controls, and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\x1b": "\\x1b"}
FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def escape_controls(text: str) -> str:
    """``text`` with every control character written as an escape, on one line."""
    return _CONTROL.sub(
        lambda m: _SHORT.get(m.group(), m.group().encode("unicode_escape").decode()), text
    )


class OneLineFormatter(logging.Formatter):
    """A formatter whose messages cannot span lines or carry terminal escapes."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


class ThreadOffLoadingHandler(logging.handlers.QueueHandler):
    """Hands each record to the process's log writer thread (see the module's docstring)."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        # The message is formatted here, where its arguments are still what they were when it
        # was logged; the traceback is rendered here too (the writer has no frames), and kept
        # apart from the message so that it stays multi-line. The queue gets a copy: the
        # process's other handlers see the record as it was logged.
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = _TRACEBACKS.formatException(record.exc_info)
        queued = copy.copy(record)
        queued.msg, queued.args, queued.exc_info = message, None, None
        return queued

    def handle(self, record: logging.LogRecord) -> bool:
        # No handler lock: the queue is thread-safe, and the lock is what threads queued on.
        if not self.filter(record):
            return False
        self.emit(record)
        return True


_TRACEBACKS = logging.Formatter()


def configure_process_logging(level: str, noisy: tuple[str, ...] = ("kazoo", "py4j")) -> None:
    """The root logger of a service process: one-line records on stderr at ``level``, written
    by a thread of their own."""
    writer = logging.StreamHandler(sys.stderr)
    writer.setFormatter(OneLineFormatter(FORMAT))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(records, writer)
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        handlers=[ThreadOffLoadingHandler(records)],
    )
    for name in noisy:
        logging.getLogger(name).setLevel(logging.WARNING)
    listener.start()
    atexit.register(listener.stop)  # the lines still queued are written on the way out
