"""No ``asyncio.wait_for`` in sparkmill's own code.

On Python 3.11 ``wait_for`` returns the result of an awaitable that completes in the same loop
iteration as a cancellation of the waiting task, and the cancellation is lost. A cancelled
heartbeat sender or scheduler task then runs on, and whoever awaits it (``HeartbeatManager.stop``,
a JobMaster suspending) waits forever: a JobMaster deposed by its ZooKeeper session never handed
its job back. ``asyncio.timeout`` does not have that flaw.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("common", "services", "sparkmill")


def test_no_module_uses_asyncio_wait_for() -> None:
    offenders = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.is_symlink() or "v1" in path.relative_to(ROOT).parts:
                continue
            text = path.read_text()
            for number, line in enumerate(text.splitlines(), 1):
                if re.search(r"\bwait_for\(", line) and "asyncio" in text:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "use asyncio.timeout instead of wait_for:\n" + "\n".join(offenders)


def test_asyncio_timeout_keeps_a_cancellation_that_races_a_result() -> None:
    # The property the rule above relies on: a result and a cancellation in the same
    # iteration still cancel the task.
    async def scenario() -> bool:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def waiter() -> int:
            async with asyncio.timeout(10):
                return await future

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # the waiter now awaits the future
        future.set_result(1)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(scenario()), "the cancellation was swallowed"
