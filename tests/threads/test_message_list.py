"""A context's list packs its older messages and reads them back as they were (perf-42, perf-43)."""

from __future__ import annotations

import gc
import secrets
import tracemalloc
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from threads.context import ContextBuilder, RunContext
from threads.ids import new_session_id
from threads.llm.conversations import EncodedConversations
from threads.message_list import BLOCK, KEEP, MessageList
from threads.messages import (
    FilePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    kept_message,
)
from threads.wake import UserCaller, Wake, WakeSource, render_prompt


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


def test_a_long_context_keeps_at_most_80_of_its_messages_as_objects_besides_its_first() -> None:
    # Each kept object is one more for every garbage collection to walk, in every live session.
    messages = [Message.user(f"m{i}") for i in range(400)]
    packed = MessageList()
    for count, message in enumerate(messages, 1):
        packed.append(message)
        kept = sum(packed[i] is messages[i] for i in range(1, count))
        assert kept <= 80, count
        assert all(packed[-i] is messages[count - i] for i in range(1, min(count, 16) + 1))


def test_a_copy_shares_the_blocks_and_changes_apart() -> None:
    packed = MessageList(mixed(3 * BLOCK))
    copy = packed.copy()
    copy.replace_last(Message.user("changed"))
    copy.append(Message.user("more"))
    assert packed[-1] != copy[-2]
    assert len(copy) == len(packed) + 1
    assert copy[:-2] == packed[:-1]


def held_bytes(make: type[list[Message]] | type[MessageList], texts: list[str]) -> int:
    """What ``make`` holds of messages made of ``texts``, the strings made afresh inside."""
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        kept = make(
            kept_message("user" if i % 2 else "assistant", text.encode().decode())
            for i, text in enumerate(texts)
        )
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
        del kept
        return held
    finally:
        tracemalloc.stop()


def test_packed_messages_hold_under_half_of_their_objects_even_in_text_that_does_not_compress() -> (
    None
):
    texts = [secrets.token_urlsafe(75) for _ in range(2000)]  # 100 characters, 6 bits each
    as_objects = held_bytes(list, texts)
    packed = held_bytes(MessageList, texts)
    assert packed < 0.5 * as_objects, (packed, as_objects)


SESSION = new_session_id()


def prompt(turn: int) -> str:
    wake = Wake(
        source=WakeSource.WEB,
        body=f"message {turn}",
        caller=UserCaller(channel="web", user_id="u1"),
        created=datetime(2026, 12, 7, 12, 0, tzinfo=UTC) + timedelta(seconds=turn * 7),
    )
    return render_prompt(wake, thread="web:570a05f2ce31f19c", session_id=SESSION)


def test_prompts_pack_to_under_a_quarter_of_their_text_as_their_headers_repeat() -> None:
    texts = [prompt(turn // 2) if turn % 2 == 0 else "ok" for turn in range(2000)]
    packed = held_bytes(MessageList, texts)
    assert packed < sum(map(len, texts)) / 4, (packed, sum(map(len, texts)))


def test_a_packed_message_read_alone_decompresses_only_its_block_once_for_reads_in_a_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    packed = MessageList(Message.user(f"m{i}") for i in range(4 * BLOCK))
    calls: list[bytes] = []
    decompress = zlib.decompress
    monkeypatch.setattr(zlib, "decompress", lambda data: calls.append(data) or decompress(data))
    assert [packed[i].text() for i in range(1, BLOCK)] == [f"m{i}" for i in range(1, BLOCK)]
    assert len(calls) == 1
    assert packed[0].text() == "m0"  # the first message is kept whole: nothing to decompress
    assert packed[BLOCK : BLOCK + 2] == [Message.user(f"m{BLOCK}"), Message.user(f"m{BLOCK + 1}")]
    assert len(calls) == 2


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


def test_a_block_whose_texts_pass_64_kib_reads_back() -> None:
    messages = [Message.user(f"{i:04d}" + "é" * 1500) for i in range(2 * BLOCK + KEEP)]
    assert MessageList(messages) == messages


def test_parted_names_every_message_of_several_parts_in_place_packed_or_not() -> None:
    messages = mixed(4 * BLOCK + 9)
    expected = [(i, m) for i, m in enumerate(messages) if m.sole_text() is None]
    assert list(MessageList(messages).parted()) == expected
    assert list(MessageList(messages).parted(200)) == [(i, m) for i, m in expected if i < 200]
    own = [Message(role="user", content=(TextPart(text="see"), FilePart(url="data:,y")))]
    for base in (messages, MessageList(messages)):
        run = RunContext(base, len(messages) - 5, list(own))
        assert list(run.parted()) == [
            *((i, m) for i, m in expected if i < len(messages) - 5),
            (len(messages) - 5, own[0]),
        ]
