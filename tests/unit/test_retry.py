"""Retrying with back-off until a message is taken (common/runtime/retry.py: retry_with_backoff)."""

from __future__ import annotations

import asyncio

import pytest

from sparkmill.common.core.errors import FailedPreconditionError, UnavailableError
from sparkmill.common.runtime.retry import Backoff, retry_with_backoff

FAST = Backoff(initial_s=0.001, max_s=0.004)


def test_delays_double_up_to_the_maximum() -> None:
    backoff = Backoff(initial_s=0.1, max_s=2.0)
    assert [backoff.delay_after(n) for n in range(1, 8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert backoff.delay_after(10_000) == 2.0


def test_retries_any_error_until_the_attempt_succeeds() -> None:
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(len(calls))
        if len(calls) < 4:
            raise (UnavailableError if len(calls) % 2 else ConnectionError)("not yet")
        return "taken"

    assert asyncio.run(retry_with_backoff("report", attempt, FAST)) == "taken"
    assert len(calls) == 4


def test_an_error_to_give_up_on_ends_the_loop_at_once() -> None:
    calls: list[int] = []

    async def attempt() -> None:
        calls.append(1)
        raise FailedPreconditionError("another session leads the job")

    with pytest.raises(FailedPreconditionError):
        asyncio.run(
            retry_with_backoff("report", attempt, FAST, give_up_on=(FailedPreconditionError,))
        )
    assert calls == [1]


def test_cancelling_the_caller_stops_retrying() -> None:
    async def attempt() -> None:
        raise UnavailableError("down")

    async def main() -> None:
        task = asyncio.create_task(retry_with_backoff("report", attempt, FAST))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
