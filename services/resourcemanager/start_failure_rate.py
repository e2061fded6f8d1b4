"""How often the resource manager's workers failed to start (Flink's ``ThresholdMeter`` as
``ActiveResourceManager`` uses it for ``resourcemanager.start-worker.max-failure-rate``).

A task executor that cannot start (a broken configuration, a full disk, a missing Java) fails
again at every attempt. The per-failure cool-down (``resourcemanager.start-worker.retry-interval``)
spaces the attempts out but would still start one every few seconds forever: once the failures
of the last minute reach the maximum rate, no worker is started until enough of them are older
than a minute for the rate to be below it again. Flink only lengthens its cool-down at that
point; stopping until the rate is back under the bound is what keeps a broken installation to
at most ``max-failure-rate`` starts a minute.

Pure state on the resource manager's loop: the caller passes the time (its timer service's).
"""

from __future__ import annotations

import math
from collections import deque

WINDOW_S = 60.0
"""The rate is failures per minute."""


class StartFailureRate:
    def __init__(self, max_per_minute: float) -> None:
        if max_per_minute <= 0:
            raise ValueError(
                f"the maximum start failure rate must be positive, not {max_per_minute}"
            )
        self.max_per_minute = max_per_minute
        self._times: deque[float] = deque()

    def record(self, now: float) -> None:
        self._times.append(now)

    def recent(self, now: float) -> int:
        """Failures within the last minute."""
        while self._times and self._times[0] <= now - WINDOW_S:
            self._times.popleft()
        return len(self._times)

    def paused_until(self, now: float) -> float | None:
        """When starting workers may go on, or None while the rate is below the maximum."""
        recent = self.recent(now)
        if recent < self.max_per_minute:
            return None
        # The rate falls below the maximum once this many of the oldest failures aged out.
        aged_out = recent - math.ceil(self.max_per_minute) + 1
        return self._times[aged_out - 1] + WINDOW_S


__all__ = ["WINDOW_S", "StartFailureRate"]
