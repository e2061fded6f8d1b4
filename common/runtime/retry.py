"""Retrying with exponential back-off.

:func:`retry_with_backoff` delivers one message until it is taken (e.g. a JobMaster's job status
report to the dispatcher leader): every failure waits a doubling delay, up to a maximum, and the
errors that mean "never" end it.

:func:`retry_registration` is for registrations (TaskExecutor→RM, JobMaster→RM, ...), with
Flink's ``RetryingRegistration`` semantics: the n-th attempt waits ``min(initial * 2**n, max)``
for an answer; a *failed* attempt (error reply) waits ``error_delay`` before the next one, and a
*refused* registration (the target answered "no") waits ``refused_delay``. The loop ends on
success or when cancelled (e.g. the leader changed and a new registration starts).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sparkmill.common.core.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    RpcError,
)

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_timeout_s: float = 0.1
    max_timeout_s: float = 30.0
    error_delay_s: float = 10.0
    refused_delay_s: float = 30.0

    def timeout_for(self, attempt: int) -> float:
        backoff: float = self.initial_timeout_s * 2.0 ** min(attempt, 30)
        return min(backoff, self.max_timeout_s)


async def retry_registration(
    what: str,
    attempt_fn: Callable[[float], Awaitable[T]],
    policy: RetryPolicy,
) -> T:
    """Call ``attempt_fn(timeout)`` until it returns; logs each failure once with its reason."""
    attempt = 0
    while True:
        timeout = policy.timeout_for(attempt)
        try:
            return await attempt_fn(timeout)
        except DeadlineExceededError:
            # No answer: try again at once with a longer timeout (the target may be starting).
            if attempt in (3, 10) or attempt % 50 == 49:
                log.info("%s: no answer yet after %d attempts, still trying", what, attempt + 1)
            delay = 0.0
        except (InvalidArgumentError, FailedPreconditionError) as exc:
            log.warning("%s refused: %s; retrying in %.1fs", what, exc, policy.refused_delay_s)
            delay = policy.refused_delay_s
        except RpcError as exc:
            log.warning(
                "%s failed: %s: %s; retrying in %.1fs",
                what,
                type(exc).__name__,
                exc,
                policy.error_delay_s,
            )
            delay = policy.error_delay_s
        attempt += 1
        if delay:
            await asyncio.sleep(delay)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between attempts: ``initial_s``, doubling after each failure, at most ``max_s``."""

    initial_s: float = 0.1
    max_s: float = 2.0

    def delay_after(self, failures: int) -> float:
        """The wait after the ``failures``-th failure in a row (1-based)."""
        return min(self.initial_s * 2.0 ** min(failures - 1, 30), self.max_s)


async def retry_with_backoff(
    what: str,
    attempt_fn: Callable[[], Awaitable[T]],
    backoff: Backoff,
    *,
    give_up_on: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``attempt_fn()`` until it returns. An exception of a ``give_up_on`` type ends the
    loop (it is raised to the caller); any other is logged and retried after the next delay.
    Cancelling the calling task stops it."""
    failures = 0
    while True:
        try:
            return await attempt_fn()
        except give_up_on:
            raise
        except Exception as exc:
            failures += 1
            log.info("%s failed (%s); retrying", what, exc)
        await asyncio.sleep(backoff.delay_after(failures))
