"""The storage port: what every session backend implements, and its small capabilities.

``Storage`` is create / append / load / list / delete (seed 003 "Storage").
``KeyIndex`` maps session keys to the current session id of each key. The
optional capabilities — ``Watcher``, ``Flusher``, ``Releaser``, ``Leaser``,
``Pinger``, ``Locator``, ``Fencer``, ``Checkpointer`` — are separate protocols a backend may
also satisfy, found with ``isinstance``.

Rules every backend keeps (the conformance suite pins them):

* ids are vetted with :func:`threads.ids.valid_id` on every method;
* an append batch is encoded whole before anything is written — an entry
  the format could not read back refuses the whole batch with
  :class:`ValueError` naming the entry and the field — and after a crash a
  load sees all of the batch or none of it;
* what ``load`` returns never aliases what is stored;
* one writer per session: a second Storage value or process gets
  :class:`LockedError`; readers never lock;
* a store applies its writes to one session in the order they were called;
* cancellation: a call cancelled before the backend starts it writes
  nothing; once started it runs to its end — an append's batch is written
  whole — and the caller still sees ``CancelledError``. A file backend
  starts a call when its writer thread takes it from the queue (jsonl,
  sqlite); memory and redis when the store's earlier writes to the session
  are done (their started write runs on in a task of its own). A caller that
  must know whether a cancelled append landed loads the session.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from threads.store.entries import Entry, Header

if TYPE_CHECKING:
    from threads.node import NodeIdentity

LIST_DEFAULT_LIMIT = 50
LIST_MAX_LIMIT = 500

FsyncPolicy = Literal["every_append", "on_flush"]

Pause = Callable[[str], Awaitable[None] | None]
"""A test seam every backend takes: called at named points inside a write.

Every backend calls it at ``"append:started"``, once the append is started
(see the cancellation rule above). jsonl and sqlite call it on their writer
thread, where it may block to hold the write, and it returns None; memory and
redis call it on the event loop, and an awaitable it returns is awaited by the
started write. Tests use it to cancel a caller, or to hold a write, at a
known point; production code leaves it None.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreOptions:
    """The open options every backend accepts.

    ``salvage`` skips malformed lines (reported) instead of failing the load;
    ``fsync`` is ``every_append`` (durable when append returns) or ``on_flush``;
    ``no_lock`` turns off the cross-process writer lock (tests, read-only tools);
    ``node`` names the process in the locks a shared backend (Redis, SQLite)
    takes, so a later boot of the same node takes over the locks an earlier
    one left (:mod:`threads.node`). Without it a lock names a random owner,
    which only its lapse or its process's death frees.
    """

    salvage: bool = False
    fsync: FsyncPolicy = "every_append"
    no_lock: bool = False
    node: NodeIdentity | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadReport:
    """What a load dropped or skipped; a repair is never silent.

    ``torn`` is the 1-based line number of a dropped incomplete final line (0:
    none); ``skipped`` the malformed lines skipped under salvage.
    """

    torn: int = 0
    skipped: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.torn or self.skipped)


@dataclass(frozen=True, slots=True, kw_only=True)
class Loaded:
    """One loaded session: its header, its entries in append order, and the report.

    ``lines`` are the stored lines the entries were decoded from, one each, when
    the backend has them (a session keeps them rather than the decoded values:
    :mod:`threads.entry_log`); empty otherwise.
    """

    header: Header
    entries: list[Entry]
    report: LoadReport | None = None
    lines: Sequence[bytes] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Query:
    """Selects sessions for ``list``.

    The cursor is a keyset over the list order (created descending, ties by id
    descending): pass the last session of the previous page as ``before`` and
    ``before_id``. ``before`` alone returns sessions strictly older. ``limit``
    0 (or negative) means 50 and is capped at 500. ``meta`` pairs must all match
    the header exactly; ``title_search`` matches the current title (the last
    non-empty info title) case-insensitively as a substring.
    """

    before: datetime | None = None
    before_id: str = ""
    limit: int = 0
    meta: Mapping[str, str] = field(default_factory=dict)
    title_search: str = ""

    @property
    def page_size(self) -> int:
        if self.limit <= 0:
            return LIST_DEFAULT_LIMIT
        return min(self.limit, LIST_MAX_LIMIT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """One list result: headers newest first, and how many sessions match in all."""

    sessions: list[Header]
    total: int


@runtime_checkable
class Storage(Protocol):
    """A session backend."""

    async def create(self, header: Header, *, durable: bool = True) -> None:
        """Write a new session's header; :class:`ExistsError` if the id is taken.

        ``durable=False`` asks less, as of :meth:`append`: the session exists
        (it outlives the process) but a power loss may take it until the
        store's next durable write or flush.
        """
        ...

    async def append(
        self, session: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> Sequence[bytes] | None:
        """Append a batch, atomically against the writer's death; the lines it was stored as.

        The lines are one per entry, in order, each with its newline: what a
        load reads back as :attr:`Loaded.lines`. A session keeps them rather
        than the values (:mod:`threads.entry_log`); a backend that does not
        encode lines itself returns None, and the session keeps the values.

        ``durable=False`` asks less of an ``every_append`` store: the batch
        has reached the operating system when the call returns (it outlives
        the process) but may be lost to a power loss until the store's next
        durable append or flush — never reordered after a later append of the
        session. A backend may keep such an append durable; under
        ``on_flush`` the two are the same.

        :class:`ValueError` (nothing written) when an entry of the batch is one
        the format could not read back; :class:`NotFoundError`,
        :class:`LockedError` as the session and its writer lock decide.
        """
        ...

    async def load(self, session: str) -> Loaded:
        """The header, every entry in append order, and the load report."""
        ...

    async def list(self, query: Query | None = None) -> Page:
        """A page of headers (never entries), newest first."""
        ...

    async def delete(self, session: str) -> None:
        """Remove a session and its entries; history is otherwise forever."""
        ...

    async def close(self) -> None:
        """Flush, release every hold and free the backend's resources."""
        ...


@runtime_checkable
class KeyIndex(Protocol):
    """Session key → current session id, answered without scanning sessions."""

    async def resolve(self, key: str) -> str | None:
        """The current session id of ``key``, or None when the key has none."""
        ...

    async def point(self, key: str, session_id: str, *, durable: bool = True) -> None:
        """Make ``session_id`` the key's current session (first contact, ``/new``).

        ``durable=False`` asks less, as of :meth:`Storage.append`.
        """
        ...

    async def unpoint(self, key: str) -> None:
        """Forget the key (its sessions stay); a key with no session is left as it is."""
        ...

    async def keys(self) -> dict[str, str]:
        """Every key with its current session id."""
        ...


class SessionStore(Storage, KeyIndex, Protocol):
    """What the runtime is handed: a Storage that also indexes keys."""


@runtime_checkable
class Watcher(Protocol):
    """Tails a session: the backlog after ``after``, then each new entry once.

    A torn tail (a write in flight) is yielded once complete, never half. The
    stream ends with :class:`NotFoundError` when the session is missing, or is
    deleted (or deleted and created again) under the watcher; with
    :class:`NoEntryError` when ``after`` names no entry of the session; and
    with :class:`CorruptError` / :class:`NewerFormatError` on data it cannot
    decode. Writes of another store or process are seen within the backend's
    poll interval; this store's own at once.
    """

    def watch(self, session: str, after: str = "") -> AsyncIterator[Entry]: ...


@runtime_checkable
class Flusher(Protocol):
    """Completes buffered durability work (the ``on_flush`` fsync policy)."""

    async def flush(self, session: str) -> None: ...


@runtime_checkable
class AtOnce(Protocol):
    """Appends that land without waiting when nothing is ahead of them (an in-memory store;
    a file store's writes made without a flush).

    ``append_at_once`` is :meth:`Storage.append` done here and now, returning
    the lines; or None, having done nothing, when the write would have to wait
    its turn (another write of the session started or waiting, a test pause,
    a durable write to a store whose flushes are its writer thread's):
    then the caller awaits ``append``. A caller saves the task it would run
    the append in, and a file store the hops to its writer thread and back.
    """

    def append_at_once(
        self, session: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> list[bytes] | None: ...


@runtime_checkable
class Queued(Protocol):
    """Appends begun at once, each settled by a future the store hands back (a store with a
    writer thread).

    ``append_queued`` is :meth:`Storage.append` begun here and now: the future
    settles as ``append`` would return or raise, and the write runs to its end
    whatever becomes of the caller. Its waiter cannot cancel it: a waiter
    cancelled meanwhile hears of it once the future has settled. A caller
    saves the task it would run the append in, and the shield around it.
    None, having done nothing, when the store cannot begin it now.
    """

    def append_queued(
        self, session: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> asyncio.Future[Sequence[bytes] | None] | None: ...


@runtime_checkable
class SoonFlusher(Protocol):
    """Makes a session's appends made with ``durable=False`` durable, sharing a later flush.

    ``flush_soon`` returns once they are durable. It may wait up to ``within``
    seconds for another write of the store that must be durable, and end with
    that write's flush rather than take one of its own.
    """

    async def flush_soon(self, session: str, within: float) -> None: ...


@runtime_checkable
class Releaser(Protocol):
    """Ends this writer's hold on a session so another writer may take it."""

    async def release(self, session: str) -> None: ...


@runtime_checkable
class Leaser(Protocol):
    """The writer lease between Session values sharing one Storage value.

    ``acquire`` takes the backend's lock as a first append would, then the
    lease for ``holder``; it reports the count of complete entry lines stored
    and the header's created time (the stale signal). A different holder gets
    :class:`LockedError` naming the session. ``yield_lease`` ends ``holder``'s
    lease (and the hold); it releases nothing when another holder has it.
    """

    async def acquire(self, session: str, holder: object) -> tuple[int, datetime]: ...

    async def yield_lease(self, session: str, holder: object) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Fence:
    """The lease a session's writes are made under (scale-out, :mod:`threads.cluster`).

    ``lease`` is the store's name of the lease record, ``token`` the fencing
    token this process was given when it took the lease, and ``clock`` the
    lease clock (milliseconds; None: the server's).
    """

    lease: str
    token: int
    clock: Callable[[], int | None]


@runtime_checkable
class Fencer(Protocol):
    """A store whose writes can be fenced: refused once the writer's lease is not current.

    After ``fence(session, f)`` every write to the session checks, in the same
    atomic step as the write, that ``f.token`` is still the lease's token and
    the lease has not lapsed; otherwise it writes nothing and raises
    :class:`FencedError`. The lease then overrides the session's writer lock:
    the lease holder takes the lock from a writer whose lease is gone.
    ``fence(session, None)`` ends the check.
    """

    def fence(self, session: str, fence: Fence | None) -> None: ...


@runtime_checkable
class Locator(Protocol):
    """Says where a session is kept (a file, a database row, a Redis key), for a log line."""

    def where(self, session: str) -> str: ...


def location(store: object, session: str) -> str:
    """Where ``store`` keeps ``session``, as precisely as the store can say."""
    if isinstance(store, Locator):
        return store.where(session)
    return f"session {session} in {type(store).__name__}"


@runtime_checkable
class Pinger(Protocol):
    """A backend behind a server: ``ping`` checks it can be reached now.

    Raises :class:`UnreachableError` (its URL's password redacted) when it
    cannot, so a start-up or a command fails with one line naming the store
    rather than at its first read.
    """

    async def ping(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Mark:
    """Where a checkpoint stands in a session's bytes: after its first ``entries`` entries,
    which end at byte ``offset``, those bytes having the CRC-32 ``crc``."""

    entries: int
    offset: int
    crc: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Resumed:
    """A load that decoded only what came after a checkpoint (decision perf-19).

    ``loaded`` holds the header and the entries after the checkpoint's first
    ``before`` (all of them when ``before`` is 0); ``state`` is what the
    checkpoint's writer kept of those ``before`` (opaque to the store).
    ``mark`` is where a checkpoint of every entry read stands, when one is due
    (``due`` entries or more were decoded), else None.
    """

    loaded: Loaded
    before: int = 0
    state: bytes = b""
    mark: Mark | None = None


@runtime_checkable
class Checkpointer(Protocol):
    """Keeps, beside a session, what an open derived of its first entries, checked against
    the session's bytes, so a later open decodes only the entries after them."""

    async def load_resumed(self, session: str, *, due: int, whole: bool = False) -> Resumed:
        """A load from the session's checkpoint when its bytes still begin as they did
        (``whole``: never from one); the rules of :meth:`Storage.load` for what it decodes."""
        ...

    async def save_checkpoint(
        self, session: str, mark: Mark, state: bytes, held: Sequence[bytes] = ()
    ) -> None:
        """Keep ``state`` as the checkpoint at ``mark``; ``held`` are the lines of the
        receipts before it that a later line may still name (decoded before those)."""
        ...
