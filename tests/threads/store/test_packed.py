"""Kept lines are packed by the block and read back as they were given, in any order."""

from __future__ import annotations

import dataclasses
import itertools
import zlib

import pytest

from threads.ids import new_entry_id, new_session_id
from threads.messages import Message, Usage
from threads.outbound import mark, send_id
from threads.store.codec import encode_entry
from threads.store.entries import Entry, MessageEntry, OutboundEntry, TurnEntry
from threads.store.packed import BLOCK, PackedLines


def line(n: int) -> bytes:
    return b'{"type":"message","id":"e_%06d","message":{"role":"user","text":"hello"}}' % n


def test_lines_read_back_as_given_whole_blocks_packed_and_the_newest_as_they_are() -> None:
    count = 3 * BLOCK + 5
    lines = PackedLines()
    for n in range(count):
        lines.append(line(n) + b"\n" if n % 2 else line(n))  # a store's line keeps its newline
    expected = [line(n) for n in range(count)]
    assert len(lines) == count
    assert list(lines) == expected
    assert list(reversed(lines)) == expected[::-1]
    assert [lines[n] for n in (0, BLOCK - 1, BLOCK, count - 1, -1)] == [
        expected[n] for n in (0, BLOCK - 1, BLOCK, count - 1, -1)
    ]
    assert lines[BLOCK - 2 : BLOCK + 2] == expected[BLOCK - 2 : BLOCK + 2]
    assert 0 < lines.packed_bytes * 4 < sum(map(len, expected[: 3 * BLOCK]))
    with pytest.raises(IndexError):
        lines[count]


def test_a_reader_walks_any_order_and_sees_lines_appended_meanwhile() -> None:
    lines = PackedLines(line(n) for n in range(BLOCK - 1))
    read = lines.reader()
    assert read(BLOCK - 2) == line(BLOCK - 2)
    lines.append(line(BLOCK - 1))  # the tail becomes the first block
    lines.append(line(BLOCK))
    order = [BLOCK, 0, BLOCK - 1, 5, BLOCK - 2, BLOCK]
    assert [read(n) for n in order] == [line(n) for n in order]
    assert list(lines.at(order)) == [line(n) for n in order]


def gateway_lines(count: int) -> list[bytes]:
    """``count`` lines of turns as a gateway writes them, through the codec."""
    session = new_session_id()
    to = {"kind": "channel", "channel": "web", "chat": "c1", "key": "web:c1"}
    lines: list[bytes] = []
    parent = ""
    for n in itertools.count(1):
        run_id = f"{session}-t{n}"
        record = OutboundEntry(
            id=send_id(run_id, 1, 0), status="pending", run_id=run_id, kind="reply", to=to
        )
        turn: list[Entry] = [
            MessageEntry(id=new_entry_id(), message=Message.user(f"question {n}"), run_id=run_id),
            MessageEntry(id=new_entry_id(), message=Message.assistant(f"answer {n}")),
            dataclasses.replace(record, text=f"answer {n}"),
            mark(record, "delivered"),
            TurnEntry(id=new_entry_id(), run_id=run_id, usage=Usage(input_tokens=n)),
        ]
        for entry in turn:
            lines.append(encode_entry(dataclasses.replace(entry, parent=parent)))
            parent = entry.id
            if len(lines) == count:
                return lines
    raise AssertionError("unreachable")


def test_a_gateways_lines_pack_smaller_than_zlib_alone_and_read_back() -> None:
    lines = gateway_lines(4 * BLOCK)
    packed = PackedLines(lines)
    assert list(packed) == [line.rstrip(b"\n") for line in lines]
    alone = sum(
        len(zlib.compress(b"\n".join(line.rstrip(b"\n") for line in lines[at : at + BLOCK]), 1))
        for at in range(0, len(lines), BLOCK)
    )
    assert packed.packed_bytes < 0.85 * alone  # a sixth smaller, at least
