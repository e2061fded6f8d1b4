"""Pages of the dispatcher's job list (services/dispatcher/job_listing.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sparkmill.common.core.errors import InvalidArgumentError
from sparkmill.common.core.ids import new_job_id
from sparkmill.services.dispatcher.job_listing import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    page_size,
    select_page,
)


@dataclass(frozen=True)
class TestingJob:
    __test__ = False  # a fake, not a test class

    job_id: str
    submitted_at: float


def walk(jobs: list[TestingJob], size: int) -> list[list[TestingJob]]:
    pages, token = [], ""
    while True:
        page, token = select_page(jobs, size, token)
        pages.append(page)
        if not token:
            return pages


def test_pages_cover_every_job_once_in_submission_order() -> None:
    jobs = [TestingJob(new_job_id(), float(i // 3)) for i in range(10)]  # ties in time
    pages = walk(list(reversed(jobs)), 4)
    assert [len(p) for p in pages] == [4, 4, 2]
    flat = [j for p in pages for j in p]
    assert flat == sorted(jobs, key=lambda j: (j.submitted_at, j.job_id))


def test_a_page_boundary_survives_jobs_expiring_and_arriving() -> None:
    jobs = [TestingJob(new_job_id(), float(i)) for i in range(6)]
    first, token = select_page(jobs, 3, "")
    remaining = [j for j in jobs if j is not first[-1]]  # the last job listed expired
    remaining.append(TestingJob(new_job_id(), 99.0))  # and a new one arrived
    second, token = select_page(remaining, 3, token)
    assert second == jobs[3:6] and token
    third, token = select_page(remaining, 3, token)
    assert [j.submitted_at for j in third] == [99.0] and token == ""


def test_page_sizes_are_bounded_and_bad_tokens_refused() -> None:
    assert page_size(0) == DEFAULT_PAGE_SIZE
    assert page_size(10**9) == MAX_PAGE_SIZE
    with pytest.raises(InvalidArgumentError):
        page_size(-1)
    for token in ("x", "1.0_../../etc", "nan_" + "0" * 32, "1.0"):
        with pytest.raises(InvalidArgumentError, match="is not one a previous job list page"):
            select_page([], 10, token)
