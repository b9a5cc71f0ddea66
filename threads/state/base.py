"""The state store port: small JSON values the gateway keeps besides sessions.

Pairing requests and paired users live here today; the outbound ledger and
send-policy overrides will. A value sits under a *namespace* (``pairing.paired``)
and a *key* (``telegram:12345``); it is any JSON value, optionally with an
absolute expiry after which it reads as absent and is removed by the store
(Redis on its own, the other backends at :meth:`StateStore.sweep`).

Every backend keeps these promises, checked by one conformance suite
(``tests/threads/state``):

- ``put`` replaces the whole value and its expiry (none: it never expires);
  once it returns, every ``get`` and ``scan`` of any store value opened on the
  same URL sees it.
- ``get`` of an absent or expired key is ``None``; ``delete`` says whether a
  live value was there.
- ``scan`` lists a namespace's live values whose key starts with a prefix,
  ordered by key.
- Values come back as plain JSON (dicts, lists, strings, numbers, booleans,
  ``None``) and never alias what was put.
- A namespace is lower-case letters, digits, ``.``, ``_`` and ``-``
  (starting with a letter); a key is 1..512 characters without NUL. Anything
  else is :class:`~threads.state.errors.InvalidStateKeyError` and writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeAlias, runtime_checkable

import orjson

from threads.state.errors import InvalidStateKeyError

Json: TypeAlias = dict[str, "Json"] | list["Json"] | str | int | float | bool | None
Clock = Callable[[], datetime]

MAX_KEY = 512
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAMESPACE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


def utc_now() -> datetime:
    return datetime.now(UTC)


@runtime_checkable
class StateStore(Protocol):
    """Namespaced JSON values with optional expiry; see the module docstring."""

    async def get(self, namespace: str, key: str) -> Json:
        """The live value at ``namespace``/``key``, or None."""
        ...

    async def put(
        self, namespace: str, key: str, value: Json, *, expires: datetime | None = None
    ) -> None:
        """Store ``value`` (replacing any), expiring at ``expires`` (timezone-aware) if given."""
        ...

    async def delete(self, namespace: str, key: str) -> bool:
        """Remove the value; True when a live one was there."""
        ...

    async def scan(self, namespace: str, prefix: str = "") -> list[tuple[str, Json]]:
        """Every live ``(key, value)`` of the namespace whose key starts with ``prefix``, by key."""
        ...

    async def sweep(self) -> int:
        """Remove expired values now; how many went (Redis expires on its own: often 0)."""
        ...

    async def close(self) -> None:
        """Release connections; the store value is unusable afterwards."""
        ...


def check_namespace(namespace: str) -> str:
    if not _NAMESPACE.match(namespace):
        raise InvalidStateKeyError(
            f"state namespace {namespace!r} must be lower-case letters, digits, '.', '_' or '-' "
            "starting with a letter (at most 64)"
        )
    return namespace


def check_key(namespace: str, key: str) -> str:
    check_namespace(namespace)
    if not key or len(key) > MAX_KEY or "\x00" in key:
        raise InvalidStateKeyError(
            f"state key {key[:40]!r} in {namespace}: a key is 1..{MAX_KEY} characters without NUL"
        )
    return key


def check_expiry(expires: datetime | None) -> datetime | None:
    if expires is not None and expires.tzinfo is None:
        raise InvalidStateKeyError(
            f"expiry {expires.isoformat()} has no time zone: pass an aware datetime (UTC)"
        )
    return expires


def encode(namespace: str, key: str, value: Json) -> bytes:
    """``value`` as JSON bytes; a value JSON cannot hold is refused, naming the key."""
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise InvalidStateKeyError(f"value of {namespace}/{key} is not JSON: {exc}") from None


def decode(data: bytes | str) -> Json:
    value: Json = orjson.loads(data)
    return value


def micros(moment: datetime) -> int:
    """Microseconds since the epoch: how SQLite rows and Redis expiries hold a time."""
    return (moment - EPOCH) // timedelta(microseconds=1)
