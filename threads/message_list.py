"""A session's context as a list whose older messages are packed: a block's texts compressed.

A live session keeps its context for its next turn: on a session of 1 000
turns, 2 000 messages, nearly all of one text part. As objects, each is a
:class:`~threads.messages.Message` (56 bytes) and its text (a 49-byte string
header before the characters): some 200 KB of headers a session, and 4 000
objects the garbage collector walks. A :class:`MessageList` keeps its recent
messages as those objects and packs the older ones, :data:`BLOCK` at a time,
into a :class:`_Block`: their texts' UTF-8 back to back, compressed with
zlib into one ``bytes``, and an end offset and a role for each (decisions
perf-42, perf-43). Every user message of a gateway starts with its wake's
header (:func:`~threads.wake.render_header`), some 200 bytes that differ
from the last one's in the time alone: compressed together, a block's
prompts take a fraction of their text.

What stays an object:
- the last :data:`KEEP` to :data:`KEEP` + :data:`BLOCK` messages: what a run
  appends to and reads back, and what a model client's kept conversation
  knows by identity, the last message it sent
  (:mod:`threads.llm.conversations`);
- the first message, by which that conversation is known;
- a message that is not one text part (tool calls, results, files,
  reasoning): it sits in its block as it is.

A packed message is made again each time it is read: equal to the one
packed, not the same object. Reads in a row from one block decompress it
once; the list lets go of it at its next append, so a live session between
turns holds none. Blocks never change once made, so a copy of the
list shares them (:meth:`MessageList.copy`).
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from threads.messages import Message, Role, kept_message

BLOCK = 64
"""Messages packed together."""
KEEP = 16
"""Recent messages always kept as objects."""

LEVEL = 1
"""zlib's level for a block's texts: the one that packs fastest; higher ones gained nothing
on a gateway's messages (decision perf-43)."""

_ROLES: tuple[Role, ...] = ("user", "assistant", "tool")
_CODES = {role: code for code, role in enumerate(_ROLES)}
_OBJECT = 255
"""A block's role code for a message kept as its object."""


class _Block:
    """:data:`BLOCK` messages: the text ones as UTF-8, compressed together; the others as objects."""

    __slots__ = ("ends", "objects", "roles", "text")

    def __init__(self, messages: Sequence[Message], *, first: bool) -> None:
        texts: list[bytes] = []
        ends: list[int] = []
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
        self.text = zlib.compress(b"".join(texts), LEVEL)
        self.ends = array("H" if end <= 0xFFFF else "I", ends)
        self.roles = bytes(roles)
        self.objects = objects or None

    def texts(self) -> bytes:
        """The block's texts, back to back (what :meth:`message` reads them from)."""
        return zlib.decompress(self.text)

    def message(self, index: int, texts: bytes) -> Message:
        code = self.roles[index]
        if code == _OBJECT:
            assert self.objects is not None
            return self.objects[index]
        ends = self.ends
        start = ends[index - 1] if index else 0
        return kept_message(_ROLES[code], texts[start : ends[index]].decode())

    def messages(self) -> list[Message]:
        texts = self.texts() if self.ends[-1] else b""
        return [self.message(index, texts) for index in range(len(self.roles))]


class MessageList(Sequence[Message]):
    """The messages of a context, appended at the end; only the last may be replaced."""

    __slots__ = ("_blocks", "_opened", "_tail")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._blocks: list[_Block] = []  # each of BLOCK messages
        self._tail: list[Message] = []
        # The block read last and its texts, while reads go on: the next append lets go.
        self._opened: tuple[_Block, bytes] | None = None
        for message in messages:
            self.append(message)

    def __len__(self) -> int:
        return self._packed + len(self._tail)

    @property
    def _packed(self) -> int:
        """How many messages the blocks hold."""
        return len(self._blocks) * BLOCK

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
            out = [self._read(i) for i in range(start, min(stop, packed))]
            out += self._tail[max(start - packed, 0) : max(stop - packed, 0)]
            return out
        if index < 0:
            index += packed + len(self._tail)
            if index < 0:
                raise IndexError("message list index out of range")
        if index >= packed:
            return self._tail[index - packed]
        return self._read(index)

    def _read(self, index: int) -> Message:
        """A packed message; its block's texts are decompressed once for reads in a row."""
        block = self._blocks[index // BLOCK]
        index %= BLOCK
        if block.roles[index] == _OBJECT:
            assert block.objects is not None
            return block.objects[index]
        opened = self._opened
        if opened is None or opened[0] is not block:
            opened = self._opened = (block, block.texts())
        return block.message(index, opened[1])

    def __iter__(self) -> Iterator[Message]:
        for block in self._blocks:
            yield from block.messages()
        yield from self._tail

    def parted(self, stop: int | None = None) -> Iterator[tuple[int, Message]]:
        """The messages (before ``stop``) that are not one text part, with their places:
        found without unpacking a text (:meth:`threads.media.Media.prepare` looks for files)."""
        end = len(self) if stop is None else min(stop, len(self))
        for number, block in enumerate(self._blocks):
            for index, message in (block.objects or {}).items():
                at = number * BLOCK + index
                if at < end and message.sole_text() is None:
                    yield at, message
        packed = self._packed
        for offset, message in enumerate(self._tail[: max(end - packed, 0)]):
            if message.sole_text() is None:
                yield packed + offset, message

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageList | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageList({list(self)!r})"

    def append(self, message: Message) -> None:
        self._opened = None
        tail = self._tail
        tail.append(message)
        if len(tail) >= KEEP + BLOCK:
            self._blocks.append(_Block(tail[:BLOCK], first=not self._blocks))
            del tail[:BLOCK]

    def replace_last(self, message: Message) -> None:
        """Put ``message`` in place of the last one (there is one)."""
        if not self._tail:
            raise IndexError("replace_last on an empty message list")
        self._tail[-1] = message

    def copy(self) -> MessageList:
        """Another list of the same messages, sharing the packed blocks."""
        other = MessageList()
        other._blocks = self._blocks.copy()
        other._tail = self._tail.copy()
        return other
