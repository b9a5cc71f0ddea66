"""The jsonl key index: an append-only journal of ``point`` calls, compacted by replace.

``<root>/.keys.jsonl`` holds one ``{"key":…,"session":…}`` line per ``point``;
the last line for a key wins. A store reads it once into a dict, so
``resolve`` is a dict lookup, and ``point`` is one appended line and one
fsync (group-committed with the session appends). When dead lines outnumber
live keys the journal is rewritten to a temporary file and renamed over the
old one. Without a journal — a directory copied without dotfiles, a first
run of an older layout — it is rebuilt from the ``meta["key"]`` the headers
carry, the newest session of each key winning. docs/decisions/store-01-jsonl-key-index.md has the
figures behind this choice.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Mapping
from contextlib import suppress

import orjson

from threads.errors import CorruptError, LockedError
from threads.store.lines import split_torn
from threads.store.private import fsync_dir, open_private, read_private

JOURNAL = ".keys.jsonl"
KEY_INDEX = "(key index)"


def encode_point(key: str, session: str | None) -> bytes:
    """One journal line: the key's current session, or ``null`` when the key is forgotten."""
    return orjson.dumps({"key": key, "session": session}) + b"\n"


def parse_journal(data: bytes, *, salvage: bool) -> tuple[dict[str, str], int]:
    """The key → session map of a journal's bytes, and its count of complete lines."""
    complete, _torn = split_torn(data)
    keys: dict[str, str] = {}
    lines = complete.split(b"\n")[:-1] if complete else []
    for number, line in enumerate(lines, start=1):
        try:
            obj = orjson.loads(line)
            key, session = obj["key"], obj["session"]
            if not isinstance(key, str) or not isinstance(session, str | None):
                raise TypeError("key must be a string and session a string or null")
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            if salvage:
                continue
            raise CorruptError(KEY_INDEX, number, "", str(exc)) from None
        if session is None:
            keys.pop(key, None)
        else:
            keys[key] = session
    return keys, len(lines)


class KeyJournal:
    """The writer's side of the journal: an O_APPEND descriptor under an exclusive flock."""

    def __init__(self, root: str, *, no_lock: bool, salvage: bool) -> None:
        self._root = root
        self._path = os.path.join(root, JOURNAL)
        self._no_lock = no_lock
        self._salvage = salvage
        self.fd = -1
        self.dirty = False
        self.lines = 0
        self.live = 0

    def open(self, seed: Mapping[str, str]) -> None:
        """Open and lock the journal; write ``seed`` when it is new; compact a bloated one."""
        fd = open_private(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            self._lock(fd)
            data = _read_fd(fd)
            complete, torn = split_torn(data)
            if torn:
                os.ftruncate(fd, len(complete))
            keys, self.lines = parse_journal(complete, salvage=self._salvage)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        if not keys and seed:
            keys = dict(seed)
            self.append(b"".join(encode_point(k, s) for k, s in keys.items()), len(keys))
            self.sync()
        self.live = len(keys)
        if self.lines > 2 * self.live + 64:
            self._compact(keys)

    def append(self, data: bytes, lines: int) -> None:
        written = os.write(self.fd, data)
        if written != len(data):
            raise OSError(f"short write to the key index ({written} of {len(data)} bytes)")
        self.lines += lines
        self.dirty = True

    def sync(self) -> None:
        if self.fd >= 0 and self.dirty:
            os.fsync(self.fd)
            self.dirty = False

    def close(self) -> None:
        if self.fd >= 0:
            self.sync()
            os.close(self.fd)
            self.fd = -1

    def _lock(self, fd: int) -> None:
        if self._no_lock:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockedError(KEY_INDEX, "another store over the same directory") from None

    def _compact(self, keys: Mapping[str, str]) -> None:
        tmp = os.path.join(self._root, f".keys.{secrets.token_hex(6)}.tmp")
        fd = open_private(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND)
        try:
            self._lock(fd)
            body = b"".join(encode_point(k, s) for k, s in keys.items())
            os.write(fd, body)
            os.fsync(fd)
            os.rename(tmp, self._path)
            fsync_dir(self._root)
        except BaseException:
            os.close(fd)
            with suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        os.close(self.fd)
        self.fd = fd
        self.lines = len(keys)
        self.live = len(keys)


def read_journal(root: str, *, salvage: bool) -> dict[str, str] | None:
    """The journal's map, or None when the directory has no journal."""
    try:
        data = read_private(os.path.join(root, JOURNAL))
    except FileNotFoundError:
        return None
    return parse_journal(data, salvage=salvage)[0]


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)
