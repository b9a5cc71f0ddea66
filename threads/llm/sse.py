"""An incremental decoder of server-sent events, as both providers stream them.

Bytes go in as the network delivers them, cut anywhere; whole events come out.
Only what the providers use is kept: the ``event`` name and the ``data``
lines (joined with newlines, per the SSE spec). Comments (``: ping``), ``id``
and ``retry`` fields are skipped. Lines end in ``\\n`` or ``\\r\\n``.
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

    __slots__ = ("_data", "_event", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._event = ""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk``, in order."""
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        self._tail = lines.pop()
        events: list[SSEEvent] = []
        for line in lines:
            self._line(line, events)
        return events

    def close(self) -> list[SSEEvent]:
        """The events left when the stream ends, even without a final blank line."""
        events: list[SSEEvent] = []
        if self._tail:
            self._line(self._tail, events)
            self._tail = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            if self._data:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                events.append(SSEEvent(self._event or "message", data))
                self._data = []
            self._event = ""
            return
        if line[0] == 0x3A:  # ":" starts a comment
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
