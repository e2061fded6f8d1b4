"""The payload of the ``noop`` test operator (Flink's ``NoOpInvokable``).

Built by tests and benchmarks (``sparkmill.testing``), read by the task executor that runs it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NoOpOptions:
    sleep_s: float = 0.0
    fail_attempts: int = 0


def encode_noop_payload(options: NoOpOptions) -> bytes:
    return json.dumps({"sleep_s": options.sleep_s, "fail_attempts": options.fail_attempts}).encode()


def decode_noop_payload(payload: bytes) -> NoOpOptions:
    if not payload:
        return NoOpOptions()
    raw = json.loads(payload)
    return NoOpOptions(float(raw.get("sleep_s", 0.0)), int(raw.get("fail_attempts", 0)))
