"""Pages of the dispatcher's job list (``ListJobs``, the REST API's ``/jobs``).

A cluster keeps every finished job until it expires, so the whole list can be long; one reply
holds at most :data:`MAX_PAGE_SIZE` jobs. Jobs are ordered by submission time, then job id, and
a page token is the position after the last job of the previous page (its submission time and
id), so a page boundary stays valid when jobs are added or expire between two calls.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import Protocol, TypeVar

from sparkmill.common.core.errors import InvalidArgumentError
from sparkmill.common.core.ids import is_valid_id

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


class Listed(Protocol):
    @property
    def job_id(self) -> str: ...

    @property
    def submitted_at(self) -> float: ...


_J = TypeVar("_J", bound=Listed)


def page_size(requested: int) -> int:
    """The page size to use for a requested one (0: the default; capped at the maximum)."""
    if requested < 0:
        raise InvalidArgumentError(f"page size {requested} is negative")
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def page_token(job: Listed) -> str:
    return f"{job.submitted_at!r}_{job.job_id}"


def _position(token: str) -> tuple[float, str]:
    submitted, _, job_id = token.partition("_")
    try:
        at = float(submitted)
    except ValueError:
        at = math.nan
    if not math.isfinite(at) or not is_valid_id(job_id):
        raise InvalidArgumentError(
            f"page token {token[:80]!r} is not one a previous job list page returned"
        )
    return at, job_id


def select_page(jobs: Iterable[_J], size: int, token: str) -> tuple[list[_J], str]:
    """The page of ``jobs`` after ``token`` ("": the first page) and the next page's token
    ("" when this is the last page)."""
    ordered = sorted(jobs, key=lambda j: (j.submitted_at, j.job_id))
    start = 0
    if token:
        keys = [(j.submitted_at, j.job_id) for j in ordered]
        start = bisect.bisect_right(keys, _position(token))
    page = ordered[start : start + size]
    more = start + size < len(ordered)
    return page, page_token(page[-1]) if more and page else ""
