"""The jsonl writer's held sessions: locked ``O_APPEND`` descriptors, a bounded set.

A session is held from the writer's first write to it until it is released,
the store closes, or the set evicts it. Holding a session opens its file,
takes the exclusive ``flock`` (:class:`LockedError` for a second writer) and
truncates a torn final line or batch a crashed writer left, before anything
is appended. At most ``max_open`` sessions are held, and never more than
half the soft open-files limit, so readers and the rest of the process keep
descriptors; past that, the least recently used one without a lease is
closed, which lets its lock go.

A leased session keeps its descriptor (its lock lives on it) however many
there are, so the process's open-files limit bounds the live sessions of a
store: :func:`raise_descriptor_limit` lifts the soft limit to the hard one
when a store opens, and at the limit :meth:`Handles.open` first closes held
sessions without a lease, then fails with :func:`descriptor_limit_error`,
which names the limit and what to do.

Everything here but :func:`raise_descriptor_limit` and
:func:`descriptor_limit_error` runs on the store's writer thread.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import resource
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from threads.errors import CorruptError, LockedError, NotFoundError
from threads.store.lines import complete_end
from threads.store.rules import ZERO_TIME

log = logging.getLogger(__name__)

OpenExisting = Callable[[str, int], int]
"""Opens a session's file with the given flags; :class:`NotFoundError` when there is none."""

_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
_NR_OPEN = "/proc/sys/fs/nr_open"


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
            try:
                os.fsync(self.fd)
            except OSError:
                # What the file holds is no longer what this writer counted on: the
                # next append and acquire look at the file again.
                self.size = -1
                self.lines = -1
                raise
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
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft != resource.RLIM_INFINITY:
            max_open = min(max_open, soft // 2)
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
            fd = self.open(session, partial(self._open_existing, session, os.O_RDWR | os.O_APPEND))
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
            self._evict(self._max_open, keep=handle)

    def open(self, session: str, opener: Callable[[], int]) -> int:
        """Run ``opener`` (an ``os.open`` for ``session``) and return its descriptor.

        Out of descriptors (the rest of the process holds more than the
        budget left it), lower the cap on held sessions to three quarters of
        those held — readers need descriptors too — closing the least recently
        used without a lease down to it, and try again; with none left to
        close, raise :func:`descriptor_limit_error`.
        """
        while True:
            try:
                return opener()
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                cap = max(1, len(self._held) * 3 // 4)
                closed = self._evict(cap)
                if not closed:
                    raise descriptor_limit_error(
                        f"session {session}", len(self._held), self.leased()
                    ) from exc
                log.warning(
                    "out of file descriptors opening session %s: closed %d sessions held "
                    "without a lease and lowered the cap on held sessions from %d to %d",
                    session,
                    closed,
                    self._max_open,
                    cap,
                )
                self._max_open = min(self._max_open, cap)

    def _evict(self, cap: int, keep: Handle | None = None) -> int:
        """Close the least recently used sessions without a lease until ``cap`` are held."""
        closed = 0
        for session, held in list(self._held.items()):
            if len(self._held) <= cap:
                break
            if not held.pinned and held is not keep:
                del self._held[session]
                held.close()
                closed += 1
        return closed

    def leased(self) -> int:
        """How many held sessions have a lease (and so are never closed to make room)."""
        return sum(1 for handle in self._held.values() if handle.pinned)

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


def raise_descriptor_limit() -> None:
    """Lift this process's soft open-files limit to its hard limit, and log it.

    A jsonl store keeps one descriptor per held session, and a leased session
    is never closed to make room; the soft limit (often 1024) is a default
    for programs that open few files, not a ceiling the system needs.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else _system_ceiling()
    if soft != resource.RLIM_INFINITY and soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning(
            "could not raise the open-files limit (RLIMIT_NOFILE) from %d to %d: %s; "
            "the jsonl store can hold about %d sessions at once",
            soft,
            target,
            exc,
            soft,
        )
        return
    log.info(
        "raised the open-files limit (RLIMIT_NOFILE) from %d to %d, the hard limit: "
        "the jsonl store keeps a descriptor open for each session it holds",
        soft,
        target,
    )


def descriptor_limit_error(what: str, held: int = -1, leased: int = 0) -> OSError:
    """The error for a descriptor the process may not open: the limit, and what to do.

    ``held`` and ``leased`` count the writer's held sessions (-1: not known,
    as on a reader's thread).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    holding = (
        f"holds {held} sessions open, {leased} of them leased"
        if held >= 0
        else "keeps a descriptor open for each session it holds"
    )
    return OSError(
        errno.EMFILE,
        f"{what}: cannot open a file, this process has reached its open-files limit "
        f"(RLIMIT_NOFILE {_shown(soft)}, hard limit {_shown(hard)}); the jsonl store "
        f"{holding}. Raise the limit (`ulimit -n` before starting, LimitNOFILE= under "
        "systemd, nofile in limits.conf) or close idle sessions so their leases end",
    )


def _system_ceiling() -> int:
    """The most descriptors Linux lets one process have (fs.nr_open); 1 Mi elsewhere."""
    try:
        with open(_NR_OPEN, "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20


def _shown(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)


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
