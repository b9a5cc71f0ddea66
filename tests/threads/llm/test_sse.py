"""The SSE decoder: whole events out, however the bytes were cut."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from threads.llm.sse import SSEDecoder, SSEEvent

STREAM = (
    b": keep-alive comment\n"
    b"event: message_start\n"
    b'data: {"a": 1}\n'
    b"\n"
    b'data: {"b": "caf\xc3\xa9"}\r\n'
    b"\r\n"
    b"event: multi\n"
    b"data: line one\n"
    b"data:line two\n"
    b"id: 7\n"
    b"\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent("message_start", b'{"a": 1}'),
    SSEEvent("message", b'{"b": "caf\xc3\xa9"}'),
    SSEEvent("multi", b"line one\nline two"),
    SSEEvent("message", b"[DONE]"),
]


def decode(pieces: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    events.extend(decoder.close())
    return events


def test_events_come_out_with_names_and_joined_data_lines() -> None:
    assert decode([STREAM]) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_events_are_the_same_wherever_the_bytes_are_cut(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    pieces = [STREAM[a:b] for a, b in itertools.pairwise(points)]
    assert decode(pieces) == EXPECTED


def test_an_event_without_the_final_blank_line_is_still_delivered_at_close() -> None:
    assert decode([b"data: last"]) == [SSEEvent("message", b"last")]


def test_an_event_is_not_delivered_before_its_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: half\n") == []
    assert decoder.feed(b"\n") == [SSEEvent("message", b"half")]
