"""Unit tests of the restart strategies (Flink's RestartBackoffTimeStrategy family)."""

from __future__ import annotations

import random

import pytest

from sparkmill.services.jobmaster.scheduler.restart_strategy import (
    ExponentialDelayRestartStrategy,
    FailureRateRestartStrategy,
    FixedDelayRestartStrategy,
    NoRestartStrategy,
    RestartStrategy,
)


def restarts_allowed(strategy: RestartStrategy, timestamps: list[float]) -> list[bool]:
    """Notify a failure at each timestamp; whether a restart was allowed after each."""
    allowed = []
    for timestamp in timestamps:
        strategy.notify_failure(timestamp)
        allowed.append(strategy.can_restart())
    return allowed


# ------------------------------------------------------------------------------------ none


def test_none_never_restarts() -> None:
    strategy = NoRestartStrategy()
    assert restarts_allowed(strategy, [0.0, 100.0]) == [False, False]
    assert strategy.backoff_s() == 0.0
    assert "none" in strategy.describe()


# ------------------------------------------------------------------------------------ fixed-delay


@pytest.mark.parametrize("attempts", [0, 1, 3])
def test_fixed_delay_allows_exactly_its_attempts(attempts: int) -> None:
    strategy = FixedDelayRestartStrategy(attempts, 2.5)
    allowed = restarts_allowed(strategy, [float(t) for t in range(attempts + 2)])
    assert allowed == [True] * attempts + [False, False]
    assert strategy.backoff_s() == 2.5


def test_fixed_delay_counts_failures_regardless_of_time() -> None:
    strategy = FixedDelayRestartStrategy(2, 0.0)
    # Far apart or not, the third failure is one too many: fixed-delay never forgives.
    assert restarts_allowed(strategy, [0.0, 1e6, 2e6]) == [True, True, False]
    assert strategy.describe() == "fixed-delay (2 restart attempts, 0s delay)"


# ------------------------------------------------------------------------------------ failure-rate


def test_failure_rate_fails_when_more_than_max_failures_fall_in_the_window() -> None:
    strategy = FailureRateRestartStrategy(max_failures=2, interval_s=10.0, delay_s=3.0)
    assert restarts_allowed(strategy, [0.0, 1.0, 2.0]) == [True, True, False]
    assert strategy.backoff_s() == 3.0


def test_failure_rate_window_slides() -> None:
    strategy = FailureRateRestartStrategy(max_failures=2, interval_s=10.0, delay_s=0.0)
    # At 11 the failure at 0 has left the window [1, 11]: only 5 and 11 count.
    assert restarts_allowed(strategy, [0.0, 5.0, 11.0]) == [True, True, True]
    # At 12: 5, 11 and 12 are all within [2, 12].
    assert restarts_allowed(strategy, [12.0]) == [False]


def test_failure_rate_window_includes_its_start() -> None:
    strategy = FailureRateRestartStrategy(max_failures=1, interval_s=10.0, delay_s=0.0)
    # Exactly one interval apart: both still count.
    assert restarts_allowed(strategy, [0.0, 10.0]) == [True, False]
    strategy = FailureRateRestartStrategy(max_failures=1, interval_s=10.0, delay_s=0.0)
    assert restarts_allowed(strategy, [0.0, 10.001]) == [True, True]


def test_failure_rate_many_spread_out_failures_keep_restarting() -> None:
    strategy = FailureRateRestartStrategy(max_failures=1, interval_s=1.0, delay_s=0.0)
    assert all(restarts_allowed(strategy, [2.0 * i for i in range(50)]))
    assert "at most 1 failures per 1s" in strategy.describe()


# ------------------------------------------------------------------------------------ exponential


def exponential(
    *,
    initial: float = 1.0,
    maximum: float = 10.0,
    multiplier: float = 2.0,
    reset: float = 100.0,
    jitter: float = 0.0,
    attempts: int = 1000,
    seed: int = 7,
) -> ExponentialDelayRestartStrategy:
    return ExponentialDelayRestartStrategy(
        initial, maximum, multiplier, reset, jitter, attempts, random.Random(seed)
    )


def backoffs(strategy: ExponentialDelayRestartStrategy, timestamps: list[float]) -> list[float]:
    values = []
    for timestamp in timestamps:
        strategy.notify_failure(timestamp)
        values.append(strategy.backoff_s())
    return values


def test_exponential_grows_by_the_multiplier_up_to_the_cap() -> None:
    strategy = exponential(initial=1.0, maximum=10.0, multiplier=2.0)
    assert backoffs(strategy, [float(t) for t in range(7)]) == [1, 2, 4, 8, 10, 10, 10]


def test_exponential_with_multiplier_one_stays_at_the_initial_backoff() -> None:
    strategy = exponential(initial=3.0, maximum=10.0, multiplier=1.0)
    assert backoffs(strategy, [0.0, 1.0, 2.0]) == [3.0, 3.0, 3.0]


@pytest.mark.parametrize("jitter", [0.1, 0.5, 1.0])
def test_exponential_jitter_stays_within_its_bounds_and_the_cap(jitter: float) -> None:
    strategy = exponential(initial=1.0, maximum=10.0, multiplier=2.0, jitter=jitter, seed=42)
    bases = [1, 2, 4, 8, 10, 10, 10, 10, 10, 10]
    values = backoffs(strategy, [float(t) for t in range(len(bases))])
    for base, value in zip(bases, values, strict=True):
        assert base * (1 - jitter) <= value <= min(base * (1 + jitter), 10.0), (base, value)
        assert value >= 0.0
    # The jitter really varies the pause (a seeded RNG, so this is deterministic).
    assert len(set(values[4:])) > 1
    # Same seed, same pauses.
    again = exponential(initial=1.0, maximum=10.0, multiplier=2.0, jitter=jitter, seed=42)
    assert backoffs(again, [float(t) for t in range(len(bases))]) == values


def test_exponential_jitter_spreads_on_both_sides() -> None:
    strategy = exponential(initial=4.0, maximum=100.0, multiplier=1.0, jitter=0.5, seed=1)
    strategy.notify_failure(0.0)
    values = [strategy.backoff_s() for _ in range(200)]
    assert min(values) < 4.0 < max(values)
    assert all(2.0 <= v <= 6.0 for v in values)


def test_exponential_resets_after_a_long_healthy_period() -> None:
    strategy = exponential(initial=1.0, maximum=10.0, multiplier=2.0, reset=100.0)
    assert backoffs(strategy, [0.0, 1.0, 2.0]) == [1.0, 2.0, 4.0]
    # Healthy for less than threshold + current back-off (100 + 4): keeps growing.
    assert backoffs(strategy, [2.0 + 103.9]) == [8.0]
    # Healthy for threshold + current back-off (100 + 8) since the last failure: back to start.
    assert backoffs(strategy, [105.9 + 108.0]) == [1.0]
    assert backoffs(strategy, [214.0]) == [2.0]


def test_exponential_attempts_are_limited_and_counted_since_the_last_reset() -> None:
    strategy = exponential(attempts=2, reset=100.0)
    assert restarts_allowed(strategy, [0.0, 1.0, 2.0]) == [True, True, False]
    # After a long healthy period the count starts over.
    assert restarts_allowed(strategy, [500.0, 501.0, 502.0]) == [True, True, False]


def test_exponential_describe() -> None:
    text = exponential(initial=1.0, maximum=60.0, multiplier=1.5, jitter=0.1).describe()
    assert text == "exponential-delay (1s..60s, x1.5, jitter 0.1)"
