"""A client's encoded conversations: a request encodes only what its conversation did not send."""

from __future__ import annotations

import gc
from collections.abc import Sequence

from tests.clock import Seconds
from threads.llm.conversations import IDLE_SECONDS, SPLICE_AT, EncodedConversations, Spliced
from threads.messages import Message


class Counting:
    """An encoder that notes every message it encodes (a message with no text adds none)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, messages: Sequence[Message]) -> bytes:
        self.seen.extend(m.text() for m in messages)
        return b",".join(m.text().encode() for m in messages if m.text())


def test_a_grown_conversation_encodes_only_its_new_messages() -> None:
    kept, encode = EncodedConversations(), Counting()
    history = [Message.user("a"), Message.assistant("b"), Message.user("c")]
    assert kept.encode(history, encode) == b"a,b,c"
    grown = [*history, Message.assistant("d"), Message.user("e")]
    assert kept.encode(grown, encode) == b"a,b,c,d,e"
    assert encode.seen == ["a", "b", "c", "d", "e"]


def test_a_list_that_differs_where_the_last_request_ended_is_encoded_whole() -> None:
    kept, encode = EncodedConversations(), Counting()
    history = [Message.user("a"), Message.assistant("b"), Message.user("c")]
    kept.encode(history, encode)
    # The last message replaced by an equal but different object (a merged tool message).
    replaced = [*history[:2], Message.user("c"), Message.user("d")]
    assert kept.encode(replaced, encode) == b"a,b,c,d"
    assert encode.seen == ["a", "b", "c", "a", "b", "c", "d"]
    # Shorter than what was sent (a rollback): whole again.
    assert kept.encode(history[:2], encode) == b"a,b"


def test_messages_with_no_encoding_are_left_out() -> None:
    kept, encode = EncodedConversations(), Counting()
    assert kept.encode([Message.user("a"), Message.assistant(""), Message.user("c")], encode) == (
        b"a,c"
    )


def test_a_conversation_no_request_grew_for_a_while_is_let_go_at_the_next_request() -> None:
    clock, encode = Seconds(), Counting()
    kept = EncodedConversations(clock=clock)
    away = [Message.user("a" * 10), Message.assistant("b")]
    here = [Message.user("c" * 10)]
    kept.encode(away, encode)
    clock.now += IDLE_SECONDS / 2
    kept.encode(here, encode)
    assert kept.kept_bytes == 12 + 10
    clock.now += IDLE_SECONDS / 2  # the first one's minute is up, not the second's
    here.append(Message.assistant("d"))
    assert kept.encode(here, encode) == b"c" * 10 + b",d"
    assert kept.kept_bytes == 12
    assert kept.encode([*away, Message.user("e")], encode) == b"a" * 10 + b",b,e"
    assert encode.seen == ["a" * 10, "b", "c" * 10, "d", "a" * 10, "b", "e"]  # whole again
    assert kept.kept_bytes == 12 + 14


def test_what_is_kept_is_bounded_in_bytes_oldest_first_out() -> None:
    kept, encode = EncodedConversations(max_bytes=10), Counting()
    one = [Message.user("x" * 8)]
    two = [Message.user("y" * 8)]
    kept.encode(one, encode)
    kept.encode(two, encode)
    assert kept.kept_bytes == 8
    kept.encode([*one, Message.user("z")], encode)
    assert encode.seen == ["x" * 8, "y" * 8, "x" * 8, "z"]


def test_an_array_holds_its_lead_then_the_messages() -> None:
    kept, encode = EncodedConversations(), Counting()
    history = [Message.user("a"), Message.assistant("b")]
    assert kept.array(b"S", history, encode) == b"[S,a,b]"
    assert kept.array(b"", [*history, Message.user("c")], encode) == b"[a,b,c]"
    assert kept.array(b"S", [], encode) == b"[S]"
    assert kept.array(b"", [Message.assistant("")], encode) == b"[]"
    assert encode.seen == ["a", "b", "c", ""]


def test_what_a_request_was_given_stays_as_it_was_when_the_conversation_grows() -> None:
    kept, encode = EncodedConversations(), Counting()
    history = [Message.user("a"), Message.assistant("b")]
    sent = kept.encode(history, encode)
    framed = kept.array(b"S", history, encode)
    kept.encode([*history, Message.user("c")], encode)
    assert (sent, framed) == (b"a,b", b"[S,a,b]")
    assert encode.seen == ["a", "b", "c"]


def test_a_long_array_is_spliced_around_the_kept_bytes_not_copied() -> None:
    kept, encode = EncodedConversations(), Counting()
    long = "x" * SPLICE_AT
    spliced = kept.array(b"S", [Message.user(long)], encode, before=b"{", after=b"}")
    assert isinstance(spliced, Spliced)
    assert bytes(spliced) == b"{[S," + long.encode() + b"]}"
    assert len(spliced) == len(bytes(spliced))


def test_a_conversation_grown_while_its_last_request_is_out_leaves_that_request_as_it_was() -> None:
    kept, encode = EncodedConversations(), Counting()
    history = [Message.user("x" * SPLICE_AT)]
    out = kept.array(b"", history, encode)
    assert isinstance(out, Spliced)
    grown = kept.array(b"", [*history, Message.user("y")], encode)  # grows a copy
    assert bytes(out) == b"[" + b"x" * SPLICE_AT + b"]"
    assert bytes(grown) == b"[" + b"x" * SPLICE_AT + b",y]"
    assert encode.seen == ["x" * SPLICE_AT, "y"]  # still only what is new


def test_a_conversation_goes_once_its_first_message_is_let_go() -> None:
    kept, encode = EncodedConversations(), Counting()
    history = [Message.user("a" * 10), Message.assistant("b")]
    other = [Message.user("c" * 5)]
    kept.encode(history, encode)
    kept.encode([*history, Message.user("d")], encode)  # grown: the same conversation
    kept.encode(other, encode)
    assert kept.kept_bytes == 14 + 5
    del history
    gc.collect()
    assert kept.kept_bytes == 5
    assert kept.encode([*other, Message.user("e")], encode) == b"c" * 5 + b",e"
    assert encode.seen[-1] == "e"  # the conversation that stays still grows from its bytes
