"""The port a `local` replica listens on.

Each `local` node has its own loopback address, and a connection from this machine to a node
address takes its local port from the kernel's ephemeral range *on that address*: the
daemon's kept channel to the node's agent, the load balancer's and the prober's connections
to its replicas. A port picked by binding port 0 is from that same range, so between the
pick and the replica's own bind (a launch later) such a connection could take it, and the
replica fail with EADDRINUSE. So the port is picked below the ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range), where the kernel never autobinds, and checked
free on every address (a wildcard bind) at the time.
"""

from __future__ import annotations

import random
import socket

#: how far below the ephemeral range ports are picked from
SPAN = 16384
FIRST = 1024  # never a privileged port


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    try:
        with open(path) as f:
            lo, hi = (int(x) for x in f.read().split()[:2])
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))  # noqa: S104 - a probe: free on every address
        except OSError:
            return False
    return True


def local_replica_port(rng: random.Random | None = None,
                       ephemeral: tuple[int, int] | None = None) -> int:
    """A port free on every address now, outside the ephemeral range (default: this
    machine's) when there is room below it (else any free port, as binding port 0 gives)."""
    rng = rng or random.Random()
    lo, _ = ephemeral or ephemeral_range()
    first = max(FIRST, lo - SPAN)
    if lo - first >= 256:
        for _ in range(64):
            port = rng.randrange(first, lo)
            if _free(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
