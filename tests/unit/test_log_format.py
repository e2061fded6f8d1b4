"""Log records stay one line each, whatever names they carry."""

from __future__ import annotations

import io
import logging

from sparkmill.common.runtime.logs import FORMAT, OneLineFormatter, escape_controls


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
