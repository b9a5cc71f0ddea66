"""The context a run starts from, shared with its session rather than copied (decision perf-34).

A session keeps its context as one list that only grows at the end while the
session lives (:class:`~threads.tree.ContextBuilder`). A run used to take a
copy of it and extend the copy as it went: on a thousand-turn session that is
2 000 references copied and released on every turn, and a young list the
garbage collector walks whole while the turn is in flight.

:class:`RunContext` is the run's list without that copy: the session's list up
to where it stood when the run began (``shared``), then the messages the run
adds (``own``). What the session appends later lies past ``shared`` and is not
seen; the one change a session makes inside its list (a tool message merged
into the one before it) copies the list first when a run shares that place, so
a run never sees its start change under it. A change the run makes inside the
shared part (rare: the loop only appends, and pops a resumed step's last tool
message) takes the shared messages into a list of its own first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSequence
from itertools import chain, islice
from typing import overload

from threads.messages import Message


class RunContext(MutableSequence[Message]):
    """``base[:shared]`` then ``own``, as one mutable sequence of messages."""

    __slots__ = ("_base", "_own", "_shared")

    def __init__(self, base: list[Message], shared: int, own: list[Message] | None = None) -> None:
        self._base = base
        self._shared = shared
        self._own: list[Message] = own if own is not None else []

    def __len__(self) -> int:
        return self._shared + len(self._own)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        shared = self._shared
        if isinstance(index, slice):
            start, stop, step = index.indices(shared + len(self._own))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            if start >= shared:
                return self._own[start - shared : stop - shared]
            return self._base[start : min(stop, shared)] + self._own[: max(stop - shared, 0)]
        if index < 0:
            index += shared + len(self._own)
            if index < 0:
                raise IndexError("run context index out of range")
        if index < shared:
            return self._base[index]
        return self._own[index - shared]

    def __iter__(self) -> Iterator[Message]:
        return chain(islice(self._base, self._shared), self._own)

    def __reversed__(self) -> Iterator[Message]:
        base = self._base
        return chain(reversed(self._own), (base[i] for i in range(self._shared - 1, -1, -1)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunContext | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RunContext({list(self)!r})"

    def append(self, message: Message) -> None:
        self._own.append(message)

    def extend(self, messages: Iterable[Message]) -> None:
        self._own.extend(messages)

    def pop(self, index: int = -1) -> Message:
        if index == -1:
            if self._own:
                return self._own.pop()
            if self._shared:
                # Sharing less of the session's list needs no copy.
                self._shared -= 1
                return self._base[self._shared]
        self._take_shared()
        return self._own.pop(index)

    @overload
    def __setitem__(self, index: int, value: Message) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[Message]) -> None: ...

    def __setitem__(self, index: int | slice, value: Message | Iterable[Message]) -> None:
        self._take_shared()
        self._own[index] = value  # type: ignore[index,assignment]

    def __delitem__(self, index: int | slice) -> None:
        self._take_shared()
        del self._own[index]

    def insert(self, index: int, value: Message) -> None:
        self._take_shared()
        self._own.insert(index, value)

    def _take_shared(self) -> None:
        """Copy the shared messages into the run's own list: the run changes its start."""
        if self._shared:
            self._own[:0] = self._base[: self._shared]
            self._shared = 0
        self._base = []
