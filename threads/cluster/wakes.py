"""Wakes on their way to the node that owns their key: one Redis Stream per node.

Node ``n``'s inbox is the stream ``<prefix>wakes:<n>``, read in the consumer
group ``owners`` by consumer ``n``. A sender ``XADD``s a :class:`Forward`;
the wake is accepted from then on (it is in Redis, durable as Redis is).
The owner reads it with ``XREADGROUP``, makes it durable in the key's
session, and only then acknowledges and deletes it (``XACK``, ``XDEL``): an
entry read but not acknowledged stays in the group's pending list, so a
node that dies mid-way leaves it to be read again — by itself when it
restarts (its pending entries first), or by a survivor, which takes the dead
node's pending entries with ``XAUTOCLAIM`` and its unread ones with
``XREADGROUP``. An entry read a second time is marked *redelivered*, and the
session is checked for it before it is accepted again, so it runs once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import orjson

from threads.messages import JSON, FilePart, part_from_wire, part_to_wire
from threads.sinks import SinkResolver
from threads.wake import Wake, wake_from_wire, wake_to_wire

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger(__name__)

GROUP = "owners"
MARKER = "forward"
"""The wake meta key naming the stream entry a forwarded wake came in (for the redelivery check)."""

Kind = Literal["wake", "continue", "op"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    """One stream entry: a wake for ``key`` (``kind="wake"``), a key to continue, or an op.

    ``continue`` hands over a key whose input is accepted but not yet run (a
    node that drains or stops): the receiver takes the key's lease and runs
    it. ``op`` asks the key's owner to do something to its thread (``/stop``,
    ``/new``) and answer on the origin's relay stream: ``{"op", "args", "call"}``.
    ``origin`` is the node that sent it; ``redelivered`` says the entry was
    read before (the receiver checks the session before accepting it).
    """

    kind: Kind
    key: str
    origin: str
    wake: Mapping[str, Any] | None = None
    op: Mapping[str, Any] | None = None
    redelivered: bool = False

    def fields(self) -> dict[str, bytes | str]:
        out: dict[str, bytes | str] = {"kind": self.kind, "key": self.key, "origin": self.origin}
        if self.wake is not None:
            out["wake"] = orjson.dumps(self.wake)
        if self.op is not None:
            out["op"] = orjson.dumps(self.op)
        if self.redelivered:
            out["redelivered"] = "1"
        return out

    @classmethod
    def parse(cls, fields: Mapping[Any, Any]) -> Forward:
        got = {_text(k): v for k, v in fields.items()}
        kind = _text(got.get("kind", b"wake"))
        if kind not in _KINDS:
            raise ValueError(f"a forwarded entry of unknown kind {kind!r}")
        return cls(
            kind=_KINDS[kind],
            key=_text(got["key"]),
            origin=_text(got.get("origin", b"")),
            wake=orjson.loads(got["wake"]) if "wake" in got else None,
            op=orjson.loads(got["op"]) if "op" in got else None,
            redelivered=_text(got.get("redelivered", b"")) == "1",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """A forwarded entry as read: the stream it is in, its id, and what it carries."""

    stream: str
    id: str
    forward: Forward

    @property
    def marker(self) -> str:
        """The entry's name in the wake it carries (``<stream>/<id>``), to find it again."""
        return f"{self.stream}/{self.id}"


def wake_wire(wake: Wake) -> dict[str, Any]:
    """A wake whole on the wire: its routing, its body and its files."""
    out = wake_to_wire(wake)
    out["body"] = wake.body
    if wake.files:
        out["files"] = [part_to_wire(f) for f in wake.files]
    return out


def wake_of(wire: Mapping[str, Any], resolve_sink: SinkResolver, marker: str) -> Wake:
    """The wake an entry carries, its meta naming the entry it was first read in (``forward``)."""
    files: list[FilePart] = []
    for part in wire.get("files", []):
        decoded = part_from_wire(part, "a forwarded wake's file")
        if isinstance(decoded, FilePart):
            files.append(decoded)
    meta: dict[str, JSON] = dict(wire.get("meta", {}))
    meta.setdefault(MARKER, marker)  # a wake sent on after its key keeps its first name
    routed = {**wire, "meta": meta}
    wake = wake_from_wire(routed, str(wire.get("body", "")), resolve_sink)
    return dataclasses.replace(wake, files=tuple(files)) if files else wake


class WakeStreams:
    """Every node's inbox stream, as one node reads its own and writes to the others'."""

    def __init__(self, redis: aioredis.Redis, prefix: str, node: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.node = node
        self._groups: set[str] = set()

    def stream(self, node: str) -> str:
        return f"{self.prefix}wakes:{node}"

    async def send(self, node: str, forward: Forward) -> str:
        """Put ``forward`` in ``node``'s inbox; the entry id once Redis holds it."""
        entry = await self.redis.xadd(self.stream(node), forward.fields())  # type: ignore[arg-type]
        return _text(entry)

    async def join(self, node: str) -> None:
        """Make sure ``node``'s inbox and its group exist (every entry in it still unread)."""
        from redis.exceptions import ResponseError  # the client is loaded by now (self.redis)

        stream = self.stream(node)
        if stream in self._groups:
            return
        try:
            await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add(stream)

    async def read(self, *, block_ms: int | None, count: int = 64) -> list[Entry]:
        """New entries of this node's inbox, waiting up to ``block_ms`` for one (None: no wait)."""
        return await self._read(self.node, ">", block_ms=block_ms, count=count)

    async def pending(self, count: int = 64) -> list[Entry]:
        """Entries of this node's inbox it read before and never acknowledged (a crash)."""
        return await self._read(self.node, "0", block_ms=None, count=count, redelivered=True)

    async def take_over(self, dead: str, idle_ms: int, count: int = 64) -> list[Entry]:
        """Entries of a dead node's inbox: its pending ones (``XAUTOCLAIM``), then its unread.

        This node reads them in the dead node's group as itself, so each goes
        to one survivor, and acknowledges them once they are routed. Only
        entries idle ``idle_ms`` are claimed: what another survivor is taking
        right now stays with it (and one claimed twice is checked before it runs).
        """
        await self.join(dead)
        stream = self.stream(dead)
        answer: list[Any] = await self.redis.xautoclaim(
            stream, GROUP, self.node, min_idle_time=idle_ms, start_id="0-0", count=count
        )
        out = await self._entries(stream, answer[1], redelivered=True)
        return out + await self._read(dead, ">", block_ms=None, count=count)

    async def done(self, entry: Entry) -> None:
        """The entry is durable where it belongs: acknowledge and delete it."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xack(entry.stream, GROUP, entry.id)
            pipe.xdel(entry.stream, entry.id)
            await pipe.execute()

    async def backlog(self, node: str) -> int:
        """How many entries ``node``'s inbox holds (read or not, not yet acknowledged)."""
        return int(await self.redis.xlen(self.stream(node)))

    async def _read(
        self,
        node: str,
        start: str,
        *,
        block_ms: int | None,
        count: int,
        redelivered: bool = False,
    ) -> list[Entry]:
        await self.join(node)
        stream = self.stream(node)
        found: Any = await self.redis.xreadgroup(
            GROUP, self.node, {stream: start}, count=count, block=block_ms
        )
        out: list[Entry] = []
        for _name, entries in found or []:
            out += await self._entries(stream, entries, redelivered=redelivered)
        return out

    async def _entries(self, stream: str, raw: list[Any], *, redelivered: bool) -> list[Entry]:
        """The readable entries of ``raw``; one that cannot be read is logged and deleted."""
        out: list[Entry] = []
        for eid, fields in raw:
            if not fields:
                continue  # deleted after it was read: nothing left to route
            try:
                forward = Forward.parse(fields)
            except (ValueError, KeyError, orjson.JSONDecodeError) as exc:
                log.error("stream %s: entry %s cannot be read (%s); deleted", stream, eid, exc)
                await self.done(Entry(stream=stream, id=_text(eid), forward=_UNREADABLE))
                continue
            if redelivered:
                forward = dataclasses.replace(forward, redelivered=True)
            out.append(Entry(stream=stream, id=_text(eid), forward=forward))
        return out


_UNREADABLE = Forward(kind="wake", key="", origin="")
_KINDS: dict[str, Kind] = {"wake": "wake", "continue": "continue", "op": "op"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
