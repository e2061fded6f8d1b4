"""Free TCP ports on loopback, for a service (or a test's server) to bind a moment later.

Picking a port and binding it are two steps, and two things can go wrong in between:

* The kernel gives the port to some process's outgoing connection. Ports the kernel picks for
  ``bind(0)`` lie in its ephemeral range, the same range outgoing connections draw from, so ports
  here come from below it (``_LOWEST_PORT`` up to the range's start).
* The same process hands the port out twice, for example to a dispatcher and a resource manager
  of one local cluster, which then both try to bind it and one fails with "Address already in
  use". :func:`free_ports` keeps every socket it picked bound until it has all of them, so one
  call never returns a port twice, and the process remembers the ports it handed out recently
  so a later call does not return them either.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
from collections import deque

_LOWEST_PORT = 20000
# Ports handed out recently by this process: enough to cover every cluster a test session has
# running at once, small enough to never exhaust the range.
_RECENT_LIMIT = 2048
_recent: deque[int] = deque(maxlen=_RECENT_LIMIT)
_recent_lock = threading.Lock()


def ephemeral_start() -> int:
    """The first port the kernel hands out to outgoing connections (Linux: 32768)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as ranges:
            return int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free now on ``host``, none handed out recently by this process."""
    if count < 0:
        raise ValueError(f"count must not be negative, got {count}")
    top = ephemeral_start()
    rng = random.SystemRandom()
    found: list[int] = []
    with contextlib.ExitStack() as held, _recent_lock:
        for _ in range(200 + 20 * count):
            if len(found) == count:
                break
            # A kernel whose ephemeral range starts low leaves no room below it: take its pick.
            port = rng.randrange(_LOWEST_PORT, top) if top > _LOWEST_PORT + 100 else 0
            if port and (port in _recent or port in found):
                continue
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind((host, port))
            except OSError:
                continue
            picked: int = sock.getsockname()[1]
            if picked in found:
                continue
            found.append(picked)
        if len(found) < count:
            raise OSError(f"no {count} free ports on {host} between {_LOWEST_PORT} and {top}")
        _recent.extend(found)
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """One port free now on ``host`` (see :func:`free_ports`)."""
    return free_ports(1, host)[0]


__all__ = ["ephemeral_start", "free_port", "free_ports"]
