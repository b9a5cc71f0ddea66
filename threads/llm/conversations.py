"""The conversations a model client has sent, kept encoded, so a request encodes only what is new.

Between compactions a session's context only grows: every request of its
next turn repeats the one before and adds a few messages at the end. A
client keeps, per conversation — known by its first message, the very
object — the JSON of the messages it sent last and the object that ended
them. A request whose list still holds those objects at those places
encodes only the messages after them and appends their bytes to what is
kept, in place; one that differs there (a compaction put a summary first, a
tool message was merged, images were fetched for a vision model) is encoded
whole, and kept in turn. What is kept is bounded in bytes; the least
recently used conversation goes first. A conversation is held by its first
message weakly: once its session lets go of that message (the session was
evicted, its context compacted), what was kept for it goes too (decision
perf-44). A reopened session's context is new objects, which no request
could have grown from. A conversation no request grew for :data:`IDLE_SECONDS`
goes as well, at the next request of any conversation (decision perf-47): the
requests of one turn come within it and a quick exchange's next turn too,
while a chat whose person is away keeps only its session's own memory, and
its next request encodes its history again.

What follows a conversation's kept bytes may depend on how they end (a
protocol that merges a role's consecutive messages into one turn appends
to the turn that is open): an :data:`Extender` is given the state the last
one left with the bytes, and hands back its own (:meth:`EncodedConversations.grow`).

A request's array is copied out of what is kept once, framed (``[``, the
messages that lead it, ``]``) in the same copy: the history is not joined
again per request. A long one is not copied at all: the request gets a
:class:`Spliced` body, its frame in two small pieces around a view of the
kept bytes, which the HTTP client writes to the socket as they are. While a
view is out the kept bytes cannot grow in place (Python forbids resizing an
exported buffer), so a request that comes meanwhile grows a copy: what was
sent is never changed under the sender.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from threads.messages import Message

DEFAULT_MAX_BYTES = 64 * 2**20
"""What one client keeps at most; a smaller bound was tried and not taken (decision perf-27)."""
Encoder = Callable[[Sequence[Message]], bytes]
"""Messages' encodings, comma-separated; a message the protocol has no place for adds none."""
Extender = Callable[[Sequence[Message], Any], tuple[bytes, Any]]
"""The bytes that follow a conversation's kept ones for ``messages``, given the state the
kept ones ended in (None for none kept), and the state they end in."""

IDLE_SECONDS = 60.0
"""A conversation no request grew for this long is let go (seconds)."""

# A conversation this long goes out as a view of its kept bytes, not a copy.
SPLICE_AT = 64 * 2**10


@dataclass(frozen=True, slots=True)
class Spliced:
    """A body in three pieces, the middle one a view of a conversation's kept bytes."""

    head: bytes
    kept: memoryview
    tail: bytes

    def __len__(self) -> int:
        return len(self.head) + self.kept.nbytes + len(self.tail)

    def __bytes__(self) -> bytes:
        return b"".join((self.head, self.kept, self.tail))


@dataclass(slots=True)
class _Kept:
    first: weakref.ref[Message]
    last: Message
    count: int
    data: bytearray
    state: Any
    used: float


def _comma_separated(encode: Encoder) -> Extender:
    """An extender of comma-separated encodings; its state: whether any bytes are kept."""

    def extend(messages: Sequence[Message], state: Any) -> tuple[bytes, Any]:
        more = encode(messages)
        if not more:
            return b"", state
        return (b"," + more if state else more), True

    return extend


class EncodedConversations:
    """One client's encoded conversations (event loop only)."""

    def __init__(
        self,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kept: OrderedDict[int, _Kept] = OrderedDict()  # least recently grown first
        self._bytes = 0
        self._max_bytes = max_bytes
        self._idle = idle_seconds
        self._clock = clock
        # Conversations whose first message is gone, as their weak references' callbacks
        # found them: a collection runs them on whichever thread it runs on, so they only
        # note it here, and the event loop lets the bytes go (:meth:`_let_go_of_the_gone`).
        self._gone: list[tuple[int, weakref.ref[Message]]] = []

    def encode(self, messages: Sequence[Message], encode: Encoder) -> bytes:
        """The encodings of ``messages``, comma-separated, as ``encode`` makes them.

        Messages the conversation's previous request ended with are not
        encoded again: ``encode`` is given only the messages after them.
        """
        data, _ = self.grow(messages, _comma_separated(encode))
        return bytes(data)

    def array(
        self,
        lead: bytes,
        messages: Sequence[Message],
        encode: Encoder,
        *,
        before: bytes = b"",
        after: bytes = b"",
    ) -> bytes | Spliced:
        """The JSON array ``[lead, …messages' encodings]``, in one copy of the kept bytes.

        ``lead`` is an encoded element put first (a system message), or b"" for
        none; ``before`` and ``after`` are joined around the array in the same
        copy (the rest of a request body). From :data:`SPLICE_AT` kept bytes
        on, the array is not copied: it comes back :class:`Spliced`.
        """
        data, _ = self.grow(messages, _comma_separated(encode))
        if not data:
            return b"".join((before, b"[", lead, b"]", after))
        head = b"".join((before, b"[", lead, b",")) if lead else before + b"["
        if len(data) < SPLICE_AT:
            return b"".join((head, data, b"]", after))
        return Spliced(head, memoryview(data), b"]" + after)

    def grow(
        self, messages: Sequence[Message], extend: Extender, *, count: int | None = None
    ) -> tuple[bytearray, Any]:
        """What is kept for ``messages``' conversation (their first ``count``, or all),
        grown by ``extend`` to hold them, and the state it ends in (see :data:`Extender`);
        empty, and None, for none.

        Do not change the bytes: they are what the next request of the conversation
        grows from.
        """
        end = len(messages) if count is None else count
        if not end:
            return bytearray(), None
        if self._gone:
            self._let_go_of_the_gone()
        first = messages[0]
        key = id(first)
        kept = self._kept.pop(key, None)
        start, state = 0, None
        held: weakref.ref[Message] | None = None
        if kept is not None:
            self._bytes -= len(kept.data)
            if kept.first() is first:
                held = kept.first
            if held is not None and kept.count <= end and messages[kept.count - 1] is kept.last:
                start, state = kept.count, kept.state
            else:
                kept = None
        data = kept.data if kept is not None else bytearray()
        more, state = extend(
            messages[start:end] if start or end < len(messages) else messages, state
        )
        if more:
            try:
                data += more
            except BufferError:  # a request still sends a view of them: grow a copy
                data = bytearray(data)
                data += more
        if held is None:
            held = weakref.ref(first, partial(self._let_go, key))
        now = self._clock()
        self._kept[key] = _Kept(held, messages[end - 1], end, data, state, now)
        self._bytes += len(data)
        # Out go the least recently grown, while past the bound in bytes or idle too long.
        kept_all = self._kept
        idle_since = now - self._idle
        while len(kept_all) > 1:
            oldest = next(iter(kept_all.values()))
            if self._bytes <= self._max_bytes and oldest.used > idle_since:
                break
            kept_all.popitem(last=False)
            self._bytes -= len(oldest.data)
        return data, state

    def _let_go(self, key: int, first: weakref.ref[Message]) -> None:
        """A weak reference's callback: the conversation's first message is gone, and with
        it any request that could grow from what is kept. Any thread: it only takes note."""
        self._gone.append((key, first))

    def _let_go_of_the_gone(self) -> None:
        gone = self._gone
        while gone:
            key, first = gone.pop()
            kept = self._kept.get(key)
            if kept is not None and kept.first is first:  # not a newer one under a reused id
                del self._kept[key]
                self._bytes -= len(kept.data)

    @property
    def kept_bytes(self) -> int:
        """The bytes held for every kept conversation."""
        if self._gone:
            self._let_go_of_the_gone()
        return self._bytes
