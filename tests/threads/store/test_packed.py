"""Kept lines are packed by the block and read back as they were given, in any order."""

from __future__ import annotations

import pytest

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
