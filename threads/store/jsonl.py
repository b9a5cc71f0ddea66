"""The embedded default backend: one JSON-lines file per session (``jsonl://PATH``).

``<root>/<id>.jsonl`` (mode 0600, in a directory of mode 0700) holds the
header line and then one line per entry, readable with ``jq`` and backed up
with ``cp``. Files are opened without following symbolic links, and a root
that is a link is refused (:mod:`threads.store.private`). Writes go through one writer thread per store (the
:class:`~threads.store.committer.Committer`): an append is one ``os.write``
of the whole encoded batch on an ``O_APPEND`` descriptor, and under the
``every_append`` policy the round is recorded in the store's write-ahead log
and that one file is fsynced before any caller hears back
(:mod:`threads.store.wal`: session files are flushed in bulk at checkpoints,
and a dead writer's log is replayed by the next store to open the
directory). An append made with ``durable=False`` is written to its file
and its record to the log at once, but flushed only by the next durable
round. A write the file system refuses (disk full, an I/O error) is
:class:`UnavailableError`, with nothing of its batch left behind. A create
writes the header to a hidden temporary file, makes it durable (an fsync, or
a record in the log) and links it into place, so a session exists whole or
not at all.

The writer lock is an exclusive ``flock`` on the session's descriptor, taken
with the first write (a create is one) and held until ``release`` (or the
close of the store, or the descriptor's eviction from the bounded set of open
files): a second store or process gets :class:`LockedError`. Taking the lock
truncates a torn final line a crashed writer left, before anything is
appended. Reads take nothing and run on the default executor.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import gc
import logging
import os
import secrets
import stat
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from threads.errors import (
    ExistsError,
    NewerFormatError,
    NotFoundError,
    UnavailableError,
    UnsafePathError,
)
from threads.messages import WireError
from threads.store.base import Loaded, Mark, Page, Pause, Query, Resumed, StoreOptions
from threads.store.checkpoints import DIRECTORY as CHECKPOINTS
from threads.store.checkpoints import (
    encode_checkpoint,
    read_checkpoint,
    remove_checkpoint,
    resume,
    write_checkpoint,
)
from threads.store.codec import decode_header, encode_header
from threads.store.committer import Committer, Op, Round
from threads.store.entries import Entry, Header
from threads.store.filetail import FileTail, pread_all
from threads.store.handles import (
    Handle,
    Handles,
    descriptor_limit_error,
    raise_descriptor_limit,
    repair_tail,
)
from threads.store.keyfile import JOURNAL, KeyJournal, encode_point, read_journal
from threads.store.leases import Leases
from threads.store.lines import decode_session, encode_lines
from threads.store.listing import DirectoryListing
from threads.store.private import fsync_dir, make_private_dir, open_private
from threads.store.rules import ZERO_TIME, check_header, check_id
from threads.store.wal import CREATE, DEFAULT_LIMIT, DELETE, WRITE, WriteAheadLog, replay_dead_logs
from threads.store.watching import Pulse, tail

T = TypeVar("T")

log = logging.getLogger(__name__)

SUFFIX = ".jsonl"
LINGER = 0.003
"""How long a busy round of the write-ahead log waits for more writers (decision perf-15)."""
_STALE_TEMP_SECONDS = 600.0
_COUNT_FROM = 1 << 20
"""A file this large has its lines counted where an open read it, not again by its lease."""


class JsonlStore:
    """A Storage, KeyIndex, Watcher, Flusher, Releaser, Leaser and Checkpointer over a directory."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        options: StoreOptions | None = None,
        *,
        max_open: int = 512,
        poll_interval: float = 0.05,
        pause: Pause | None = None,
        wal_limit: int = DEFAULT_LIMIT,
    ) -> None:
        """Open a store over ``root`` (created on first use).

        ``max_open`` bounds the sessions held open (never more than half the
        soft open-files limit); past it the least recently used without a
        lease is closed (and so released). A leased session keeps its
        descriptor, so opening a store raises the process's soft open-files
        limit to its hard limit (logged).
        ``poll_interval`` is how often a watcher looks for another process's
        appends. ``pause`` is a test seam, called on the writer thread (where
        it may block, and must return None) at ``"append:started"`` (the
        writer has begun an append: it will be written whole),
        ``"create:written"`` (header durable in the temporary file, not yet
        linked) and ``"append:half-written"`` (half of the batch written), so
        a test can cancel a caller or kill the process inside those windows.
        ``wal_limit`` is the size past which the write-ahead log is checkpointed.
        """
        raise_descriptor_limit()
        self._root = os.fspath(root)
        self._options = options or StoreOptions()
        self._every = self._options.fsync == "every_append"
        self._poll = poll_interval
        self._pause = pause
        # Under every_append a locking store makes its writes durable through one shared
        # log, flushed once per round (threads/store/wal.py). It and the handles are the
        # writer thread's, or the event loop's in append_at_once while the writer is idle.
        self._wal: WriteAheadLog | None = None
        self._logged = self._every and not self._options.no_lock
        self._committer = Committer(
            f"jsonl-writer:{os.path.basename(self._root)}",
            parallel_syncs=8,
            linger=LINGER if self._logged else 0.0,  # busy rounds share the log's one flush
            errors=self._refusal,
        )
        self._handles = Handles(  # as the log
            self._open_existing, max_open=max_open, no_lock=self._options.no_lock
        )
        self._journal: KeyJournal | None = None  # writer thread only
        self._wal_limit = wal_limit
        self._recovered = False
        self._leases = Leases()
        self._pulse = Pulse()
        self._listing = DirectoryListing(self._root, SUFFIX)
        self._keys: dict[str, str] | None = None
        self._key_seed: dict[str, str] = {}
        # A long session's line count as its open read it, for the first write's lease
        # (which would read the whole file again on the writer thread): session ->
        # (inode, size, lines, created). Taken by that acquire; a differing file is read.
        self._counted: dict[str, tuple[int, int, int, datetime]] = {}
        self._keys_loading: asyncio.Lock | None = None
        self._root_ready = False

    # -- Storage

    async def create(self, header: Header, *, durable: bool = True) -> None:
        check_header(header)
        line = encode_header(header)
        await self._write(partial(self._w_create, header, line, durable))
        self._pulse.fire()

    async def append(
        self, session: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> list[bytes]:
        check_id(session)
        lines = encode_lines(entries)
        await self._write(self._appending(session, lines, durable))
        self._pulse.fire()
        return lines

    def append_queued(
        self, session: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> asyncio.Future[Sequence[bytes] | None] | None:
        """:meth:`append` begun here and now (see :class:`~threads.store.base.Queued`); None
        until the store's first write has replayed what a stopped writer left."""
        if not self._recovered:
            return None
        check_id(session)
        lines = encode_lines(entries)
        landed = self._committer.submit(
            partial(_then, self._appending(session, lines, durable), lines)
        )
        landed.add_done_callback(self._fired)
        return landed

    def append_at_once(
        self, session: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> list[bytes] | None:
        """:meth:`append` made without a flush (``durable=False``: a send's mark, a prompt
        whose flush comes with its turn's), done here and now on the event loop's thread.

        Such a write is a ``write`` to the session's file and a ``pwrite`` of
        its record to the log, some 10 µs; through the writer thread it waits
        for two hops (:meth:`Committer.run_here`). So when the writer is idle
        and the write is only that — the session's file held and whole, the
        log with room for the record — the loop makes it itself. None, having
        done nothing, otherwise (a durable write, a test pause): the caller
        then appends as usual.
        """
        if durable or not self._recovered or self._pause is not None:
            return None
        check_id(session)
        lines: list[bytes] = []

        def write(rnd: Round, op: Op[bool]) -> bool:
            handle = self._handles.get(session)
            if handle is None or handle.size < 0 or self._options.no_lock:
                return False  # its file is to open or check first: the writer's work
            lines.extend(encode_lines(entries))
            data = b"".join(lines)
            if self._logged and (self._wal is None or not self._wal.takes(session + SUFFIX, data)):
                return False
            self._w_append(session, data, len(lines), False, rnd, op)
            return True

        if not self._committer.run_here(write):
            return None
        self._pulse.fire()
        return lines

    def _fired(self, _landed: asyncio.Future[Sequence[bytes] | None]) -> None:
        self._pulse.fire()

    def _appending(
        self, session: str, lines: list[bytes], durable: bool
    ) -> Callable[[Round, Op[Any]], None]:
        """The writer thread's append of ``lines`` (one entry each) to ``session``."""
        return partial(self._w_append, session, b"".join(lines), len(lines), durable)

    async def load(self, session: str) -> Loaded:
        check_id(session)
        await self._ready()
        return await self._off_loop(self._load_sync, session)

    async def load_resumed(self, session: str, *, due: int, whole: bool = False) -> Resumed:
        check_id(session)
        await self._ready()
        return await self._off_loop(self._resume_sync, session, due, whole)

    async def save_checkpoint(
        self, session: str, mark: Mark, state: bytes, held: Sequence[bytes] = ()
    ) -> None:
        check_id(session)
        data = encode_checkpoint(session, mark, state, held)
        await self._off_loop(write_checkpoint, self._root, session, data)

    async def list(self, query: Query | None = None) -> Page:
        await self._ready()
        return await self._off_loop(self._list_sync, query or Query())

    async def delete(self, session: str) -> None:
        check_id(session)
        await self._ready()
        await self._committer.run(partial(self._w_delete, session))
        self._listing.forget(session)
        self._leases.drop(session)
        self._pulse.fire()

    async def close(self) -> None:
        """Flush and close every held session and the key index; the store is done."""
        self._leases.clear()
        try:
            await self._committer.run(self._w_close_all, cancellable=False)
        except RuntimeError:
            return  # already closed
        finally:
            await self._committer.stop()

    # -- KeyIndex

    async def resolve(self, key: str) -> str | None:
        return (await self._key_map()).get(key)

    async def point(self, key: str, session_id: str, *, durable: bool = True) -> None:
        check_id(session_id)
        keys = await self._key_map()
        await self._write(partial(self._w_point, key, session_id, durable))
        keys[key] = session_id

    async def unpoint(self, key: str) -> None:
        keys = await self._key_map()
        if key not in keys:
            return
        await self._write(partial(self._w_point, key, None, True))
        keys.pop(key, None)

    async def keys(self) -> dict[str, str]:
        return dict(await self._key_map())

    # -- capabilities

    async def flush(self, session: str) -> None:
        check_id(session)
        await self._write(partial(self._w_flush, session))

    async def flush_soon(self, session: str, within: float) -> None:
        check_id(session)
        await self._write(partial(self._w_flush, session), within=within)

    async def release(self, session: str) -> None:
        check_id(session)
        await self._committer.run(partial(self._w_release, session))
        self._leases.drop(session)

    async def acquire(self, session: str, holder: object) -> tuple[int, datetime]:
        check_id(session)
        self._leases.check(session, holder)
        await self._ready()
        count, created = await self._committer.run(partial(self._w_acquire, session))
        self._leases.check(session, holder)
        self._leases.take(session, holder)
        return count, created

    async def yield_lease(self, session: str, holder: object) -> None:
        check_id(session)
        if self._leases.may_yield(session, holder):
            await self.release(session)
        else:
            await self._off_loop(self._must_exist, session)

    async def watch(self, session: str, after: str = "") -> AsyncIterator[Entry]:
        check_id(session)
        await self._ready()
        reader = FileTail(partial(self._open_for_read, session))
        stream = tail(
            session,
            after,
            partial(self._off_loop, reader.read),
            self._pulse,
            salvage=self._options.salvage,
            poll_interval=self._poll,
        )
        async for entry in stream:
            yield entry

    # -- test hooks

    async def inject(self, session: str, data: bytes) -> None:
        """Append raw bytes to a session's file, as a damaged disk or a crash leaves them."""
        check_id(session)

        def write(rnd: Round, op: Op[None]) -> None:
            fd = self._open_existing(session, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            held = self._handles.get(session)
            if held is not None:
                held.size = -1  # the next append re-checks the tail

        await self._committer.run(write)
        self._pulse.fire()

    async def plant(self, session: str, data: bytes) -> None:
        """Store raw bytes as a whole session file, header line included."""
        check_id(session)

        def write() -> None:
            self._ensure_root()
            path = self._path(session)
            fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

        await self._off_loop(write)

    def where(self, session: str) -> str:
        """Where the session is kept: its file."""
        return self._path(session)

    async def _write(self, fn: Callable[[Round, Op[T]], T], *, within: float = 0.0) -> T:
        """Run a write on the writer thread; a file system refusal is the store's.

        A write, an fsync or an open the file system refuses (disk full, a
        quota, an I/O error) is :class:`UnavailableError`: nothing of the
        batch stays behind (see ``_w_append``), and the same call succeeds
        once the file system takes writes again. Running out of descriptors
        stays the ``OSError`` that names the limit and what to do.
        """
        await self._ready()
        return await self._committer.run(fn, within=within)

    def _refusal(self, error: BaseException) -> BaseException:
        """What a caller hears for a write's error: a file system refusal is the store's
        :class:`UnavailableError`; running out of descriptors stays the ``OSError``."""
        if not isinstance(error, OSError) or error.errno in (errno.EMFILE, errno.ENFILE):
            return error
        refusal = UnavailableError(self._root, error.strerror or str(error))
        refusal.__cause__ = error
        return refusal

    # -- the writer thread's operations

    def _w_create(
        self, header: Header, line: bytes, durable: bool, rnd: Round, op: Op[Any]
    ) -> None:
        self._ensure_root()
        path = self._path(header.id)
        if os.path.lexists(path):
            raise ExistsError(header.id)
        tmp = os.path.join(self._root, f".{header.id}.{secrets.token_hex(6)}.tmp")
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND
        fd = self._handles.open(header.id, partial(open_private, tmp, flags))
        try:
            if not self._options.no_lock:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new inode: nobody else has it
            _write_all(fd, line)
            if self._every and not self._logged:
                os.fsync(fd)
            self._paused("create:written")
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise ExistsError(header.id) from None
        except BaseException:
            os.close(fd)
            raise
        finally:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
        handle = Handle(header.id, fd, len(line), lines=0, created=header.created)
        self._handles.adopt(handle)
        if self._logged:
            self._record(rnd, op, durable, CREATE, header.id + SUFFIX, 0, line)
        elif self._every:
            fsync_dir(self._root)

    def _w_append(
        self, session: str, data: bytes, count: int, durable: bool, rnd: Round, op: Op[Any]
    ) -> None:
        self._paused("append:started")
        handle = self._handles.hold(session)
        if not data:
            return
        fd = handle.fd
        if self._options.no_lock or handle.size < 0:
            # Without the lock, others may have written or deleted behind this
            # writer's back: re-check the file before joining its tail.
            st = os.fstat(fd)
            if st.st_nlink == 0:
                self._handles.forget(handle)
                raise NotFoundError(session, "deleted by another writer")
            if st.st_size != handle.size:
                handle.size = repair_tail(session, fd, st.st_size)
                handle.lines = -1
        try:
            if self._pause is not None:
                half = len(data) // 2
                _write_all(fd, data[:half])
                self._paused("append:half-written")
                _write_all(fd, data[half:])
            else:
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(f"short write ({written} of {len(data)} bytes)")
        except BaseException:
            # Never leave a partial batch behind a live writer: cut back to the last
            # complete line so the batch is all or nothing.
            with suppress(OSError):
                os.ftruncate(fd, handle.size)
            raise
        offset = handle.size
        handle.size += len(data)
        if handle.lines >= 0:
            handle.lines += count
        if self._logged:
            self._record(rnd, op, durable, WRITE, session + SUFFIX, offset, data)
            return
        handle.dirty = True
        if self._every and durable:
            rnd.sync(handle, op)

    def _w_acquire(self, session: str, rnd: Round, op: Op[Any]) -> tuple[int, datetime]:
        handle = self._handles.hold(session)
        handle.pinned = True
        counted = self._counted.pop(session, None)
        if (
            handle.lines < 0
            and counted is not None
            and counted[:2] == (os.fstat(handle.fd).st_ino, handle.size)
        ):
            handle.lines, handle.created = counted[2], counted[3]
        if handle.lines < 0:
            if handle.size < 0:  # a failed write or flush: count what the file holds now
                handle.size = repair_tail(session, handle.fd, os.fstat(handle.fd).st_size)
            data = pread_all(handle.fd, handle.size)
            handle.lines = max(data.count(b"\n") - 1, 0)
            end = data.find(b"\n")
            try:
                handle.created = decode_header(data[:end]).created
            except (WireError, ValueError, NewerFormatError):
                handle.created = ZERO_TIME
        return handle.lines, handle.created

    def _w_release(self, session: str, rnd: Round, op: Op[Any]) -> None:
        handle = self._handles.pop(session)
        if handle is None:
            self._must_exist(session)
            return
        handle.close()

    def _w_flush(self, session: str, rnd: Round, op: Op[Any]) -> None:
        handle = self._handles.get(session)
        if handle is None:
            self._must_exist(session)
            return
        if self._logged:
            self._log(rnd, op)  # what the log holds is durable at the round's end
            return
        rnd.sync(handle, op)

    def _w_delete(self, session: str, rnd: Round, op: Op[Any]) -> None:
        path = self._path(session)
        handle = self._handles.pop(session)
        if handle is not None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                raise NotFoundError(session) from None
            finally:
                os.close(handle.fd)
                handle.fd = -1
        else:
            fd = self._open_existing(session, os.O_RDONLY)
            try:
                self._handles.lock(session, fd)
                if os.fstat(fd).st_nlink == 0:
                    raise NotFoundError(session)
                os.unlink(path)
            finally:
                os.close(fd)
        remove_checkpoint(self._root, session)
        if self._logged:
            self._log(rnd, op).record(DELETE, session + SUFFIX, 0, b"")
        elif self._every:
            fsync_dir(self._root)

    def _w_point(
        self, key: str, session: str | None, durable: bool, rnd: Round, op: Op[Any]
    ) -> None:
        journal = self._journal
        if journal is None:
            self._ensure_root()
            journal = KeyJournal(
                self._root, no_lock=self._options.no_lock, salvage=self._options.salvage
            )
            journal.open(self._key_seed)
            self._journal = journal
        line = encode_point(key, session)
        offset = journal.append(line, 1)
        if self._logged:  # CREATE: the journal is made again if a power loss took it
            self._record(rnd, op, durable, CREATE, JOURNAL, offset, line)
        elif self._every:
            rnd.sync(journal, op)

    def _w_close_all(self, rnd: Round, op: Op[Any]) -> None:
        errors = self._handles.close_all()
        if self._journal is not None:
            try:
                self._journal.close()
            except OSError as exc:
                errors.append(exc)
            self._journal = None
        if self._wal is not None and not errors:
            # Every file the log covers is flushed on its own; then the log goes.
            try:
                self._wal.close()
            except OSError as exc:
                errors.append(exc)
            self._wal = None
        if errors:
            raise errors[0]

    def _record(
        self,
        rnd: Round,
        op: Op[Any],
        durable: bool,
        kind: bytes,
        name: str,
        offset: int,
        data: bytes,
    ) -> None:
        """Record a write in the log: flushed by this round, or (``durable=False``) by a later one."""
        if durable:
            self._log(rnd, op).record(kind, name, offset, data)
            return
        wal = self._open_log()
        if wal.write(kind, name, offset, data):
            rnd.sync(wal, op)  # it joined a durable write's round: it waits for its flush

    def _log(self, rnd: Round, op: Op[Any]) -> WriteAheadLog:
        """The store's log; the round flushes it before ``op`` returns."""
        wal = self._open_log()
        rnd.sync(wal, op)
        return wal

    def _open_log(self) -> WriteAheadLog:
        """The store's log, opened on first use."""
        wal = self._wal
        if wal is None:
            self._ensure_root()
            wal = WriteAheadLog(self._root, limit=self._wal_limit, undo=self._w_undo)
            wal.open()
            self._wal = wal
        return wal

    def _w_undo(self, writes: Sequence[tuple[bytes, str, int]]) -> None:
        """A round whose log flush failed: cut its writes back out of their files.

        A batch is cut back to where it began (its held session then checks its
        file again before its next append); a session this round created is
        removed; a key index line is cut like a batch.
        """
        for op, name, offset in reversed(writes):
            path = os.path.join(self._root, name)
            session = name.removesuffix(SUFFIX)
            with suppress(OSError):
                if op == CREATE and name != JOURNAL:
                    handle = self._handles.pop(session)
                    if handle is not None:
                        self._handles.forget(handle)
                    os.unlink(path)
                elif op != DELETE:
                    os.truncate(path, offset)
                    held = self._handles.get(session)
                    if held is not None:
                        held.size = -1
                        held.lines = -1
            if name == JOURNAL and self._journal is not None:
                self._journal.size = offset

    async def _ready(self) -> None:
        """Before the store's first read or write: replay the logs a dead writer left."""
        if not self._recovered:
            await self._committer.run(self._w_recover, cancellable=False)

    def _w_recover(self, rnd: Round, op: Op[Any]) -> None:
        if self._recovered:
            return
        self._recovered = True
        if self._options.no_lock:
            return  # a store that takes no locks (a reader) leaves the logs to a writer
        if self._root_exists():
            replayed = replay_dead_logs(self._root)
            if replayed:
                log.warning(
                    "%s: replayed %d write-ahead log(s) a stopped writer left", self._root, replayed
                )
        if self._logged:
            self._open_log()  # its own flushes now, not in the first write's round

    # -- reads (executor threads)

    def _load_sync(self, session: str) -> Loaded:
        data = self._read_sync(session)
        with _collector_off():
            return decode_session(session, data, salvage=self._options.salvage)

    def _resume_sync(self, session: str, due: int, whole: bool) -> Resumed:
        salvage = self._options.salvage
        checkpoint = None if whole or salvage else read_checkpoint(self._root, session)
        fd = self._open_for_read(session)
        try:
            st = os.fstat(fd)
            data = pread_all(fd, st.st_size)
        finally:
            os.close(fd)
        with _collector_off():
            resumed = resume(session, data, checkpoint, salvage=salvage, due=due)
        if len(data) >= _COUNT_FROM and len(data) == st.st_size:
            count = max(data.count(b"\n") - 1, 0)
            self._counted[session] = (st.st_ino, len(data), count, resumed.loaded.header.created)
        return resumed

    def _read_sync(self, session: str) -> bytes:
        fd = self._open_for_read(session)
        try:
            return pread_all(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    def _list_sync(self, query: Query) -> Page:
        if not self._root_exists():
            return Page(sessions=[], total=0)
        try:
            return self._listing.page(query)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                raise descriptor_limit_error(f"listing the sessions in {self._root}") from exc
            raise

    async def _key_map(self) -> dict[str, str]:
        if self._keys is not None:
            return self._keys
        await self._ready()
        if self._keys_loading is None:
            self._keys_loading = asyncio.Lock()
        async with self._keys_loading:
            if self._keys is None:
                self._keys = await self._off_loop(self._load_keys)
        return self._keys

    def _load_keys(self) -> dict[str, str]:
        if not self._root_exists():
            return {}
        keys = read_journal(self._root, salvage=self._options.salvage)
        if keys is not None:
            return keys
        # No journal: rebuild from the keys the headers carry, newest session winning.
        newest: dict[str, tuple[tuple[int, str], str]] = {}
        for order, header in self._listing.headers():
            key = header.meta.get("key")
            if key and (key not in newest or order > newest[key][0]):
                newest[key] = (order, header.id)
        self._key_seed = {key: session for key, (_, session) in newest.items()}
        return dict(self._key_seed)

    # -- files

    def _path(self, session: str) -> str:
        return os.path.join(self._root, session + SUFFIX)

    def _open_existing(self, session: str, flags: int) -> int:
        try:
            return open_private(self._path(session), flags)
        except FileNotFoundError:
            raise NotFoundError(session) from None

    def _open_for_read(self, session: str) -> int:
        """A reader's descriptor of the session's file (any thread)."""
        try:
            return self._open_existing(session, os.O_RDONLY)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                raise descriptor_limit_error(f"session {session}") from exc
            raise

    def _paused(self, point: str) -> None:
        if self._pause is not None and self._pause(point) is not None:
            raise TypeError(
                f"the jsonl store's pause seam returned a value at {point!r}: it runs on the "
                "writer thread, so it blocks there and returns None"
            )

    def _must_exist(self, session: str) -> None:
        if not os.path.lexists(self._path(session)):
            raise NotFoundError(session)

    def _root_exists(self) -> bool:
        """Whether the root exists yet; a root that is a link is refused, not followed."""
        try:
            st = os.lstat(self._root)
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(
                self._root, "is a symbolic link; point the store at the real directory"
            )
        return stat.S_ISDIR(st.st_mode)

    def _ensure_root(self) -> None:
        if self._root_ready:
            return
        if not self._root_exists():
            make_private_dir(self._root)
        else:
            self._sweep_temporaries()
        self._root_ready = True

    def _sweep_temporaries(self) -> None:
        """Remove temporary files a create or a checkpoint's write killed mid-way left
        (old ones only: a writer in another process may be using a fresh one)."""
        cutoff = time.time() - _STALE_TEMP_SECONDS
        for directory in (self._root, os.path.join(self._root, CHECKPOINTS)):
            with suppress(FileNotFoundError), os.scandir(directory) as it:
                for item in it:
                    if item.name.startswith(".") and item.name.endswith(".tmp"):
                        with suppress(OSError):
                            if item.stat().st_mtime < cutoff:
                                os.unlink(item.path)

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


@contextmanager
def _collector_off() -> Iterator[None]:
    """A load makes many young objects and no cycles: no collection while it decodes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _then(
    write: Callable[[Round, Op[Any]], None], lines: list[bytes], rnd: Round, op: Op[Any]
) -> list[bytes]:
    """``write``, then ``lines`` as its result (a queued append's, on the writer thread)."""
    write(rnd, op)
    return lines
