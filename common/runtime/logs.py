"""Process logging: one line per record, whatever the record's arguments hold.

Names in log messages come from outside (a job's name, a vertex's name, a peer's address, an
exception text of pipeline code): a newline or a terminal escape in one of them could forge a
log line or rewrite an operator's terminal. :class:`OneLineFormatter` escapes every control
character of the formatted message (``\\n`` becomes the two characters ``\\`` ``n``). A
traceback appended to a record stays multi-line: it is the process's own stack.
"""

from __future__ import annotations

import logging
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


def configure_process_logging(level: str, noisy: tuple[str, ...] = ("kazoo", "py4j")) -> None:
    """The root logger of a service process: one-line records on stderr at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(FORMAT))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])
    for name in noisy:
        logging.getLogger(name).setLevel(logging.WARNING)
