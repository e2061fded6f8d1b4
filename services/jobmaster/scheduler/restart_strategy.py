"""Restart strategies: after a task failure, restart (after a back-off) or fail the job for good.

Flink's ``RestartBackoffTimeStrategy`` family (as asked by ``tryRestartOrFail``):

* ``none`` - never restart;
* ``fixed-delay`` - up to ``attempts`` restarts, each after ``delay``;
* ``failure-rate`` - restart unless more than ``max-failures-per-interval`` failures happened
  within ``failure-rate-interval``; each restart after ``delay``;
* ``exponential-delay`` - back-off grows from ``initial-backoff`` by ``backoff-multiplier`` up to
  ``max-backoff`` (with ``jitter-factor``), and goes back to the initial value after
  ``reset-backoff-threshold`` without failures.

``exponential-delay`` is the default (see ``restart-strategy.type`` for why it differs from
Flink's) and, like Flink's since FLIP-364, counts failures that arrive while a restart is still
pending as one: the tasks of one lost task executor fail together, and that is one incident, not
one per task (the scheduler asks :attr:`merges_concurrent_failures`).

Which failures are restarted at all is decided before a strategy is asked
(:mod:`sparkmill.services.jobmaster.scheduler.failure_classifier`): a failure that no restart can
fix, or that repeats itself exactly, fails the job at once with the reason.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from sparkmill.common.runtime.settings import RestartSettings


class RestartStrategy(Protocol):
    # True: a failure while an earlier one's restart is pending joins that restart (same
    # back-off, not counted again); False: every failure is counted and backs off on its own.
    merges_concurrent_failures: bool

    def notify_failure(self, timestamp: float) -> None:
        """Record a failure that happened at ``timestamp`` (monotonic seconds)."""
        ...

    def can_restart(self) -> bool: ...

    def backoff_s(self) -> float:
        """How long to wait before restarting after the last recorded failure."""
        ...

    def describe(self) -> str: ...


class NoRestartStrategy:
    merges_concurrent_failures = False

    def notify_failure(self, timestamp: float) -> None:
        pass

    def can_restart(self) -> bool:
        return False

    def backoff_s(self) -> float:
        return 0.0

    def describe(self) -> str:
        return "no restarts (restart-strategy.type: none)"


@dataclass
class FixedDelayRestartStrategy:
    attempts: int
    delay_s: float
    failures: int = 0
    merges_concurrent_failures = False

    def notify_failure(self, timestamp: float) -> None:
        self.failures += 1

    def can_restart(self) -> bool:
        return self.failures <= self.attempts

    def backoff_s(self) -> float:
        return self.delay_s

    def describe(self) -> str:
        return f"fixed-delay ({self.attempts} restart attempts, {self.delay_s:g}s delay)"


class FailureRateRestartStrategy:
    merges_concurrent_failures = False

    def __init__(self, max_failures: int, interval_s: float, delay_s: float) -> None:
        self.max_failures = max_failures
        self.interval_s = interval_s
        self.delay_s = delay_s
        self._failures: deque[float] = deque()

    def notify_failure(self, timestamp: float) -> None:
        self._failures.append(timestamp)
        while self._failures and self._failures[0] < timestamp - self.interval_s:
            self._failures.popleft()

    def can_restart(self) -> bool:
        return len(self._failures) <= self.max_failures

    def backoff_s(self) -> float:
        return self.delay_s

    def describe(self) -> str:
        return (
            f"failure-rate (at most {self.max_failures} failures per "
            f"{self.interval_s:g}s, {self.delay_s:g}s delay)"
        )


class ExponentialDelayRestartStrategy:
    merges_concurrent_failures = True

    def __init__(
        self,
        initial_s: float,
        max_s: float,
        multiplier: float,
        reset_threshold_s: float,
        jitter: float,
        max_attempts: int,
        rng: random.Random | None = None,
    ) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.multiplier = multiplier
        self.reset_threshold_s = reset_threshold_s
        self.jitter = jitter
        self.max_attempts = max_attempts
        self._rng = rng or random.Random()
        self._current = 0.0
        self._last_failure: float | None = None
        self._attempts = 0

    def notify_failure(self, timestamp: float) -> None:
        last = self._last_failure
        if last is not None and timestamp - last >= self.reset_threshold_s + self._current:
            self._current, self._attempts = 0.0, 0  # a long healthy period resets the back-off
        self._current = (
            self.initial_s
            if self._current == 0.0
            else min(self._current * self.multiplier, self.max_s)
        )
        self._attempts += 1
        self._last_failure = timestamp

    def can_restart(self) -> bool:
        return self._attempts <= self.max_attempts

    def backoff_s(self) -> float:
        spread = self._current * self.jitter
        # Jitter never takes the pause above max-backoff (documented: "never exceeds this").
        return min(self.max_s, max(0.0, self._current + self._rng.uniform(-spread, spread)))

    def describe(self) -> str:
        return (
            f"exponential-delay ({self.initial_s:g}s..{self.max_s:g}s, "
            f"x{self.multiplier:g}, jitter {self.jitter:g})"
        )


def restart_strategy_from_settings(settings: RestartSettings) -> RestartStrategy:
    kind = settings.strategy
    if kind == "fixed-delay":
        return FixedDelayRestartStrategy(settings.fixed_delay_attempts, settings.fixed_delay_s)
    if kind == "failure-rate":
        return FailureRateRestartStrategy(
            settings.failure_rate_max_failures,
            settings.failure_rate_interval_s,
            settings.failure_rate_delay_s,
        )
    if kind == "exponential-delay":
        return ExponentialDelayRestartStrategy(
            settings.exponential_initial_backoff_s,
            settings.exponential_max_backoff_s,
            settings.exponential_multiplier,
            settings.exponential_reset_threshold_s,
            settings.exponential_jitter,
            settings.exponential_attempts,
        )
    return NoRestartStrategy()
