"""The last lines of a failed attempt's log, carried in its failure's details.

A task executor appends them to the traceback of a FAILED attempt (under :data:`LOG_TAIL_HEADER`)
so that they travel with the failure into the JobMaster's exceptions history, the job's archive
and ``sparkmill jobs status`` without a field of their own on every hop.
"""

from __future__ import annotations

LOG_TAIL_LINES = 20
LOG_TAIL_HEADER = "--- last lines of the attempt's log ---"


def with_log_tail(details: str, tail: list[str]) -> str:
    """``details`` (a traceback) followed by ``tail`` under the header (unchanged if empty)."""
    if not tail:
        return details
    return f"{details.rstrip()}\n{LOG_TAIL_HEADER}\n" + "\n".join(tail)


def split_log_tail(details: str) -> tuple[str, list[str]]:
    """(the details without the tail, the tail's lines)."""
    head, found, tail = details.partition(f"\n{LOG_TAIL_HEADER}\n")
    if not found:
        return details, []
    return head, tail.splitlines()
