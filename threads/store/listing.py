"""The jsonl backend's view of its directory for ``list``: a header cache kept fresh.

Headers never change once written, so each file's header is read once and
remembered; a ``list`` rescans only the directory when it changed (a session
created or deleted by another process is seen at once). A rescan reads the
directory's names and inode numbers and nothing else: a file whose name and
inode are both remembered is the file that was read, so a create among ten
thousand sessions costs one header read, not ten thousand ``stat`` calls. A
session deleted and created again under its id may be given the freed inode
(ext4 hands it to the next file it creates), so the store's own deletes are
forgotten at once (:meth:`DirectoryListing.forget`); only another process
deleting and creating a session under the same id, on the same inode,
between two scans of this one, goes unseen until it is evicted. Titles are
entry state: they are read, only for a query that searches them, from the
part of each file not yet scanned.
"""

from __future__ import annotations

import bisect
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import BinaryIO

import orjson

from threads.errors import NewerFormatError
from threads.ids import valid_id
from threads.messages import WireError
from threads.store.base import Page, Query
from threads.store.codec import decode_header
from threads.store.entries import Header
from threads.store.private import open_private
from threads.store.rules import created_us, page_of, page_of_sorted

log = logging.getLogger(__name__)

_SETTLED_NS = 2_000_000_000


@dataclass(slots=True, eq=False)
class _Listed:
    """What ``list`` remembers of one session file between calls.

    ``inode`` is the file's as it was when its header line ``line`` was read.
    """

    inode: int
    line: bytes
    header: Header | None
    key: tuple[int, str]
    title_offset: int = 0
    title: str = ""


class DirectoryListing:
    """Headers (and, on demand, titles) of the session files in one directory.

    Safe to call from several executor threads: one lock guards the cache.
    """

    def __init__(self, root: str, suffix: str) -> None:
        self._root = root
        self._suffix = suffix
        self._listed: dict[str, _Listed] = {}  # by file name
        self._keys: list[tuple[int, str]] = []  # ascending list order, readable headers only
        self._headers: list[Header] = []
        self._seen_mtime = -1
        self._scanned_at = 0
        self._refused: set[str] = set()  # names that are not regular files, warned about once
        self._lock = threading.Lock()

    def page(self, query: Query) -> Page:
        """One list page, by the rules every backend shares."""
        with self._lock:
            self._refresh()
            if not query.meta and not query.title_search:
                return page_of_sorted(self._keys, self._headers, query)
            rows = list(zip(self._keys, self._headers, strict=True))
            titles: dict[int, str] = {}
            if query.title_search:
                titles = {
                    id(item.header): self._title(name, item)
                    for name, item in self._listed.items()
                    if item.header is not None
                }
        return page_of(rows, query, lambda h: titles[id(h)])

    def headers(self) -> Iterator[tuple[tuple[int, str], Header]]:
        """Every readable header with its list-order key."""
        with self._lock:
            self._refresh()
            rows = list(zip(self._keys, self._headers, strict=True))
        yield from rows

    def forget(self, session: str) -> None:
        """The store deleted ``session``: whatever is created under its name is read afresh."""
        with self._lock:
            listed = self._listed.pop(session + self._suffix, None)
            if listed is None:
                return
            self._seen_mtime = -1
            at = bisect.bisect_left(self._keys, listed.key)
            if at < len(self._keys) and self._keys[at] == listed.key:
                del self._keys[at]
                del self._headers[at]

    def _refresh(self) -> None:
        """Rescan unless the directory provably has not changed since the last scan.

        A name created or removed changes the directory's mtime; but the clock
        behind it is coarse, so a scan taken within two seconds of the mtime it
        saw proves nothing and the next call scans again.
        """
        mtime = os.stat(self._root).st_mtime_ns
        if mtime == self._seen_mtime and self._scanned_at - mtime > _SETTLED_NS:
            return
        self._scanned_at = time.time_ns()
        self._scan()
        self._seen_mtime = mtime

    def _scan(self) -> None:
        """Refresh the header cache against the directory: new names read, gone ones dropped."""
        old = self._listed
        fresh: dict[str, _Listed] = {}
        suffix = self._suffix
        added: list[_Listed] = []
        replaced = False
        with os.scandir(self._root) as it:
            for item in it:
                name = item.name
                known = old.get(name)
                if known is not None and item.inode() == known.inode:
                    fresh[name] = known
                    continue
                if known is None:
                    if not name.endswith(suffix) or name.startswith("."):
                        continue
                    if not valid_id(name[: -len(suffix)]):
                        continue
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # deleted since the directory was read
                if not stat.S_ISREG(st.st_mode):
                    self._refuse(item.path, st)
                    continue
                session = name[: -len(suffix)]
                line = _read_header_line(item.path)
                if line is None:
                    continue
                header = _decode_header(line)
                key = (created_us(header.created), session) if header else (0, session)
                listed = fresh[name] = _Listed(inode=st.st_ino, line=line, header=header, key=key)
                added.append(listed)
                replaced = replaced or known is not None
        self._listed = fresh
        if not replaced and len(fresh) == len(old) + len(added):
            # Only new files (the usual change: a create): each goes in its place.
            for listed in added:
                if listed.header is not None:
                    at = bisect.bisect(self._keys, listed.key)
                    self._keys.insert(at, listed.key)
                    self._headers.insert(at, listed.header)
            return
        rows = sorted((item.key, item.header) for item in fresh.values() if item.header)
        self._keys = [key for key, _ in rows]
        self._headers = [header for _, header in rows]

    def _refuse(self, path: str, st: os.stat_result) -> None:
        """A name that looks like a session but is a link (or no file): left out, said once."""
        if path in self._refused:
            return
        self._refused.add(path)
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        log.warning("%s is %s; it is left out of the session list and never followed", path, what)

    def _title(self, name: str, item: _Listed) -> str:
        """The session's current title: the last info entry with a non-empty title."""
        try:
            with _open_nofollow(os.path.join(self._root, name)) as f:
                size = os.fstat(f.fileno()).st_size
                if size < item.title_offset:
                    item.title_offset, item.title = 0, ""
                f.seek(item.title_offset)
                data = f.read(size - item.title_offset)
        except FileNotFoundError:
            return item.title
        end = data.rfind(b"\n") + 1
        for line in data[:end].split(b"\n"):
            if b'"type":"info"' in line and b'"title"' in line:
                with suppress(orjson.JSONDecodeError, AttributeError):
                    title = orjson.loads(line).get("title")
                    if isinstance(title, str) and title:
                        item.title = title
        item.title_offset += end
        return item.title


def _read_header_line(path: str) -> bytes | None:
    """The file's first line (b"" when it has none yet), or None when the file is gone."""
    try:
        with _open_nofollow(path) as f:
            data = f.read(4096)
            while b"\n" not in data:
                more = f.read(65536)
                if not more:
                    return b""
                data += more
    except FileNotFoundError:
        return None
    return data[: data.index(b"\n")]


def _open_nofollow(path: str) -> BinaryIO:
    return os.fdopen(open_private(path, os.O_RDONLY), "rb")


def _decode_header(line: bytes) -> Header | None:
    try:
        return decode_header(line)
    except (WireError, ValueError, NewerFormatError):
        return None
