"""The in-process state store (``memory://``): tests, and gateways that keep no state.

Values are held as encoded JSON, so what comes back never aliases what was put
and a value JSON cannot hold is refused exactly as the other backends refuse it.
Expiry is judged by the store's clock (injectable, for tests).
"""

from __future__ import annotations

from datetime import datetime

from threads.state.base import (
    Clock,
    Json,
    check_expiry,
    check_key,
    check_namespace,
    decode,
    encode,
    utc_now,
)


class MemoryStateStore:
    """A :class:`~threads.state.base.StateStore` in a dict; nothing survives the process."""

    url = "memory://"

    def __init__(self, *, clock: Clock = utc_now) -> None:
        self._clock = clock
        self._spaces: dict[str, dict[str, tuple[bytes, datetime | None]]] = {}

    def _live(self, expires: datetime | None) -> bool:
        return expires is None or expires > self._clock()

    async def get(self, namespace: str, key: str) -> Json:
        check_key(namespace, key)
        found = self._spaces.get(namespace, {}).get(key)
        if found is None or not self._live(found[1]):
            return None
        return decode(found[0])

    async def put(
        self, namespace: str, key: str, value: Json, *, expires: datetime | None = None
    ) -> None:
        check_key(namespace, key)
        data = encode(namespace, key, value)
        self._spaces.setdefault(namespace, {})[key] = (data, check_expiry(expires))

    async def delete(self, namespace: str, key: str) -> bool:
        check_key(namespace, key)
        found = self._spaces.get(namespace, {}).pop(key, None)
        return found is not None and self._live(found[1])

    async def scan(self, namespace: str, prefix: str = "") -> list[tuple[str, Json]]:
        check_namespace(namespace)
        space = self._spaces.get(namespace, {})
        return [
            (key, decode(data))
            for key, (data, expires) in sorted(space.items())
            if key.startswith(prefix) and self._live(expires)
        ]

    async def sweep(self) -> int:
        gone = 0
        for space in self._spaces.values():
            for key in [k for k, (_, expires) in space.items() if not self._live(expires)]:
                del space[key]
                gone += 1
        return gone

    async def close(self) -> None:
        self._spaces.clear()
