"""An incremental decoder of server-sent events, as both providers stream them.

Bytes go in as the network delivers them, cut anywhere; whole events come out.
Only what the providers use is kept: the ``event`` name and the ``data``
lines (joined with newlines, per the SSE spec). Comments (``: ping``), ``id``
and ``retry`` fields are skipped. Lines end in ``\\n`` or ``\\r\\n``.

The decoder works an event (a block of lines ending in a blank line) at a
time, with a fast path for the usual one-line ``data:`` event: streams carry
many small events and this runs for every one of them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One event: its name (``message`` when unnamed) and its data as raw bytes."""

    event: str
    data: bytes


class SSEDecoder:
    """Turns a byte stream into :class:`SSEEvent` values; one decoder per response."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk``, in order."""
        buffer = self._tail + chunk if self._tail else chunk
        if b"\r" in buffer:
            # A "\r" at the very end may be half of a "\r\n": the tail keeps it.
            buffer = buffer.replace(b"\r\n", b"\n")
        blocks = buffer.split(b"\n\n")
        self._tail = blocks.pop()
        events: list[SSEEvent] = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                events.append(SSEEvent("message", block[6:]))
            elif block:
                _parse_block(block, events)
        return events

    def close(self) -> list[SSEEvent]:
        """The events left when the stream ends, even without a final blank line."""
        tail, self._tail = self._tail.replace(b"\r\n", b"\n").rstrip(b"\n"), b""
        events: list[SSEEvent] = []
        if tail:
            _parse_block(tail, events)
        return events


def _parse_block(block: bytes, events: list[SSEEvent]) -> None:
    name = ""
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line[0] == 0x3A:  # ":" starts a comment
            continue
        field, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    if data:
        events.append(SSEEvent(name or "message", data[0] if len(data) == 1 else b"\n".join(data)))
