"""The jsonl writer's held sessions: locked ``O_APPEND`` descriptors, a bounded set.

A session is held from the writer's first write to it until it is released,
the store closes, or the set evicts it. Holding a session opens its file,
takes the exclusive ``flock`` (:class:`LockedError` for a second writer) and
truncates a torn final line or batch a crashed writer left, before anything
is appended. At most ``max_open`` sessions are held; past that, the least
recently used one without a lease is closed, which lets its lock go.

Everything here runs on the store's writer thread.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime

from threads.errors import CorruptError, LockedError, NotFoundError
from threads.store.lines import complete_end
from threads.store.rules import ZERO_TIME

log = logging.getLogger(__name__)

OpenExisting = Callable[[str, int], int]
"""Opens a session's file with the given flags; :class:`NotFoundError` when there is none."""


@dataclass(slots=True, eq=False)
class Handle:
    """A held session: its locked O_APPEND descriptor and what the writer knows of it."""

    session: str
    fd: int
    size: int
    lines: int = -1
    created: datetime = ZERO_TIME
    dirty: bool = False
    pinned: bool = False

    def sync(self) -> None:
        if self.fd >= 0 and self.dirty:
            os.fsync(self.fd)
            self.dirty = False

    def close(self) -> None:
        if self.fd >= 0:
            try:
                self.sync()
            finally:
                os.close(self.fd)
                self.fd = -1


class Handles:
    """The sessions one store's writer holds, least recently used first.

    ``open_existing`` opens a session's file; with ``no_lock`` no ``flock`` is
    taken (the caller re-checks the file before each append instead).
    """

    def __init__(self, open_existing: OpenExisting, *, max_open: int, no_lock: bool) -> None:
        self._open_existing = open_existing
        self._max_open = max(1, max_open)
        self._no_lock = no_lock
        self._held: OrderedDict[str, Handle] = OrderedDict()

    def get(self, session: str) -> Handle | None:
        """The session's handle when it is held; nothing is opened."""
        return self._held.get(session)

    def pop(self, session: str) -> Handle | None:
        """Stop holding the session; the caller closes the handle it gets back."""
        return self._held.pop(session, None)

    def hold(self, session: str) -> Handle:
        """The session's handle, opened, locked and repaired first when it is not held."""
        handle = self._held.get(session)
        if handle is not None:
            self._held.move_to_end(session)
            return handle
        for _ in range(3):
            fd = self._open_existing(session, os.O_RDWR | os.O_APPEND)
            try:
                self.lock(session, fd)
                st = os.fstat(fd)
                if st.st_nlink == 0:
                    os.close(fd)  # deleted (maybe created again) before the lock: reopen
                    continue
                size = repair_tail(session, fd, st.st_size)
            except BaseException:
                with suppress(OSError):
                    os.close(fd)
                raise
            handle = Handle(session, fd, size)
            self.adopt(handle)
            return handle
        raise NotFoundError(session, "deleted while being opened")

    def adopt(self, handle: Handle) -> None:
        """Hold ``handle`` (a session just created or opened); evict past ``max_open``."""
        self._held[handle.session] = handle
        if len(self._held) > self._max_open:
            for session, held in list(self._held.items()):
                if len(self._held) <= self._max_open:
                    break
                if not held.pinned and held is not handle:
                    del self._held[session]
                    held.close()

    def forget(self, handle: Handle) -> None:
        """Drop a handle whose file is gone, closing its descriptor without a sync."""
        self._held.pop(handle.session, None)
        with suppress(OSError):
            os.close(handle.fd)
        handle.fd = -1

    def lock(self, session: str, fd: int) -> None:
        """Take the session's exclusive writer lock on ``fd``; :class:`LockedError` if taken."""
        if self._no_lock:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockedError(session) from None

    def close_all(self) -> list[OSError]:
        """Sync and close every held session; the errors, after trying them all."""
        errors: list[OSError] = []
        for handle in self._held.values():
            try:
                handle.close()
            except OSError as exc:
                errors.append(exc)
        self._held.clear()
        return errors


def repair_tail(session: str, fd: int, size: int) -> int:
    """Truncate a torn final line or batch; return the size of the complete part."""
    if size == 0:
        raise CorruptError(session, 1, "", "the file is empty: the header line is missing")
    window = 65536
    while True:
        start = max(0, size - window)
        tail = os.pread(fd, size - start, start)
        skip = 0
        if start > 0:
            skip = tail.find(b"\n") + 1  # the window's first line may be cut
            if skip == 0:
                window *= 4
                continue
        end = complete_end(tail[skip:])
        if end == 0 and start > 0:
            window *= 4  # the incomplete batch reaches further back
            continue
        cut = start + skip + end
        break
    if cut == size:
        return size
    if cut == 0:
        raise CorruptError(session, 1, "", "the header line is torn")
    os.ftruncate(fd, cut)
    os.fsync(fd)
    log.warning(
        "session %s: removed a torn tail (%d bytes) a crashed writer left", session, size - cut
    )
    return cut
