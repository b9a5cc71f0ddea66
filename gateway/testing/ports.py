"""A loopback port for a server a test starts later (a gateway, a node, a Redis)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

LENT = Path("/proc/sys/net/ipv4/ip_local_port_range")
FLOOR = 10_000


def free_port() -> int:
    """A port nothing listens on now, below the range the kernel lends to outgoing connections.

    A port picked by binding port 0 comes from that range, and between the pick
    and the server's own bind any outgoing connection on the machine may take it
    (a node restarted on its port while other suites run: "address already in
    use"). Below the range, only another listener can.
    """
    try:
        low = int(LENT.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(FLOOR, low) if low > FLOOR else 0
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(probe.getsockname()[1])
    raise RuntimeError(f"no free loopback port between {FLOOR} and {low}")
