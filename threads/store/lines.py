"""The line discipline of a stored session: header line, entry lines, torn tail.

Backends that keep a session as bytes (jsonl, memory, redis) decode it here,
so the rules are one: bytes after the last newline are a torn tail, dropped
and reported; a malformed line elsewhere is :class:`CorruptError` naming the
line, or skipped and reported under salvage; data from a newer build is
always :class:`NewerFormatError`.
"""

from __future__ import annotations

from collections.abc import Sequence

from threads.errors import CorruptError, NewerFormatError
from threads.messages import WireError
from threads.store.base import Loaded, LoadReport
from threads.store.entries import Entry, Header, decode_entry, decode_header, encode_entry


def encode_batch(entries: Sequence[Entry]) -> bytes:
    """Encode a whole batch before anything is written; raises on any bad entry."""
    return b"".join(encode_entry(e) for e in entries)


def split_torn(data: bytes) -> tuple[bytes, bool]:
    """The complete part of ``data`` and whether an incomplete final line followed it."""
    if not data or data.endswith(b"\n"):
        return data, False
    cut = data.rfind(b"\n") + 1
    return data[:cut], True


def decode_session(session: str, data: bytes, *, salvage: bool = False) -> Loaded:
    """Decode a session's bytes into its header, entries and load report."""
    complete, torn = split_torn(data)
    lines = complete.split(b"\n")[:-1] if complete else []
    torn_line = len(lines) + 1 if torn else 0
    if not lines:
        raise CorruptError(session, 1, "", "the header line is missing or torn")
    try:
        header = decode_header(lines[0])
    except NewerFormatError as exc:
        raise NewerFormatError(f"session {session}: {exc}") from None
    except WireError as exc:
        raise CorruptError(session, 1, "", str(exc)) from None
    entries: list[Entry] = []
    skipped: list[int] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            entries.append(decode_entry(line))
        except NewerFormatError as exc:
            raise NewerFormatError(f"session {session} line {number}: {exc}") from None
        except (WireError, ValueError, TypeError) as exc:
            if not salvage:
                raise CorruptError(session, number, "", str(exc)) from None
            skipped.append(number)
    report = None
    if torn_line or skipped:
        report = LoadReport(torn=torn_line, skipped=tuple(skipped))
    return Loaded(header=header, entries=entries, report=report)


def count_lines(data: bytes) -> int:
    """Complete entry lines in a session's bytes (the header and a torn tail excluded)."""
    complete, _ = split_torn(data)
    return max(complete.count(b"\n") - 1, 0)


def header_of(data: bytes) -> Header | None:
    """The header of a session's bytes, or None when it cannot be read."""
    end = data.find(b"\n")
    if end < 0:
        return None
    try:
        return decode_header(data[:end])
    except (WireError, NewerFormatError, ValueError):
        return None
