"""Whose clock a lease script reads: a test's, or the Redis server's.

Apart from :mod:`threads.cluster.leases` so that the gateway can name the
default without importing the Redis client (it is imported only where a
cluster is configured).
"""

from __future__ import annotations

from collections.abc import Callable

LeaseClock = Callable[[], int | None]
"""Milliseconds for lease scripts to take as now; None: the Redis server's ``TIME``."""


def server_time() -> int | None:
    """The default :data:`LeaseClock`: every script reads the server's clock."""
    return None
