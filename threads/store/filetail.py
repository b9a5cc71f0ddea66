"""Reading a session file on from a position, sure it is still the same file.

A watcher reads a session file again and again from where it stopped. Between
two reads the session may be deleted and created again under its id, and the
new file's inode number tells nothing: ext4 hands a freed inode to the next
file it creates. So a :class:`FileTail` remembers where the last line it
consumed starts, and that line's first bytes — the header's id and created,
or an entry's id, which no other line of a session repeats — and checks them
before each read. A file with other bytes there, or shorter than the
position, is another file: the read reports a new identity and the watcher
ends with :class:`~threads.errors.NotFoundError`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable

from threads.store.lines import complete_end

_ANCHOR_BYTES = 128


class FileTail:
    """One watcher's reads of one session file.

    ``open_file`` opens the session's file read-only (raising
    :class:`~threads.errors.NotFoundError` when there is none). :meth:`read`
    runs on an executor thread; one watcher calls it once at a time.
    """

    def __init__(self, open_file: Callable[[], int]) -> None:
        self._open_file = open_file
        self._anchor_at = 0
        self._anchor = b""
        self._inode = -1

    def read(self, position: int) -> tuple[Hashable, bytes, int]:
        """The file's identity, the complete lines after ``position`` and the position after them.

        The identity is the inode the first read saw while the file is the one
        read so far, and a fresh object once it is not.
        """
        fd = self._open_file()
        try:
            st = os.fstat(fd)
            if position and not self._same_file(fd, st, position):
                return object(), b"", position
            size = st.st_size - position
            data = pread_all(fd, size, position) if size > 0 else b""
        finally:
            os.close(fd)
        if not position:
            self._inode = st.st_ino
        end = complete_end(data)
        if end:
            start = data.rfind(b"\n", 0, end - 1) + 1
            self._anchor_at = position + start
            self._anchor = data[start : min(end, start + _ANCHOR_BYTES)]
        return self._inode, data[:end], position + end

    def _same_file(self, fd: int, st: os.stat_result, position: int) -> bool:
        if st.st_ino != self._inode or st.st_size < position:
            return False
        return os.pread(fd, len(self._anchor), self._anchor_at) == self._anchor


def pread_all(fd: int, size: int, offset: int = 0) -> bytes:
    """Read ``size`` bytes from ``offset`` (fewer if the file is shorter)."""
    chunks = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        size -= len(chunk)
    if len(chunks) == 1:
        return chunks[0]
    return b"".join(chunks)
