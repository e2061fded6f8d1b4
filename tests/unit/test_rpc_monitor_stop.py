"""Closing an RPC client whose connection monitor has stopped reading, after the peer went away.

libzmq's I/O thread sends each monitor event to the monitor's PAIR socket with a blocking send,
holding the lock that stopping the monitor takes. A client that closed its reader first and
then saw its peer disconnect (every service of a cluster stopping at once) blocked that thread
for ever, and ``disable_monitor`` with it while holding the GIL: the whole process hung until
it was killed. The body runs in a child process, so a hang fails this test instead of hanging it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

BODY = textwrap.dedent(
    """
    import asyncio

    import zmq
    import zmq.asyncio

    from sparkmill.common.rpc.client import RpcClient


    async def main() -> None:
        ctx = zmq.asyncio.Context()
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        rpc = RpcClient(f"tcp://127.0.0.1:{port}", caller="unit-test", context=ctx)
        connected = asyncio.Event()
        rpc.watch_connection(lambda up: connected.set() if up else None)
        await asyncio.wait_for(connected.wait(), 10)
        # The monitor's reader ends on its own (as when a service's loop cancels its tasks)...
        monitor = rpc._monitor
        assert monitor is not None
        monitor.cancel()
        await asyncio.gather(monitor, return_exceptions=True)
        await asyncio.sleep(0.3)  # its pipe's end is gone before the event comes
        # ... then the peer goes away: a disconnection event for the monitor ...
        router.close(linger=0)
        await asyncio.sleep(0.5)
        # ... and the client closes.
        await rpc.close()
        ctx.destroy(linger=0)
        print("closed", flush=True)


    asyncio.run(main())
    """
)


def test_a_client_closes_after_its_monitor_stopped_and_its_peer_went_away() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", BODY],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("the client's close hung (killed after 20 s)") from None
    assert done.returncode == 0 and "closed" in done.stdout, done.stdout + done.stderr
