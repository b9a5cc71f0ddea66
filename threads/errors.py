"""Errors of the threads package.

Every error raised here derives from :class:`ThreadsError`::

    ThreadsError
    ├── StoreError                     what a Storage backend refuses
    │   ├── NotFoundError (LookupError)    no such session
    │   ├── ExistsError                    create of a session that exists
    │   ├── LockedError                    another writer holds the session   (retry)
    │   ├── StaleError                     the session moved on behind a view (reopen)
    │   │   └── FencedError                    this process's lease on the key lapsed
    │   ├── ClosedError                    the Session value was closed       (reopen)
    │   ├── CorruptError                   stored bytes that do not decode    (terminal)
    │   ├── NewerFormatError               data written by a newer build      (terminal)
    │   ├── InvalidIdError (ValueError)    an id that is not one path component
    │   ├── UnsafePathError                a symbolic link or a foreign file where
    │   │                                  the store keeps its data (refused, not followed)
    │   ├── UnavailableError               the store cannot take the call now (retry)
    │   │   └── UnreachableError               its server cannot be reached
    │   └── QuarantinedError               a session key whose session cannot be read
    ├── NodeBusyError                  another live process holds this data directory's node
    ├── InvalidKeyError (ValueError)   a session key that breaks a rule
    ├── BusyError                      a turn is running (reject policy, between-turn ops)
    ├── ReservedKeyError (ValueError)  a ``weft.`` metadata key in set_info
    ├── NoEntryError (LookupError)     an entry id the session does not hold
    ├── ThreadNotLoadedError (LookupError)  no thread in memory for a key (stop-session)
    ├── NoTurnRunningError             a loaded thread that runs no turn (stop-session)
    ├── ManagerClosedError             a wake for a manager that is shutting down
    ├── NoDelegationError (LookupError)  no unsettled delegation to a child (cancel)
    ├── NotDelegatingError (LookupError) a call that delegates to no such child, or is answered
    ├── OwnedElsewhereError            a session key another gateway process owns
    ├── ExchangeRefusedError           a wake one session caused that may not run
    │   ├── ExchangeLimitError             past threads.max_exchange_depth
    │   └── ChainStoppedError              its chain was stopped (a stop, a budget)
    └── TurnError                      how a turn ended when it did not answer
        ├── DroppedError               removed from the queue before it ran
        ├── NotRunError                never started
        └── NotPersistedError          ran, and its end could not be written

Messages name the thing (the session id, the line, the entry) and, where it
helps, what to do next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threads.turns import RunResult


class ThreadsError(Exception):
    """Root of every error the threads package raises."""


class StoreError(ThreadsError):
    """A storage backend refused the call."""


class NotFoundError(StoreError, LookupError):
    """The storage holds no session with this id."""

    def __init__(self, session: str, detail: str = "") -> None:
        self.session = session
        super().__init__(f"session {session} not found" + (f": {detail}" if detail else ""))


class ExistsError(StoreError):
    """A create named a session the storage already holds."""

    def __init__(self, session: str) -> None:
        self.session = session
        super().__init__(f"session {session} already exists; a session is never replaced")


class LockedError(StoreError):
    """Another writer holds the session; retry once it has let go."""

    def __init__(self, session: str, holder: str = "another writer") -> None:
        self.session = session
        super().__init__(f"session {session} is locked by {holder}")


class StaleError(StoreError):
    """The stored session changed since this view loaded it; open it again."""

    def __init__(self, session: str, detail: str = "") -> None:
        self.session = session
        msg = f"session {session} changed since it was opened; open it again to write"
        super().__init__(msg + (f" ({detail})" if detail else ""))


class FencedError(StaleError):
    """A write under a lease this process no longer holds: it lapsed, or another took it.

    The fencing token the write carried is not the lease's current one, so the
    write is refused whole; the key's current owner runs it from now on.
    """

    def __init__(self, session: str, lease: str, token: int) -> None:
        self.lease = lease
        self.token = token
        super().__init__(
            session,
            f"this process's lease {lease} (fencing token {token}) lapsed or was taken over; "
            "it writes no more, the lease's current owner does",
        )


class UnsafePathError(StoreError):
    """A path the store would use is a symbolic link or not ours: refused, never followed."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(f"{path} {detail}")


class UnavailableError(StoreError):
    """The store cannot take the call now: its server is down, its disk is full.

    Transient: the same call succeeds once the store is back. ``where`` names
    the store (a URL with its password redacted, a directory, a file).
    """

    def __init__(self, where: str, detail: str) -> None:
        self.where = where
        self.detail = detail
        super().__init__(self._text(where, detail))

    @staticmethod
    def _text(where: str, detail: str) -> str:
        return f"the session store {where} cannot take writes now: {detail}"


class UnreachableError(UnavailableError):
    """The store's server cannot be reached (down, a wrong address, refused credentials).

    ``where`` is the store's URL with its password redacted.
    """

    @staticmethod
    def _text(where: str, detail: str) -> str:
        return f"the session store {where} cannot be reached: {detail}"


class QuarantinedError(StoreError):
    """The key's session cannot be read (corrupt, newer format, unreadable); nothing was taken.

    The session is set aside at start-up or when first loaded; every other
    session runs. ``/new`` points the key at a fresh session.
    """

    def __init__(self, key: str, session: str, reason: str) -> None:
        self.key = key
        self.session = session
        self.reason = reason
        super().__init__(
            f"session {session} of {key} cannot be read and is set aside ({reason}); "
            "nothing was taken: start a fresh conversation with /new, or repair the session "
            "and restart the gateway"
        )


class ClosedError(StoreError):
    """The Session value was closed; open the session again to continue it."""

    def __init__(self, session: str) -> None:
        self.session = session
        super().__init__(f"session {session} is closed; open it again to continue")


class CorruptError(StoreError):
    """Stored data that cannot be decoded, naming the session, line and entry.

    ``line`` is 1-based with the header as line 1 (0 when the failure is not
    one line's); ``entry`` is the entry id the failure names, or "".
    """

    def __init__(self, session: str, line: int = 0, entry: str = "", cause: str = "") -> None:
        self.session = session
        self.line = line
        self.entry = entry
        self.cause = cause
        where = []
        if line:
            where.append(f"line {line}")
        if entry:
            where.append(f"entry {entry}")
        place = f" at {', '.join(where)}" if where else ""
        super().__init__(f"session {session} is corrupt{place}: {cause}")


class NewerFormatError(StoreError):
    """Data written by a newer build: an unknown kind or a higher version.

    Never skipped, not even by salvage: upgrade the gateway to read it.
    ``line`` is the 1-based line it was met on (0 when not known).
    """

    def __init__(self, message: str, *, line: int = 0) -> None:
        self.line = line
        super().__init__(message)


class InvalidIdError(StoreError, ValueError):
    """An id that is not 1-128 of letters, digits, '_' or '-'."""

    def __init__(self, value: str) -> None:
        self.value = value
        shown = value if len(value) <= 40 else value[:37] + "..."
        super().__init__(f"invalid id {shown!r}: an id is 1 to 128 letters, digits, '_' or '-'")


class InvalidKeyError(ThreadsError, ValueError):
    """A session key that breaks one of the key rules; the message names the rule."""

    def __init__(self, key: str, rule: str) -> None:
        self.key = key
        self.rule = rule
        shown = key if len(key) <= 60 else key[:57] + "..."
        super().__init__(f"invalid session key {shown!r}: {rule}")


class BusyError(ThreadsError):
    """A turn is running; the call was not accepted and nothing was written."""

    def __init__(self, session: str, what: str = "send") -> None:
        self.session = session
        super().__init__(f"session {session} is busy with another turn; {what} refused")


class ReservedKeyError(ThreadsError, ValueError):
    """Metadata keys under ``weft.`` are the session's identity, set once at create."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"metadata key {key!r} is reserved: 'weft.' keys are set only at create")


class NoEntryError(ThreadsError, LookupError):
    """An operation named an entry the session does not hold."""

    def __init__(self, session: str, entry: str) -> None:
        self.session = session
        self.entry = entry
        super().__init__(f"session {session} holds no entry {entry!r}")


class TurnError(ThreadsError):
    """How a turn ended when it did not produce an answer."""


class DroppedError(TurnError):
    """The message was removed from the queue before it reached a model."""


class NotRunError(TurnError):
    """The turn never started: its prompt could not be written or the session closed."""


class NotPersistedError(TurnError):
    """The turn ran but the store refused its end: the session has no record of how it ended.

    ``result`` is what the run produced (the model answered; the store did not
    keep it). Messages its steps wrote as they joined the run are stored.
    """

    def __init__(self, message: str, result: RunResult) -> None:
        self.result = result
        super().__init__(message)


class ThreadNotLoadedError(ThreadsError, LookupError):
    """The key has no thread in memory (finished, evicted or never started)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no thread is loaded for session {key}: there is nothing to stop")


class NoTurnRunningError(ThreadsError):
    """A stop for a thread that is loaded but runs no turn and holds no system wake."""

    def __init__(self, key: str, state: str) -> None:
        self.key = key
        self.state = state
        super().__init__(
            f"session {key} is not running a turn (its thread is loaded and {state}): there is "
            "nothing to stop — no turn runs and no system wake waits there"
        )


class NodeBusyError(ThreadsError):
    """Another live process holds this data directory's node identity (``threads.node``)."""

    def __init__(self, data_dir: str, pid: int) -> None:
        self.data_dir = data_dir
        self.pid = pid
        holder = f"process {pid}" if pid else "another process"
        super().__init__(
            f"{holder} is already running a gateway on the data directory {data_dir}: "
            "stop it first, or give this gateway a data_dir of its own"
        )


class ManagerClosedError(ThreadsError):
    """A wake (or a thread start) for a manager that has begun to close."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"the thread manager is closed; wake for {key} refused: the gateway is shutting "
            "down and accepted nothing for it — send it again once the gateway is back"
        )


class OwnedElsewhereError(ThreadsError):
    """The session key is owned by another gateway process (scale-out): its wakes go there."""

    def __init__(self, key: str, node: str) -> None:
        self.key = key
        self.node = node
        super().__init__(
            f"session {key} is owned by gateway node {node}; its wakes are sent there and it "
            "is run, stopped and changed there"
        )


class ExchangeRefusedError(ThreadsError):
    """A wake caused by another session that the gateway will not run (DESIGN §11)."""


class ExchangeLimitError(ExchangeRefusedError):
    """The wake would be deeper in its exchange chain than ``threads.max_exchange_depth``."""

    def __init__(self, key: str, depth: int, limit: int) -> None:
        self.key = key
        self.depth = depth
        self.limit = limit
        super().__init__(
            f"not delivered to {key}: this exchange between sessions is already {depth - 1} "
            f"wakes deep and may go {limit} (threads.max_exchange_depth). It is recorded here "
            "and wakes nobody; answer your user or end the turn"
        )


class ChainStoppedError(ExchangeRefusedError):
    """The wake belongs to an exchange chain that was stopped."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"not delivered to {key}: this exchange was stopped ({reason})")


class NoDelegationError(ThreadsError, LookupError):
    """No unsettled delegation to the child: it settled already, or never was."""

    def __init__(self, child: str) -> None:
        self.child = child
        super().__init__(
            f"no delegation to {child} is in flight: it settled already, or {child} is no "
            "delegated child (gateway sessions list shows the sessions)"
        )


class NotDelegatingError(ThreadsError, LookupError):
    """A resolution for a call that delegates to no such child, or that has its result."""

    def __init__(self, session: str, call: str, why: str) -> None:
        self.session = session
        self.call = call
        super().__init__(f"call {call} of session {session} cannot be resolved: {why}")
