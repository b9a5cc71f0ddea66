"""The line discipline of a stored session: header line, entry lines, torn tail.

Every backend keeps a session as the bytes a jsonl file would hold and
decodes them here, so the rules are one: bytes after the last newline are a
torn tail, dropped and reported; a malformed line elsewhere is
:class:`CorruptError` naming the line (and its entry, when the line is JSON
with an id), or skipped and reported under salvage; data from a newer build
is always :class:`NewerFormatError`. Every line salvage skips is logged (a
warning naming the session, the line and the entry), besides the report.

A batch of several entries is framed so that a crash inside its one write
cannot leave a prefix of it that decodes: every line of the batch but the
last carries ``"more": N``, the count of its lines still to come. A run of
such lines at the end, with the closing line missing, is an incomplete batch
and is torn like a half line. Readers of the format that do not know the key
ignore it (unknown keys are additive).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import orjson

from threads.errors import CorruptError, NewerFormatError
from threads.ids import valid_id
from threads.messages import WireError
from threads.store.base import Loaded, LoadReport
from threads.store.codec import decode_entry, decode_header, encode_entry
from threads.store.entries import Entry, Header, MessageEntry
from threads.store.packed import PackedLines
from threads.store.referrals import Referrals, referred

log = logging.getLogger(__name__)

_MORE = re.compile(rb',"more":[0-9]+\}$')


def encode_batch(entries: Sequence[Entry]) -> bytes:
    """Encode a whole batch before anything is written: :func:`encode_lines`, joined."""
    return b"".join(encode_lines(entries))


def encode_lines(entries: Sequence[Entry]) -> list[bytes]:
    """A batch's lines, one per entry and each with its newline, before anything is written.

    These are the bytes a backend stores (joined), and what it hands back
    from ``append``: a session keeps them in place of the values. An entry
    the format could not read back (see
    :func:`~threads.store.codec.encode_entry`) fails the whole batch with
    :class:`ValueError` (:class:`TypeError` for a value JSON cannot hold)
    naming its place in the batch, the entry and the field.
    """
    last = len(entries) - 1
    lines = []
    for index, entry in enumerate(entries):
        try:
            line = encode_entry(entry)
        except (ValueError, TypeError) as exc:
            refusal = TypeError if isinstance(exc, TypeError) else ValueError
            raise refusal(
                f"entry {index + 1} of a batch of {len(entries)}: {exc}; "
                "nothing of the batch was written"
            ) from None
        if index < last:
            line = line[:-2] + b',"more":%d}\n' % (last - index)
        lines.append(line)
    return lines


def complete_end(data: bytes) -> int:
    """The length of ``data``'s complete part: whole lines of whole batches."""
    end = data.rfind(b"\n") + 1
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        if not _MORE.search(data, start, end - 1):
            break
        end = start  # a line of a batch whose closing line never landed
    return end


def split_torn(data: bytes) -> tuple[bytes, bool]:
    """The complete part of ``data`` and whether a torn line or batch followed it."""
    if not data:
        return data, False
    end = complete_end(data)
    return data[:end], end < len(data)


def decode_session(
    session: str,
    data: bytes,
    *,
    salvage: bool = False,
    first_line: int = 2,
    held: Sequence[bytes] = (),
) -> Loaded:
    """Decode a session's bytes into its header, entries and load report.

    ``data`` may be the header's line and the lines after a checkpoint: then
    ``first_line`` is the number of the first of them in the file, and
    ``held`` the lines of earlier receipts they may name.
    """
    complete, torn = split_torn(data)
    lines = complete.split(b"\n")[:-1] if complete else []
    torn_line = first_line + len(lines) - 1 if torn else 0
    if not lines:
        raise CorruptError(session, 1, "", "the header line is missing or torn")
    try:
        header = decode_header(lines[0])
    except NewerFormatError as exc:
        raise NewerFormatError(f"session {session}: {exc}", line=1) from None
    except WireError as exc:
        raise CorruptError(session, 1, "", str(exc)) from None
    entries: list[Entry] = []
    skipped: list[int] = []
    stored = lines[1:]
    referrals = Referrals()
    for line in held:
        referrals.take(decode_entry(line))
    for number, line in enumerate(stored, start=first_line):
        try:
            entries.append(whole_entry(referrals, decode_entry(line)))
        except NewerFormatError as exc:
            raise NewerFormatError(f"session {session} line {number}: {exc}", line=number) from None
        except (WireError, ValueError, TypeError) as exc:
            if not salvage:
                raise CorruptError(session, number, entry_id_of(line), str(exc)) from None
            log_skipped(session, number, line, exc)
            skipped.append(number)
    report = None
    if torn_line or skipped:
        report = LoadReport(torn=torn_line, skipped=tuple(skipped))
        if skipped:
            gone = set(skipped)
            stored = [
                line for number, line in enumerate(stored, start=first_line) if number not in gone
            ]
    return Loaded(header=header, entries=entries, report=report, lines=PackedLines(stored))


def whole_entry(referrals: Referrals, entry: Entry) -> Entry:
    """``entry`` with what its line left to an earlier receipt; WireError when none is."""
    taken = referrals.take(entry)
    if taken is None:
        receipt = referred(entry) if isinstance(entry, MessageEntry) else ""
        raise WireError(f"message entry {entry.id}: its receipt {receipt} is not an earlier entry")
    return taken


def log_skipped(session: str, number: int, line: bytes, cause: Exception) -> None:
    """Say that salvage skipped a line: a repair is never silent."""
    entry = entry_id_of(line)
    log.warning(
        "session %s: salvage skipped line %d%s: %s",
        session,
        number,
        f" (entry {entry})" if entry else "",
        cause,
    )


def entry_id_of(line: bytes) -> str:
    """The id a line that failed to decode names, when it is JSON with a valid id; else ""."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return ""
    entry_id = obj.get("id") if isinstance(obj, dict) else None
    return entry_id if isinstance(entry_id, str) and valid_id(entry_id) else ""


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
