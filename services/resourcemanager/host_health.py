"""Which hosts of the ``systemd`` worker driver answered lately: a host whose ssh call did not
connect (or whose listing failed) is skipped by placement for a back-off that doubles with each
failure in a row, from the check interval up to a cap, so that one dead host does not take every
new start while the others have room. Any answer clears it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

BACKOFF_CAP_S = 60.0


@dataclass(slots=True)
class _Failing:
    failures: int
    until: float  # clock time before which placement skips the host


class HostHealth:
    def __init__(
        self,
        base_backoff_s: float,
        cap_s: float = BACKOFF_CAP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cap_s = cap_s
        self._base_s = min(max(base_backoff_s, 0.001), cap_s)  # a long check interval: the cap
        self._clock = clock
        self._failing: dict[str, _Failing] = {}

    def failed(self, host: str) -> None:
        """``host`` did not connect or could not be listed: skip it for a longer back-off."""
        previous = self._failing.get(host)
        failures = 1 if previous is None else previous.failures + 1
        # 2**failures grows fast: cap the exponent before the float could overflow.
        backoff_s = min(self._cap_s, self._base_s * 2 ** min(failures - 1, 32))
        self._failing[host] = _Failing(failures, self._clock() + backoff_s)

    def answered(self, host: str) -> None:
        self._failing.pop(host, None)

    def usable(self, host: str) -> bool:
        """False while ``host`` is in its back-off after a failure."""
        failing = self._failing.get(host)
        return failing is None or self._clock() >= failing.until

    def backing_off(self) -> list[str]:
        """The hosts placement skips now (diagnostics)."""
        return sorted(host for host in self._failing if not self.usable(host))


__all__ = ["BACKOFF_CAP_S", "HostHealth"]
