"""A session's context as a list whose older messages are packed: a block's texts in one buffer.

A live session keeps its context for its next turn: on a session of 1 000
turns, 2 000 messages, nearly all of one text part. As objects, each is a
:class:`~threads.messages.Message` (48 bytes) and its text (a 49-byte string
header before the characters): some 200 KB of headers a session, and 4 000
objects the garbage collector walks. A :class:`MessageList` keeps its recent
messages as those objects and packs the older ones, :data:`BLOCK` at a time,
into a :class:`_Block`: their texts' UTF-8 back to back in one ``bytes``, an
end offset and a role for each (decision perf-42).

What stays an object:
- the last :data:`KEEP` to :data:`KEEP` + :data:`BLOCK` messages: what a run
  appends to and reads back, and what a model client's kept conversation
  knows by identity, the last message it sent
  (:mod:`threads.llm.conversations`);
- the first message, by which that conversation is known;
- a message that is not one text part (tool calls, results, files,
  reasoning): it sits in its block as it is.

A packed message is made again each time it is read: equal to the one
packed, not the same object. Blocks never change once made, so a copy of the
list shares them (:meth:`MessageList.copy`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from threads.messages import Message, Role, text_message

BLOCK = 64
"""Messages packed together."""
KEEP = 64
"""Recent messages always kept as objects."""

_ROLES: tuple[Role, ...] = ("user", "assistant", "tool")
_CODES = {role: code for code, role in enumerate(_ROLES)}
_OBJECT = 255
"""A block's role code for a message kept as its object."""


class _Block:
    """:data:`BLOCK` messages: the text ones as UTF-8 in ``data``, the others as objects."""

    __slots__ = ("data", "ends", "objects", "roles")

    def __init__(self, messages: Sequence[Message], *, first: bool) -> None:
        texts: list[bytes] = []
        ends = array("I")
        roles = bytearray()
        objects: dict[int, Message] = {}
        end = 0
        for index, message in enumerate(messages):
            text = message.sole_text()
            if text is None or (first and index == 0):
                objects[index] = message
                roles.append(_OBJECT)
            else:
                encoded = text.encode()
                texts.append(encoded)
                end += len(encoded)
                roles.append(_CODES[message.role])
            ends.append(end)
        self.data = b"".join(texts)
        self.ends = ends
        self.roles = bytes(roles)
        self.objects = objects or None

    def __len__(self) -> int:
        return len(self.roles)

    def message(self, index: int) -> Message:
        code = self.roles[index]
        if code == _OBJECT:
            assert self.objects is not None
            return self.objects[index]
        ends = self.ends
        start = ends[index - 1] if index else 0
        return text_message(_ROLES[code], self.data[start : ends[index]].decode())

    def __iter__(self) -> Iterator[Message]:
        return map(self.message, range(len(self.roles)))


class MessageList(Sequence[Message]):
    """The messages of a context, appended at the end; only the last may be replaced."""

    __slots__ = ("_blocks", "_packed", "_tail")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._blocks: list[_Block] = []
        self._packed = 0  # messages in the blocks
        self._tail: list[Message] = []
        for message in messages:
            self.append(message)

    def __len__(self) -> int:
        return self._packed + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        packed = self._packed
        if isinstance(index, slice):
            start, stop, step = index.indices(packed + len(self._tail))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            blocks = self._blocks
            out = [blocks[i // BLOCK].message(i % BLOCK) for i in range(start, min(stop, packed))]
            out += self._tail[max(start - packed, 0) : max(stop - packed, 0)]
            return out
        if index < 0:
            index += packed + len(self._tail)
            if index < 0:
                raise IndexError("message list index out of range")
        if index >= packed:
            return self._tail[index - packed]
        return self._blocks[index // BLOCK].message(index % BLOCK)

    def __iter__(self) -> Iterator[Message]:
        for block in self._blocks:
            yield from block
        yield from self._tail

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageList | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageList({list(self)!r})"

    def append(self, message: Message) -> None:
        tail = self._tail
        tail.append(message)
        if len(tail) >= KEEP + BLOCK:
            self._blocks.append(_Block(tail[:BLOCK], first=not self._packed))
            del tail[:BLOCK]
            self._packed += BLOCK

    def replace_last(self, message: Message) -> None:
        """Put ``message`` in place of the last one (there is one)."""
        if not self._tail:
            raise IndexError("replace_last on an empty message list")
        self._tail[-1] = message

    def copy(self) -> MessageList:
        """Another list of the same messages, sharing the packed blocks."""
        other = MessageList()
        other._blocks = self._blocks.copy()
        other._packed = self._packed
        other._tail = self._tail.copy()
        return other
