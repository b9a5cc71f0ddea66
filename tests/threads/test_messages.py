"""A message of one text part keeps its text alone (decision perf-26)."""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
from datetime import UTC, datetime

import pytest

from threads.messages import Message, TextPart, ToolCallPart
from threads.store.codec import decode_entry, encode_entry
from threads.store.entries import MessageEntry
from threads.tree import EntryTree

T = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def walked_beside(message: Message) -> list[object]:
    """What the message holds that the garbage collector walks too (its class aside)."""
    return [
        kept
        for kept in gc.get_referents(message)
        if gc.is_tracked(kept) and not isinstance(kept, type)
    ]


def test_a_lone_text_part_is_kept_as_its_text_and_given_back_as_a_part() -> None:
    message = Message.user("hello")
    assert message.content == (TextPart(text="hello"),)
    assert message.text() == "hello"
    assert message.tool_calls() == []
    assert message.tool_results() == []
    # One object for the collector to walk, not the message, its tuple and its part.
    assert not walked_beside(message)


def test_messages_compare_and_hash_by_role_and_content_whatever_they_keep() -> None:
    call = ToolCallPart(id="c1", name="noop")
    two = Message(role="assistant", content=(TextPart(text="hi"), call))
    assert Message.assistant("hi") == Message(role="assistant", content=(TextPart(text="hi"),))
    assert hash(Message.user("a")) == hash(Message(role="user", content=(TextPart(text="a"),)))
    assert Message.user("a") != Message.assistant("a")
    assert Message.assistant("hi") != two
    assert two == Message(role="assistant", content=(TextPart(text="hi"), call))
    assert two.content == (TextPart(text="hi"), call)
    assert two.tool_calls() == [call]
    assert Message(role="user", content=()).text() == ""
    assert repr(Message.user("a")) == "Message(role='user', content=(TextPart(text='a'),))"


def test_a_message_is_frozen_and_copies_as_a_value() -> None:
    message = Message.user("hello")
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.role = "assistant"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del message.role  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(message)) == message
    assert copy.deepcopy(message) == message


def test_a_decoded_text_message_holds_no_part_and_reads_back_equal() -> None:
    for message in (
        Message.user("hello"),
        Message(role="assistant", content=(TextPart(text="a"), TextPart(text="b"))),
        Message(role="assistant", content=(ToolCallPart(id="c1", name="noop"),)),
    ):
        line = encode_entry(MessageEntry(id="e_1", created=T, message=message))
        entry = decode_entry(line)
        assert isinstance(entry, MessageEntry)
        assert entry.message == message
        assert entry.message.content == message.content
    entry = decode_entry(encode_entry(MessageEntry(id="e_1", created=T, message=Message.user("x"))))
    assert isinstance(entry, MessageEntry)
    assert not walked_beside(entry.message)


def test_a_context_of_text_messages_is_one_tracked_object_each() -> None:
    tree = EntryTree("s_1")
    parent = ""
    for n in range(50):
        message = Message.user(f"q{n}") if n % 2 == 0 else Message.assistant(f"a{n}")
        entry = MessageEntry(id=f"e_{n}", parent=parent, created=T, message=message)
        line = encode_entry(entry)
        tree.add(decode_entry(line), line)
        parent = entry.id
    context = tree.context()
    assert [m.text() for m in context] == [f"q{n}" if n % 2 == 0 else f"a{n}" for n in range(50)]
    assert not any(walked_beside(m) for m in context)
