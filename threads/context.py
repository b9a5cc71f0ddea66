"""The model's context: how a path of entries becomes the messages a model reads.

The latest summary stands in for what it covers, recorded trims are replayed,
bookkeeping never shows, and every tool call gets a result
(:func:`context_builder`, :func:`context_at`). A session keeps its context in
a :class:`ContextBuilder` that later entries extend; a run starts from a
:class:`RunContext`, the builder's list shared up to where it stood rather
than copied (decision perf-34).
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, MutableSequence, Sequence
from itertools import chain, islice
from typing import overload

from threads.entry_log import EntryLog
from threads.message_list import MessageList
from threads.messages import Message, TextPart, ToolResultPart
from threads.store.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomMessageEntry,
    Entry,
    MessageEntry,
)

INTERRUPTED = "no result recorded: the call was interrupted"
SUMMARY_OPEN = "<summary>"
SUMMARY_CLOSE = "</summary>"


def summary_message(text: str) -> Message:
    return Message(
        role="user", content=(TextPart(text=f"{SUMMARY_OPEN}\n{text}\n{SUMMARY_CLOSE}"),)
    )


def context_builder(path: Sequence[Entry]) -> ContextBuilder:
    """The context of a root→leaf path, in a builder that later entries extend.

    The latest summary compaction's summary stands in place of what it covers
    (then the entries it pinned, then everything from its first kept entry
    on); every trim recorded after it is replayed (the stubs its record
    names, nothing else); branch summaries sit where they were written;
    bookkeeping kinds never appear; repair runs as the context grows, so
    every tool call has a result.
    """
    builder = ContextBuilder()
    start = 0
    governing = -1
    for index in range(len(path) - 1, -1, -1):
        entry = path[index]
        if isinstance(entry, CompactionEntry) and entry.summary:
            governing = index
            break
    stubs = _trim_stubs(path[governing + 1 :])
    if governing >= 0:
        compaction = path[governing]
        assert isinstance(compaction, CompactionEntry)
        builder.add(summary_message(compaction.summary))
        pinned = set(compaction.pinned)
        kept_from = next(
            (i for i, e in enumerate(path) if e.id == compaction.first_kept), governing + 1
        )
        for e in path[:kept_from]:
            if e.id in pinned and (m := message_of(e)) is not None:
                builder.add(_stubbed(m, stubs))
        start = kept_from
    for entry in path[start:]:
        message = message_of(entry)
        if message is not None:
            builder.add(_stubbed(message, stubs) if stubs else message)
    return builder


_MESSAGE_KINDS = frozenset({MessageEntry.TYPE, CustomMessageEntry.TYPE, BranchSummaryEntry.TYPE})


def context_at(log: EntryLog, path: Sequence[int]) -> ContextBuilder:
    """:func:`context_builder` over a path given as positions in ``log``, reading only
    what the context holds: the path is searched back for its latest summary by the
    entries' kinds, and only compactions and what the context shows are decoded.

    Positions along a path grow (an entry's parent is an earlier entry), so where
    an entry sits on it is a bisection.
    """
    read = log.reader()
    governing = -1
    trims: list[CompactionEntry] = []
    for index in range(len(path) - 1, -1, -1):
        if log.kind(path[index]) != CompactionEntry.TYPE:
            continue
        entry = read(path[index])
        assert isinstance(entry, CompactionEntry)
        if entry.summary:
            governing = index
            break
        if entry.trim:
            trims.append(entry)
    stubs = _trim_stubs(trims[::-1])
    builder = ContextBuilder()
    start = 0
    if governing >= 0:
        compaction = read(path[governing])
        assert isinstance(compaction, CompactionEntry)
        builder.add(summary_message(compaction.summary))
        kept_from = _on_path(log, path, compaction.first_kept)
        if kept_from is None:
            kept_from = governing + 1
        pinned = sorted(
            i
            for i in (_on_path(log, path, entry_id) for entry_id in set(compaction.pinned))
            if i is not None and i < kept_from
        )
        for i in pinned:
            if (m := message_of(read(path[i]))) is not None:
                builder.add(_stubbed(m, stubs))
        start = kept_from
    for at in path[start:]:
        if log.kind(at) in _MESSAGE_KINDS and (message := message_of(read(at))) is not None:
            builder.add(_stubbed(message, stubs) if stubs else message)
    return builder


def _on_path(log: EntryLog, path: Sequence[int], entry_id: str) -> int | None:
    """Where the entry ``entry_id`` sits on ``path`` (positions, growing), or None."""
    at = log.position(entry_id)
    if at is None:
        return None
    index = bisect_left(path, at)
    return index if index < len(path) and path[index] == at else None


def _trim_stubs(entries: Sequence[Entry]) -> dict[str, str]:
    """The stubs the trims among ``entries`` recorded: call id → the text shown instead."""
    stubs: dict[str, str] = {}
    for entry in entries:
        if isinstance(entry, CompactionEntry) and entry.trim:
            stubs.update(_stubs_of(entry.trim))
    return stubs


def _stubs_of(record: Mapping[str, object]) -> dict[str, str]:
    found = record.get("stubs")
    if not isinstance(found, list):
        return {}
    return {
        str(s["call_id"]): str(s.get("content", ""))
        for s in found
        if isinstance(s, dict) and "call_id" in s
    }


def _stubbed(message: Message, stubs: dict[str, str]) -> Message:
    if message.role != "tool" or not stubs:
        return message
    parts = tuple(
        dataclasses.replace(p, content=stubs[p.call_id], is_error=False)
        if isinstance(p, ToolResultPart) and p.call_id in stubs
        else p
        for p in message.content
    )
    return message if parts == message.content else Message(role="tool", content=parts)


def replay_trims(messages: Sequence[Message], record: Mapping[str, object]) -> list[Message]:
    """``messages`` with a trim record's stubs in place of the results it names."""
    stubs = _stubs_of(record)
    return [_stubbed(m, stubs) for m in messages]


def message_of(entry: Entry) -> Message | None:
    """The message an entry puts in the context, if any."""
    if isinstance(entry, MessageEntry | CustomMessageEntry):
        return entry.message
    if isinstance(entry, BranchSummaryEntry):
        return summary_message(entry.summary)
    return None


class ContextBuilder:
    """The context of a path, built incrementally and repaired as it grows.

    Every tool call gets a result: a message arriving while calls are open
    first closes them with :data:`INTERRUPTED`; results answering no open call
    are dropped; consecutive tool messages merge.

    Its list only grows at the end, but for that merge: a run shares the list
    up to where it stood (:meth:`run_context`), and a merge into a message a
    run shares copies the list first. The list packs its older messages
    (:class:`~threads.message_list.MessageList`, decision perf-42).
    """

    __slots__ = ("_messages", "_open", "_shared")

    def __init__(self) -> None:
        self._messages = MessageList()
        self._open: dict[str, str] = {}
        self._shared = 0  # how much of the list a run context may share

    def add(self, message: Message) -> None:
        if message.role == "tool":
            kept = tuple(
                p
                for p in message.content
                if not isinstance(p, ToolResultPart) or self._open.pop(p.call_id, None) is not None
            )
            if kept:
                self._append_tool(
                    message if kept == message.content else Message(role="tool", content=kept)
                )
            return
        if self._open:
            self._append_tool(_interrupted(self._open))
            self._open = {}
        self._messages.append(message)
        if message.role == "assistant":
            for call in message.tool_calls():
                self._open[call.id] = call.name

    @property
    def open(self) -> dict[str, str]:
        """The calls still waiting for a result, call id → tool name (do not mutate)."""
        return self._open

    def _append_tool(self, message: Message) -> None:
        messages = self._messages
        if messages and messages[-1].role == "tool":
            if len(messages) <= self._shared:
                # A run may share the message about to change: it keeps this list, we change a copy.
                messages = self._messages = messages.copy()
                self._shared = 0
            messages.replace_last(_merged(messages[-1], message))
        else:
            messages.append(message)

    def run_context(self, *, close_open: bool = True) -> RunContext:
        """The context as :meth:`messages` gives it, sharing this list instead of copying it."""
        shared, own = self._closing(close_open)
        self._shared = max(self._shared, shared)
        return RunContext(self._messages, shared, own)

    def messages(self, *, close_open: bool = True) -> list[Message]:
        """A copy of the context, with calls still open closed by :data:`INTERRUPTED`."""
        shared, own = self._closing(close_open)
        out = self._messages[:shared]
        out += own
        return out

    def _closing(self, close_open: bool) -> tuple[int, list[Message]]:
        """How much of the list the context takes as it is, and the messages after that:
        with ``close_open``, the calls still open closed (merged into a last tool message)."""
        messages = self._messages
        if not (self._open and close_open):
            return len(messages), []
        interrupted = _interrupted(self._open)
        if messages and messages[-1].role == "tool":
            return len(messages) - 1, [_merged(messages[-1], interrupted)]
        return len(messages), [interrupted]


def still_open(open_calls: dict[str, str], messages: Sequence[Message]) -> dict[str, str]:
    """The calls left without a result after ``messages`` follow a line whose open calls are given.

    A non-tool message does not close a call here: what is recorded is what
    was answered, and the caller writes the interruption results.
    """
    remaining = dict(open_calls)
    for message in messages:
        if message.role == "tool":
            for part in message.content:
                if isinstance(part, ToolResultPart):
                    remaining.pop(part.call_id, None)
        elif message.role == "assistant":
            for call in message.tool_calls():
                remaining[call.id] = call.name
    return remaining


def interruption_results(calls: dict[str, str]) -> list[Message]:
    """The tool message answering ``calls`` with :data:`INTERRUPTED` (none when empty)."""
    return [_interrupted(calls)] if calls else []


def _merged(tool: Message, more: Message) -> Message:
    """One tool message holding ``tool``'s results, then ``more``'s."""
    return Message(role="tool", content=tool.content + more.content)


def _interrupted(calls: dict[str, str]) -> Message:
    return Message(
        role="tool",
        content=tuple(
            ToolResultPart(call_id=call_id, name=name, content=INTERRUPTED, is_error=True)
            for call_id, name in calls.items()
        ),
    )


class RunContext(MutableSequence[Message]):
    """A run's context: ``base[:shared]`` (a session's list), then ``own``, as one sequence.

    A run used to take a copy of its session's context: on a thousand-turn
    session, 2 000 references copied and released every turn, and a young list
    every collection in the turn walked whole. Here the session's list is
    shared up to where it stood when the run began. What the session appends
    later lies past ``shared`` and is not seen; the one change a session makes
    inside its list (a tool message merged into the one before it) copies the
    list first when a run shares that place (:class:`ContextBuilder`). The run
    appends, extends and pops its last message freely; a change it makes
    inside the shared part takes the shared messages into its own list first.
    """

    __slots__ = ("_base", "_own", "_shared")

    def __init__(
        self, base: list[Message] | MessageList, shared: int, own: list[Message] | None = None
    ) -> None:
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

    def parted(self) -> Iterator[tuple[int, Message]]:
        """The messages that are not one text part, with their places; a packed list's
        texts stay packed (:meth:`MessageList.parted`)."""
        base, shared = self._base, self._shared
        if isinstance(base, MessageList):
            yield from base.parted(shared)
        else:
            for at, message in enumerate(islice(base, shared)):
                if message.sole_text() is None:
                    yield at, message
        for offset, message in enumerate(self._own):
            if message.sole_text() is None:
                yield shared + offset, message

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
