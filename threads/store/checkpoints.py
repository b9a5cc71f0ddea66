"""A session's checkpoint file: what an open derived of its first entries, tied to their bytes.

(Not the write-ahead log's checkpoints, which flush session files: this one
is a cache of an open's work, :mod:`threads.checkpoint`.)

Decision perf-19. A file store keeps, beside ``<id>.jsonl``, one file
``checkpoints/<id>``: a JSON line saying where the checkpoint stands (a
:class:`~threads.store.base.Mark`: how many entries, the byte offset where
they end, the CRC-32 of every byte before it), the lines of the receipts a
later line may still name, and the state the session layer kept (opaque
here; :mod:`threads.checkpoint`). A load reads the session's bytes, checks
that they still begin with exactly the bytes the checkpoint was made from,
and decodes only the lines after them; anything else — no file, a file this
build cannot read, bytes that differ — is a load of every line, as without
a checkpoint. The file is a cache: written without a flush (a torn one fails
its own CRC), never needed, and nothing the previous version reads.
"""

from __future__ import annotations

import logging
import os
import secrets
import zlib
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass

import orjson

from threads.errors import CorruptError
from threads.store.base import Mark, Resumed
from threads.store.lines import complete_end, decode_session
from threads.store.private import make_private_dir, read_private, write_private

log = logging.getLogger(__name__)

FORMAT = 1
"""The checkpoint file's format; a file of any other is read as no checkpoint."""

DIRECTORY = "checkpoints"


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """A checkpoint file as read: where it stands, the receipts' lines, the kept state."""

    mark: Mark
    held: list[bytes]
    state: bytes


def encode_checkpoint(session: str, mark: Mark, state: bytes, held: Sequence[bytes]) -> bytes:
    head = {
        "weft_checkpoint": FORMAT,
        "session": session,
        "entries": mark.entries,
        "offset": mark.offset,
        "crc": mark.crc,
        "held": len(held),
        "state": len(state),
        "state_crc": zlib.crc32(state),
    }
    lines = [line if line.endswith(b"\n") else line + b"\n" for line in held]
    return orjson.dumps(head) + b"\n" + b"".join(lines) + state


def decode_checkpoint(session: str, data: bytes) -> Checkpoint | None:
    """The checkpoint in ``data``, or None when it is not one of ``session`` this build reads whole."""
    end = data.find(b"\n")
    try:
        head = orjson.loads(data[:end]) if end > 0 else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(head, dict) or head.get("weft_checkpoint") != FORMAT:
        return None
    if head.get("session") != session:
        return None
    numbers: list[int] = []
    for name in ("entries", "offset", "crc", "held", "state", "state_crc"):
        value = head.get(name)
        if type(value) is not int or value < 0:
            return None
        numbers.append(value)
    entries, offset, crc, count, size, state_crc = numbers
    start = end + 1
    held = []
    for _ in range(count):
        stop = data.find(b"\n", start)
        if stop < 0:
            return None
        held.append(data[start:stop])
        start = stop + 1
    state = data[start:]
    if len(state) != size or zlib.crc32(state) != state_crc:
        return None
    return Checkpoint(mark=Mark(entries=entries, offset=offset, crc=crc), held=held, state=state)


def read_checkpoint(root: str, session: str) -> Checkpoint | None:
    """The session's checkpoint under ``root``, or None (none, or none this build reads)."""
    try:
        data = read_private(os.path.join(root, DIRECTORY, session))
    except FileNotFoundError:
        return None
    checkpoint = decode_checkpoint(session, data)
    if checkpoint is None:
        log.warning("session %s: its checkpoint cannot be read; reading every line", session)
    return checkpoint


def write_checkpoint(root: str, session: str, data: bytes) -> None:
    """Replace the session's checkpoint file with ``data`` (a fresh name renamed over it)."""
    directory = os.path.join(root, DIRECTORY)
    make_private_dir(directory)
    tmp = os.path.join(directory, f".{session}.{secrets.token_hex(4)}.tmp")
    write_private(os.path.join(directory, session), data, tmp=tmp)


def remove_checkpoint(root: str, session: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(os.path.join(root, DIRECTORY, session))


def resume(
    session: str, data: bytes, checkpoint: Checkpoint | None, *, salvage: bool, due: int
) -> Resumed:
    """The load of a session's bytes ``data`` from ``checkpoint`` when they begin with the
    bytes it was made from, else of every line; with the mark of a new one when due.

    Salvage never reads from a checkpoint and never leaves one: what it skips
    is the session's to repair, not a cache's to remember.
    """
    if salvage:
        return Resumed(loaded=decode_session(session, data, salvage=True))
    header_end = data.find(b"\n") + 1
    if checkpoint is None or not _begins_as(data, checkpoint.mark, header_end):
        loaded = decode_session(session, data)
        end = complete_end(data)
        due_mark = None
        if len(loaded.entries) >= due:
            due_mark = Mark(
                entries=len(loaded.entries), offset=end, crc=zlib.crc32(memoryview(data)[:end])
            )
        return Resumed(loaded=loaded, mark=due_mark)
    mark = checkpoint.mark
    rest = data[mark.offset :]
    try:
        loaded = decode_session(
            session, data[:header_end] + rest, first_line=mark.entries + 2, held=checkpoint.held
        )
    except CorruptError:
        # Whatever the lines after it hold, a load of every line says it as it always did.
        return resume(session, data, None, salvage=False, due=due)
    due_mark = None
    if len(loaded.entries) >= due:
        end = complete_end(rest)
        due_mark = Mark(
            entries=mark.entries + len(loaded.entries),
            offset=mark.offset + end,
            crc=zlib.crc32(memoryview(rest)[:end], mark.crc),
        )
    return Resumed(loaded=loaded, before=mark.entries, state=checkpoint.state, mark=due_mark)


def _begins_as(data: bytes, mark: Mark, header_end: int) -> bool:
    """Whether ``data`` begins with the bytes ``mark`` was made from (and they hold entries)."""
    if not header_end or not header_end < mark.offset <= len(data) or mark.entries <= 0:
        return False
    if data[mark.offset - 1 : mark.offset] != b"\n":
        return False
    return zlib.crc32(memoryview(data)[: mark.offset]) == mark.crc
