"""A context's list packs its older messages and reads them back as they were (perf-42)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Sequence

from threads.context import ContextBuilder
from threads.llm.conversations import EncodedConversations
from threads.message_list import BLOCK, KEEP, MessageList
from threads.messages import (
    FilePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    text_message,
)


def mixed(count: int) -> list[Message]:
    """Text of every role, some of it not ASCII or empty, between messages of other parts."""
    out: list[Message] = []
    for i in range(count):
        if i % 7 == 3:
            out.append(
                Message(
                    role="assistant",
                    content=(
                        ReasoningPart(text="hm"),
                        ToolCallPart(id=f"c{i}", name="look", args={"q": i}),
                    ),
                )
            )
        elif i % 7 == 4:
            out.append(
                Message(
                    role="tool",
                    content=(ToolResultPart(call_id=f"c{i - 1}", name="look", content="ok"),),
                )
            )
        elif i % 11 == 5:
            out.append(
                Message(role="user", content=(TextPart(text="see"), FilePart(url="data:,x")))
            )
        else:
            text = ("" if i % 13 == 0 else f"message {i} ") + (
                "héllo ✓ 🙂" if i % 5 == 0 else "plain"
            )
            out.append(Message.user(text) if i % 2 else Message.assistant(text))
    return out


def test_a_packed_list_reads_back_every_message_by_index_slice_and_iteration() -> None:
    messages = mixed(5 * BLOCK + 17)
    packed = MessageList(messages)
    assert len(packed) == len(messages)
    assert list(packed) == messages
    assert [packed[i] for i in range(len(messages))] == messages
    assert [packed[-i] for i in range(1, len(messages) + 1)] == messages[::-1]
    assert packed[3:200] == messages[3:200]
    assert packed[100:300] == messages[100:300]
    assert packed[300:100] == []
    assert packed[10:300:7] == messages[10:300:7]
    assert packed[-5:] == messages[-5:]
    assert packed == messages
    assert messages == packed
    assert packed != messages[:-1]


def test_the_first_and_the_recent_messages_stay_the_very_objects() -> None:
    messages = [Message.user(f"m{i}") for i in range(3 * BLOCK + KEEP)]
    packed = MessageList(messages)
    assert packed[0] is messages[0]
    assert next(iter(packed)) is messages[0]
    assert all(packed[-i] is messages[-i] for i in range(1, KEEP + 1))
    assert packed[1] == messages[1]
    assert packed[1] is not messages[1]


def test_a_copy_shares_the_blocks_and_changes_apart() -> None:
    packed = MessageList(mixed(3 * BLOCK))
    copy = packed.copy()
    copy.replace_last(Message.user("changed"))
    copy.append(Message.user("more"))
    assert packed[-1] != copy[-2]
    assert len(copy) == len(packed) + 1
    assert copy[:-2] == packed[:-1]


def held_bytes(make: type[list[Message]] | type[MessageList]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        kept = make(
            text_message("user" if i % 2 else "assistant", f"turn {i}: " + "x" * 90)
            for i in range(2000)
        )
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
        del kept
        return held
    finally:
        tracemalloc.stop()


def test_packed_text_messages_hold_less_than_two_thirds_of_their_objects() -> None:
    as_objects = held_bytes(list)
    packed = held_bytes(MessageList)
    assert packed < 0.65 * as_objects, (packed, as_objects)


class Counting:
    def __init__(self) -> None:
        self.encoded = 0

    def __call__(self, messages: Sequence[Message]) -> bytes:
        self.encoded += len(messages)
        return b",".join(m.text().encode() for m in messages)


def test_a_kept_conversation_grows_by_what_is_new_across_the_packing() -> None:
    builder = ContextBuilder()
    conversations = EncodedConversations()
    encode = Counting()
    for turn in range(2 * (KEEP + BLOCK)):
        builder.add(Message.user(f"question {turn}"))
        run = builder.run_context()
        before = encode.encoded
        data = conversations.encode(run, encode)
        assert encode.encoded - before == (2 if turn else 1)
        run.append(Message.assistant(f"answer {turn}"))
        builder.add(run[-1])
    assert data.startswith(b"question 0,answer 0,question 1")
    assert builder.messages()[-1] == Message.assistant(f"answer {turn}")
