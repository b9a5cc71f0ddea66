"""The jsonl store's write-ahead log: one durable flush per round, however many sessions wrote.

Under ``fsync = "every_append"`` the writer thread writes each batch to its
session's file as before, but makes it durable by recording it — the file's
name, the offset it was written at, the bytes — in this log, and the round
ends with one write and one ``fsync`` of the log instead of one ``fsync``
per session file. Session files are flushed in bulk at a checkpoint (the
log grew past its limit, or the store closes); the log then starts over.

After a power loss a session file may lack what the log holds. The next
store to open the directory replays every log no live store holds (each log
is locked by its writer with ``flock``): for each record, in order, the bytes
at that offset are compared and written back where they differ, a created
file is made again, a deleted one removed; then the files are flushed and the
log is removed. A record whose file is held by a live writer, or whose offset
lies past the file's end (a gap no earlier record fills), is skipped and
logged — the file's own tail repair then decides, as without a log.

A write that need not outlive a power loss (an append made with
``durable=False``: a send's mark) is recorded too, but written to the log at
once and not flushed (:meth:`WriteAheadLog.write`): the next round's one
flush covers it. It must be in the log, or a later durable write of the same
file, past it, would be a record past the file's end after a power loss;
and it must be written at once, not kept with a later round's records, or
that round failing would cut it back out after its caller heard it landed.

The log's bytes: an 8-byte magic and a 64-bit generation, then records
``magic (2) | length (4) | crc32 of the body (4) | body``, the body being the
generation (8), the operation (1: ``w`` write, ``c`` create, ``d`` delete),
the offset (8), the name's length (2), the name and the data. Past the
records the file holds zeros, laid ahead so that a flush has no new size to
make durable (decision perf-17). Reading stops at the first record that is
short, fails its checksum or belongs to another generation: a torn tail, the
zeros, or what a checkpoint left behind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import logging
import os
import secrets
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import suppress

from threads.store.private import fsync_dir, open_private

log = logging.getLogger(__name__)

Undo = Callable[[list[tuple[bytes, str, int]]], None]
"""Takes a failed round's writes (op, file name, offset), in order, back out of their files."""

PREFIX = ".wal-"
DEFAULT_LIMIT = 64 * 2**20
BULK = 64
ZEROED = 2**20
"""The log is written with zeros this far ahead of its records (see ``_reserve``)."""

_MAGIC = b"weftwal1"
_HEADER = struct.Struct("<8sQ")
_RECORD = struct.Struct("<2sII")
_BODY = struct.Struct("<QcQH")
_RECORD_MAGIC = b"\xa5\x5a"

WRITE, CREATE, DELETE = b"w", b"c", b"d"


class WriteAheadLog:
    """One store's log (writer thread only): records gathered in a round, then one flush.

    ``sync`` is what a round calls (it is a
    :class:`~threads.store.committer.Syncable`): it writes the round's
    records, flushes the log once, and checkpoints when the log has grown past
    ``limit`` bytes.
    """

    def __init__(self, root: str, *, limit: int = DEFAULT_LIMIT, undo: Undo | None = None) -> None:
        self._root = root
        self._limit = limit
        self._undo = undo
        self._path = os.path.join(root, f"{PREFIX}{secrets.token_hex(8)}")
        self._fd = -1
        self._generation = 1
        self._size = 0
        self._zeroed = 0  # the log's bytes up to here exist: records overwrite zeros
        # Records :meth:`write` put at the log's end since its last flush, and whether
        # that flush was refused (see ``_flush``).
        self._written: list[bytes] = []
        self._refused = False
        self._pending: list[bytes] = []
        self._round: list[tuple[bytes, str, int]] = []
        self._unsynced: set[str] = set()

    def open(self) -> None:
        """Create and lock the log; its name is made durable, so a recovery finds it."""
        fd = open_private(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new inode: nobody else has it
        self._fd = fd
        self._start(self._generation)
        fsync_dir(self._root)

    def record(self, op: bytes, name: str, offset: int, data: bytes) -> None:
        """Note a write of ``data`` at ``offset`` of ``name`` (a create, a delete) for this round."""
        self._pending.append(_encode(self._generation, op, name, offset, data))
        self._round.append((op, name, offset))
        if op != DELETE:
            self._unsynced.add(name)

    def write(self, op: bytes, name: str, offset: int, data: bytes) -> bool:
        """Write a record to the log now, without a flush; True if it must wait for the round's.

        The record is in the log (written, not flushed) before this returns:
        it outlives the process, and the next flush makes it durable. A round
        that fails later cuts the log back only to where that round began,
        after this record. When the round already holds records (a durable
        write came first), this one joins them instead, so the log keeps the
        files' order: it is flushed with them and, should the flush fail, taken
        back out with them — then the caller must wait for the round's end
        (True). When the write to the log fails, its own write is taken back
        out of its file and the error raised.

        A log grown past its limit is checkpointed here too, so writes that
        are never followed by a durable one cannot grow it without end.
        """
        if self._pending:
            self.record(op, name, offset, data)
            return True
        record = _encode(self._generation, op, name, offset, data)
        try:
            self._reserve(len(record))
            written = os.pwrite(self._fd, record, self._size)
            if written != len(record):
                raise OSError(
                    errno.ENOSPC, f"short write to the write-ahead log ({written} of {len(record)})"
                )
        except OSError:
            self._cut()
            if self._undo is not None:
                self._undo([(op, name, offset)])
            raise
        self._size += written
        self._written.append(record)
        if op != DELETE:
            self._unsynced.add(name)
        if self._size > self._limit:
            self.checkpoint()
        return False

    def takes(self, name: str, data: bytes) -> bool:
        """Whether :meth:`write` of a record of ``data`` for ``name`` would write that alone:
        no round's records to join, no zeros to lay ahead, no checkpoint after it."""
        end = self._size + _RECORD.size + _BODY.size + len(name) + len(data)
        return not self._pending and end <= self._zeroed and end <= self._limit

    def sync(self) -> None:
        """Write the round's records and flush the log once.

        The flush also makes durable what :meth:`write` wrote before the round.
        When the file system refuses (disk full, an I/O error), the log is cut
        back to where the round began and ``undo`` takes the round's writes
        back out of their files — the callers hear of the failure, so nothing
        of their batches may stay — before the error is raised.
        """
        if not self._pending:
            if self._written:
                self._flush()  # a flush asked for writes made without one
            return
        data = b"".join(self._pending)
        written_round, self._round = self._round, []
        self._pending.clear()
        try:
            self._reserve(len(data))
            written = os.pwrite(self._fd, data, self._size)
            if written != len(data):
                raise OSError(
                    errno.ENOSPC, f"short write to the write-ahead log ({written} of {len(data)})"
                )
            self._flush()
        except OSError:
            self._cut()
            if self._undo is not None:
                self._undo(written_round)
            raise
        self._size += written
        if self._size > self._limit:
            self.checkpoint()

    def _reserve(self, length: int) -> None:
        """Make sure the log's bytes exist (zeros) past ``length`` more bytes of records.

        Writing over bytes the file already has, a flush makes only the data
        durable: no block to allocate, no new size to journal — about half the
        cost of flushing a file that grows (on ext4 here, 75 against 170 µs).
        A reader stops at the zeros as at any record that is not whole.
        """
        end = self._size + length
        if end <= self._zeroed:
            return
        grown = max(end, self._zeroed + ZEROED)
        os.pwrite(self._fd, bytes(grown - self._zeroed), self._zeroed)
        self._zeroed = grown

    def _cut(self) -> None:
        """Cut the log back to its last whole round (a failed write or flush)."""
        with suppress(OSError):
            os.ftruncate(self._fd, self._size)
            self._zeroed = self._size

    def _flush(self) -> None:
        """``fsync`` the log; after a refused one, first write again what :meth:`write` wrote.

        A refused ``fsync`` may leave pages it failed to write marked clean
        (Linux does), so the next one would pass over them: a record lost
        there would hide every later record from a replay. Written again,
        they are flushed again.
        """
        if self._refused and self._written:
            again = b"".join(self._written)
            os.pwrite(self._fd, again, self._size - len(again))
        try:
            os.fsync(self._fd)
        except OSError:
            self._refused = True
            raise
        self._refused = False
        self._written.clear()

    def checkpoint(self) -> None:
        """Flush every file the log covers, then start the log over (a new generation)."""
        flush_files(self._root, self._unsynced)
        self._unsynced.clear()
        self._generation += 1
        self._start(self._generation)

    def close(self) -> None:
        """Checkpoint and remove the log: every file it covered is durable on its own."""
        if self._fd < 0:
            return
        self.sync()
        flush_files(self._root, self._unsynced)
        self._unsynced.clear()
        os.unlink(self._path)
        os.close(self._fd)
        self._fd = -1

    def _start(self, generation: int) -> None:
        os.pwrite(self._fd, _HEADER.pack(_MAGIC, generation), 0)
        os.ftruncate(self._fd, _HEADER.size)
        os.fsync(self._fd)
        self._size = self._zeroed = _HEADER.size
        self._written.clear()
        self._refused = False


def _encode(generation: int, op: bytes, name: str, offset: int, data: bytes) -> bytes:
    raw_name = name.encode()
    body = _BODY.pack(generation, op, offset, len(raw_name)) + raw_name + data
    return _RECORD.pack(_RECORD_MAGIC, len(body), zlib.crc32(body)) + body


def records(data: bytes) -> Iterator[tuple[bytes, str, int, bytes]]:
    """The records of a log's bytes (op, name, offset, data), up to the first that is not whole."""
    if len(data) < _HEADER.size:
        return
    magic, generation = _HEADER.unpack_from(data, 0)
    if magic != _MAGIC:
        return
    at = _HEADER.size
    while at + _RECORD.size <= len(data):
        mark, length, crc = _RECORD.unpack_from(data, at)
        start = at + _RECORD.size
        body = data[start : start + length]
        if mark != _RECORD_MAGIC or len(body) != length or zlib.crc32(body) != crc:
            return
        gen, op, offset, name_length = _BODY.unpack_from(body, 0)
        if gen != generation:
            return
        name_end = _BODY.size + name_length
        yield op, body[_BODY.size : name_end].decode(), offset, body[name_end:]
        at = start + length


def replay_dead_logs(root: str) -> int:
    """Replay and remove every log in ``root`` that no live store holds; how many."""
    replayed = 0
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith(PREFIX))
    except FileNotFoundError:
        return 0
    for name in names:
        path = os.path.join(root, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # its store closed meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live store's log
            data = _read_all(fd)
            touched = {_apply(root, *record) for record in records(data)}
            flush_files(root, touched - {""})
            os.unlink(path)
            fsync_dir(root)
            replayed += 1
        finally:
            os.close(fd)
    return replayed


def _apply(root: str, op: bytes, name: str, offset: int, data: bytes) -> str:
    """Put one record back; the file's name when it was written to, else ""."""
    path = os.path.join(root, name)
    if op == DELETE:
        with suppress(FileNotFoundError):
            os.unlink(path)
        return ""
    flags = os.O_RDWR | (os.O_CREAT if op == CREATE else 0)
    try:
        fd = open_private(path, flags)
    except FileNotFoundError:
        return ""  # deleted after this record (the delete's own record follows)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("write-ahead log: %s is held by a live writer; its record is skipped", name)
            return ""
        size = os.fstat(fd).st_size
        if size < offset:
            log.warning(
                "write-ahead log: %s ends at %d, before the record at %d; skipped",
                name,
                size,
                offset,
            )
            return ""
        if os.pread(fd, len(data), offset) != data:
            os.pwrite(fd, data, offset)
            log.warning("write-ahead log: restored %d bytes of %s at %d", len(data), name, offset)
        return name
    finally:
        os.close(fd)


def flush_files(root: str, names: set[str]) -> None:
    """Make ``names`` (files in ``root``) and the directory's entries durable.

    A few files are fsynced one by one; past :data:`BULK` of them, on Linux,
    one ``syncfs`` flushes the filesystem instead (its cost is the dirty data
    there, not the count of files).
    """
    if len(names) <= BULK or not _syncfs(root):
        for name in names:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_dir(root)


def _syncfs(root: str) -> bool:
    """``syncfs`` on the filesystem holding ``root``; False where there is none."""
    if _SYNCFS is None:
        return False
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _SYNCFS(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"syncfs of {root}: {os.strerror(code)}")
    finally:
        os.close(fd)
    return True


def _find_syncfs() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    with suppress(OSError, AttributeError):
        call: Callable[[int], int] = ctypes.CDLL(name, use_errno=True).syncfs
        return call
    return None


_SYNCFS = _find_syncfs()  # libc's syncfs (Linux), looked up once


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
