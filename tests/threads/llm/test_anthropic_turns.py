"""The Messages API's ``messages`` array: a role's consecutive messages one turn, the last
block marked for caching, and a conversation's earlier messages not encoded again."""

from __future__ import annotations

import orjson
import pytest

from threads.llm import anthropic
from threads.llm.conversations import EncodedConversations
from threads.messages import Message, TextPart, ToolCallPart, ToolResultPart, tool_result_message


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[Message]:
    """Every message the client encodes, in order."""
    seen: list[Message] = []
    encode = anthropic._encoded

    def counting(message: Message) -> bytes:
        seen.append(message)
        return encode(message)

    monkeypatch.setattr(anthropic, "_encoded", counting)
    return seen


def array(messages: list[Message], kept: EncodedConversations, *, cache_last: bool) -> object:
    fragment = anthropic.messages_json(messages, kept, cache_last=cache_last)
    return orjson.loads(orjson.dumps(fragment))


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def test_a_roles_consecutive_messages_are_one_turn() -> None:
    call = ToolCallPart(id="c1", name="read", args={"path": "a"})
    messages = [
        Message.user("one"),
        Message.user("two"),
        Message(role="assistant", content=(TextPart(text="looking"), call)),
        tool_result_message([ToolResultPart(call_id="c1", name="read", content="A")]),
        Message.user("and"),
        Message.assistant(""),  # no blocks: no turn
        Message.assistant("done"),
    ]
    assert array(messages, EncodedConversations(), cache_last=False) == [
        {"role": "user", "content": [text("one"), text("two")]},
        {
            "role": "assistant",
            "content": [
                text("looking"),
                {"type": "tool_use", "id": "c1", "name": "read", "input": {"path": "a"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "A"}, text("and")],
        },
        {"role": "assistant", "content": [text("done")]},
    ]


def test_the_last_block_is_marked_for_caching_and_is_plain_once_the_conversation_goes_on(
    encoded: list[Message],
) -> None:
    kept = EncodedConversations()
    first = [Message.user("a"), Message.assistant("b"), Message.user("c"), Message.assistant("")]
    marked = text("c") | {"cache_control": {"type": "ephemeral"}}
    assert array(first, kept, cache_last=True) == [
        {"role": "user", "content": [text("a")]},
        {"role": "assistant", "content": [text("b")]},
        {"role": "user", "content": [marked]},
    ]
    grown = [*first, Message.user("d")]
    assert array(grown, kept, cache_last=True) == [
        {"role": "user", "content": [text("a")]},
        {"role": "assistant", "content": [text("b")]},
        {
            "role": "user",
            "content": [text("c"), text("d") | {"cache_control": {"type": "ephemeral"}}],
        },
    ]
    # The first request encoded a and b; the second, c and the empty message after it.
    assert [m.text() for m in encoded] == ["a", "b", "c", ""]


def test_a_grown_conversation_encodes_only_its_new_messages(encoded: list[Message]) -> None:
    kept = EncodedConversations()
    history = [Message.assistant(f"m{n}") if n % 2 else Message.user(f"m{n}") for n in range(40)]
    array(history, kept, cache_last=False)
    grown = [*history, Message.user("new"), Message.assistant("answer")]
    assert array(grown, kept, cache_last=False)[-2:] == [
        {"role": "user", "content": [text("new")]},
        {"role": "assistant", "content": [text("answer")]},
    ]
    assert len(encoded) == 42
    assert array(grown, EncodedConversations(), cache_last=False) == array(
        grown, kept, cache_last=False
    )


def test_no_message_with_blocks_is_an_empty_array() -> None:
    for cache_last in (False, True):
        assert array([Message.assistant("")], EncodedConversations(), cache_last=cache_last) == []
        assert array([], EncodedConversations(), cache_last=cache_last) == []
