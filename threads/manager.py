"""The thread manager: every live thread, the turn cap, eviction, restart and health.

``wake(key, wake)`` is the one way in: it finds or starts the key's thread
(the key index names the current session; a session is created on first
contact), and returns once the wake is durable in that session. A wake that
could not be made durable raises, and nothing of it was taken: the store
cannot take it now (:class:`UnavailableError`), the key's session cannot be
read (:class:`QuarantinedError`), the thread is busy, the manager closing.

Start-up is never blocked by one session: a session that cannot be read is
quarantined (:mod:`threads.quarantine`), one another process holds or the
store cannot give now is logged in one line and kept for the next start, and
every other session starts.

The manager gives every session what it needs to keep the outbound ledger
(:mod:`threads.ledger`): the hand-offs a turn's end makes
(:mod:`threads.handoffs`: ``child_completed``, an exchange's next step), and,
after a restart, the sends a dead process recorded and never confirmed —
repeated to a receiver that drops repeats, otherwise marked uncertain and
listed in ``health``.

Scaled out (``cluster``, :mod:`threads.cluster`), a thread starts only on
the node that holds its key's lease, and its session's writes are fenced
with that lease; a wake for a key another node owns is forwarded to that
node's inbox and accepted once it is there. A thread that closes lets its
key go; one closed at shutdown with input still waiting hands its key over.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from zoneinfo import ZoneInfo

from config.models import GatewayConfig
from threads import reports, restart, stops, wake_batch
from threads.budget import Budget, Overspent
from threads.chains import Chains
from threads.checkpoint import open_session
from threads.cluster.owner import Ownership
from threads.errors import (
    FencedError,
    ManagerClosedError,
    NotFoundError,
    NotPersistedError,
    NotRunError,
    OwnedElsewhereError,
    UnavailableError,
)
from threads.eviction import Eviction
from threads.history import strip_for_fork
from threads.ids import new_session_id
from threads.keys import SessionKey
from threads.ledger import Ledger, already_sent
from threads.messages import JSON, Message
from threads.outage import StoreOutage
from threads.pool.pool import Pool
from threads.quarantine import UNREADABLE, Quarantine
from threads.recovery import RecoveryLog
from threads.runner import Thread
from threads.session import ParkListener, ResumeListener, Session, SessionOptions
from threads.session_sink import CaptureSink, SessionSink
from threads.sinks import ChannelSinkRef, DropSink, OutboundMessage, Sink
from threads.store.base import Fence, Loaded, SessionStore, location
from threads.store.entries import ApprovalRequestEntry, MessageEntry, ParentRef
from threads.turns import Agent, Run, Turn
from threads.wake import (
    Accepted,
    Cause,
    UserCaller,
    Wake,
    WakeSource,
    render_prompt,
    wake_from_wire,
    wake_to_wire,
)
from threads.wake_batch import WakeResult

if TYPE_CHECKING:
    from threads.cluster.member import Member

log = logging.getLogger(__name__)

NOT_STARTED = (
    "(Sorry — your message was received but its turn could not start: the gateway could not "
    "write to its store. It is kept and runs once the store is back.)"
)
HELD = (
    "(Your message is saved, but the gateway cannot write to its store right now: "
    "it runs as soon as the store is back. No need to send it again.)"
)

NOT_SAVED = (
    "(Note — the gateway could not save the end of this turn to its store: what was said "
    "stands, but the conversation's record of it may be incomplete.)"
)

RESUME_BODY = (
    "The gateway restarted while your previous turn was running; that turn was interrupted "
    "and is recorded as canceled. Continue from where it stopped and answer the caller."
)


ChannelSinks = Callable[[Mapping[str, str]], Sink]
UserSinks = Callable[[SessionKey], Sink | None]
TurnObserver = Callable[[Thread, Wake, Turn], None]


class ThreadManager:
    """Owns every thread; the runtime's single entry point."""

    def __init__(
        self,
        *,
        store: SessionStore,
        agent: Agent,
        config: GatewayConfig,
        channel_sinks: ChannelSinks | None = None,
        user_sinks: UserSinks | None = None,
        recovery_path: Path | None = None,
        cluster: Member | None = None,
    ) -> None:
        self.store = store
        self.ownership = Ownership(store, cluster)
        self.agent = agent
        self.config = config
        self.tz = ZoneInfo(config.timezone)
        self._channel_sinks = channel_sinks
        self._user_sinks = user_sinks
        self.recovery = RecoveryLog(recovery_path)
        self.quarantine = Quarantine()
        self.outage = StoreOutage()
        self._threads: dict[SessionKey, Thread] = {}
        self._starting: dict[SessionKey, asyncio.Future[Thread]] = {}
        self._gate = asyncio.Semaphore(config.threads.max_concurrent_turns)
        self._turns_in_flight = 0
        self._holds: dict[str, asyncio.Event] = {}
        self._observers: list[TurnObserver] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._eviction = Eviction(
            self._threads,
            self._evict,
            idle_after=config.threads.idle_evict_seconds,
            let_go=self._released,
        )
        self._closed = False
        self.started_at = time.time()
        self.health_sources: dict[str, Callable[[], Any]] = {}
        # What :meth:`close` gives running turns; a terminal's Ctrl-C shortens it.
        self.close_deadline = config.threads.close_deadline_seconds
        # Told of every approval request a turn parks on, once durable (the approvals service).
        self.park_listeners: list[ParkListener] = []
        # Told of every run that resumes a decided approval boundary, as it starts (the pool).
        self.resume_listeners: list[ResumeListener] = []
        self.chains = Chains(config.threads.max_exchange_depth, record=self.recovery.record_stopped)
        self.budget = Budget(config.threads.budget)
        self.ledger = Ledger(self)
        self._shared_options = self._options_every_session_shares()
        self.pool = Pool(self)
        # Told the entries of every session opened from the store, once open, and of the
        # sessions each eviction sweep closed (the gateway hands back the memory a long
        # open or an eviction freed, decision perf-41).
        self.release_listeners: list[Callable[[int], None]] = []

    # -- lifetime

    async def start(self) -> None:
        """Start housekeeping and, with ``continue_on_start``, run input left unsettled.

        The keys to look at come from the recovery log: after a clean close,
        the keys that still held input; after a crash (or a first start), every
        key. Each session with unsettled input is loaded and continued: a turn
        the crash cut short is recorded as canceled and resumed, accepted wakes
        run in acceptance order, each once.
        """
        self._eviction.start()
        keys = await self.recovery.begin(self.store)
        self.chains.load(self.recovery.stopped)
        if not self.config.threads.continue_on_start:
            self.recovery.carry(keys)
            return
        await restart.continue_keys(self, keys)

    async def continue_key(self, key: SessionKey) -> None:
        """Run what the key's session left unsettled (a crash, a handover); nothing else.

        Scaled out, only when the key is (or now becomes) this node's; a key
        found with nothing to run is let go again.
        """
        if key not in self._threads:
            try:
                await self.ownership.own(key)
            except OwnedElsewhereError:
                return
        try:
            await restart.continue_key(self, key)
        finally:
            await self._let_go_unused(key)

    async def close(self) -> None:
        """Let running turns finish within the deadline; queued input stays durable.

        Wakes are refused from the first step on. A wake that got in before
        and is still loading its session is waited for: its thread, once
        started, sees the manager closed, closes its session and refuses the
        wake, so nothing runs after close and no session is left open.
        """
        self._closed = True
        await self._eviction.stop()
        while self._starting:
            # asyncio.wait, not gather: a cancelled close must not cancel the starts.
            await asyncio.wait(list(self._starting.values()))
        deadline = self.close_deadline
        threads = list(self._threads.values())
        waiting = {str(t.key) for t in threads if t.state != "idle"}
        results = await asyncio.gather(
            *(t.session.close(deadline, drain=False) for t in threads), return_exceptions=True
        )
        for thread, result in zip(threads, results, strict=True):
            if isinstance(result, UnavailableError):
                log.warning("closing thread %s: %s", thread.key, result)
            elif isinstance(result, BaseException):
                log.error("closing thread %s failed", thread.key, exc_info=result)
        # Input that waited, turn ends the store never took, and sends the close kept
        # from leaving (a hand-off refused as the manager closed): the next start's.
        pending = sorted(
            waiting | {str(t.key) for t in threads if t.session.unsettled or t.session.has_unsent}
        )
        self._threads.clear()
        for thread in threads:
            self.ownership.unfence(thread.session.id)
            await self.ownership.release(thread.key, hand_over=str(thread.key) in pending)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.recovery.end(pending)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun: wakes are refused from then on."""
        return self._closed

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        """Run a background task the manager supervises and cancels at close."""
        task: asyncio.Task[Any] = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    def observe(self, observer: TurnObserver) -> None:
        """Call ``observer(thread, wake, turn)`` for every accepted wake."""
        self._observers.append(observer)

    # -- the way in

    async def wake(self, key: str, wake: Wake) -> Accepted:
        """Deliver a wake to the key's thread; durable before this returns."""
        accepted, _turn = await self.wake_turn(key, wake)
        return accepted

    async def wake_turn(self, key: str, wake: Wake) -> tuple[Accepted, Turn]:
        """As :meth:`wake`, also returning the turn handle (to wait for the answer)."""
        session_key, wake = self.admit(key, wake)
        try:
            # A session made here is made durable by the flush that makes the wake durable.
            thread = await self._thread(session_key, create=True, agent=wake.agent, durable=False)
        except OwnedElsewhereError as elsewhere:
            return await self.ownership.forward(elsewhere.node, session_key, wake)
        assert thread is not None
        return await thread.wake(wake)

    async def wake_many(self, wakes: Sequence[tuple[str, Wake]]) -> list[WakeResult]:
        """Accept many wakes in shared store rounds: see :func:`threads.wake_batch.wake_many`."""
        return await wake_batch.wake_many(self, wakes)

    async def open_ahead(self, keys: Sequence[wake_batch.Ahead]) -> int:
        """Open threads for wakes about to come: see :func:`threads.wake_batch.open_ahead`."""
        return await wake_batch.open_ahead(self, keys)

    def admit(self, key: str, wake: Wake) -> tuple[SessionKey, Wake]:
        """Check a wake may be taken (open manager, key not quarantined, chain in bounds)."""
        if self._closed:
            raise ManagerClosedError(key)
        session_key = SessionKey(key)
        self.quarantine.check(session_key)
        return session_key, self.chains.admit(session_key, wake)

    @contextlib.contextmanager
    def holding_turns(self, keys: Iterable[SessionKey]) -> Iterator[None]:
        """Hold the turns of ``keys`` until the block ends (while a batch of wakes is accepted).

        A held session takes up no turn, not even one queued before: the batch's
        last wake is durable before its first turn uses the event loop.
        """
        held = [str(key) for key in keys]
        released = asyncio.Event()
        for key in held:
            self._holds[key] = released
        try:
            yield
        finally:
            released.set()
            for key in held:
                if self._holds.get(key) is released:
                    del self._holds[key]

    async def session_exists(self, key: str) -> bool:
        session_key = SessionKey(key)
        return session_key in self._threads or await self.store.resolve(session_key) is not None

    def thread(self, key: str) -> Thread | None:
        return self._threads.get(SessionKey(key))

    def threads(self) -> list[Thread]:
        return list(self._threads.values())

    async def open_thread(
        self,
        key: str,
        *,
        create: bool = False,
        agent: str | None = None,
        loaded: Loaded | None = None,
    ) -> Thread | None:
        """The key's thread, started if its session exists (or ``create``).

        ``loaded`` is the key's session as just loaded (:meth:`load_stored`).
        """
        return await self._thread(SessionKey(key), create=create, agent=agent, loaded=loaded)

    async def _thread(
        self,
        key: SessionKey,
        *,
        create: bool,
        agent: str | None = None,
        loaded: Loaded | None = None,
        fork_of: Session | None = None,
        durable: bool = True,
    ) -> Thread | None:
        """The key's thread, started when it has none (one start per key at a time).

        Every start goes through here, so :meth:`close` can wait for the ones
        under way; a start that finishes after close began is closed and refused.
        ``durable=False``: a session created here is written without a flush
        (the caller's next durable write flushes it, decision perf-18).
        """
        thread = self._threads.get(key)
        if thread is not None:
            return thread
        starting = self._starting.get(key)
        if starting is not None:
            return await asyncio.shield(starting)
        if self._closed:
            raise ManagerClosedError(str(key))
        future: asyncio.Future[Thread] = asyncio.get_running_loop().create_future()
        self._starting[key] = future
        try:
            evicting = self._eviction.closing(key)
            if evicting is not None:
                # The evicted session lets go of its lease before the next one loads.
                await asyncio.shield(evicting)
            fence = await self.ownership.own(key)
            if fork_of is not None:
                thread = await self._start_fork(key, fork_of, agent=agent, fence=fence)
            else:
                thread = await self._start_thread(
                    key, create=create, agent=agent, loaded=loaded, fence=fence, durable=durable
                )
            if thread is not None and self.closed:
                # close() began while the session loaded; it has taken its list of threads.
                await self._close_late(thread.session, key)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._starting[key]
        if thread is None:
            future.cancel()
            await self._let_go_unused(key)
            return None
        self._threads[key] = thread
        future.set_result(thread)
        return thread

    async def _close_late(self, session: Session, key: SessionKey) -> NoReturn:
        """Close a session opened while the manager closed, and refuse what it was opened for."""
        try:
            await session.close(self.config.threads.close_deadline_seconds, drain=False)
        except Exception:
            log.error(
                "closing session %s of %s, opened during close, failed",
                session.id,
                key,
                exc_info=True,
            )
        raise ManagerClosedError(str(key))

    async def _let_go(self, thread: Thread) -> None:
        """The thread's session is closed: end its fence and let its key go."""
        self.ownership.unfence(thread.session.id)
        if thread.key not in self._threads:
            await self.ownership.release(thread.key)

    async def _let_go_unused(self, key: SessionKey) -> None:
        """Let a key go that was claimed but started no thread (nothing to run, no session)."""
        if key not in self._threads and key not in self._starting:
            await self.ownership.release(key)

    async def _start_thread(
        self,
        key: SessionKey,
        *,
        create: bool,
        agent: str | None,
        loaded: Loaded | None = None,
        fence: Fence | None = None,
        durable: bool = True,
    ) -> Thread | None:
        options = self.session_options(key)
        session_id = loaded.header.id if loaded else await self.store.resolve(key)
        created = False
        if loaded is not None:
            self.ownership.fence(loaded.header.id, fence)
            # Input left unsettled continues here only if no other writer holds the session.
            session = self._from_loaded(key, loaded, options)
            await session.hold()
            self._released(session.entry_count)
        elif session_id is not None:
            self.ownership.fence(session_id, fence)
            session = await self._open_stored(key, session_id, options)
            self._released(session.entry_count)
        elif create:
            name = agent or self.config.default_agent
            session_id = new_session_id()
            self.ownership.fence(session_id, fence)
            session = await Session.create(
                self.store,
                self.agent,
                session_id=session_id,
                meta={"key": str(key), "agent": name},
                options=options,
                durable=durable,
            )
            await self.store.point(key, session.id, durable=durable)
            created = True
        else:
            return None
        return self._make_thread(
            key,
            session,
            agent=session.header.meta.get("agent", self.config.default_agent),
            created=created,
        )

    def _released(self, entries: int) -> None:
        """An open that read ``entries`` entries, or a sweep that let go of as many, is done."""
        for listener in self.release_listeners:
            listener(entries)

    async def load_stored(self, key: SessionKey, session_id: str) -> Loaded:
        """The key's session as stored; one this build cannot read is set aside.

        Raises :class:`QuarantinedError` for a key set aside (now or before).
        """
        self.quarantine.check(key)
        try:
            return await self.store.load(session_id)
        except UNREADABLE as exc:
            raise self.quarantine.add(
                key, session_id, location(self.store, session_id), exc
            ) from None

    async def _open_stored(
        self, key: SessionKey, session_id: str, options: SessionOptions
    ) -> Session:
        """The key's session opened from the store, from its checkpoint where it has one
        (decision perf-19); one this build cannot read is set aside, as by :meth:`load_stored`."""
        self.quarantine.check(key)
        try:
            return await open_session(self.store, session_id, self.agent, options=options)
        except UNREADABLE as exc:
            where = location(self.store, session_id)
            raise self.quarantine.add(key, session_id, where, exc) from None

    def _from_loaded(self, key: SessionKey, loaded: Loaded, options: SessionOptions) -> Session:
        try:
            return Session.from_loaded(self.store, loaded, self.agent, options=options)
        except UNREADABLE as exc:  # the tree's validation: a damaged link between entries
            where = location(self.store, loaded.header.id)
            raise self.quarantine.add(key, loaded.header.id, where, exc) from None

    def _make_thread(
        self, key: SessionKey, session: Session, *, agent: str, created: bool
    ) -> Thread:
        default_sink = None
        if self._user_sinks is not None and key.is_user_facing:
            default_sink = self._user_sinks(key)
        return Thread(
            key,
            session,
            agent=agent,
            tz=self.tz,
            policies=self.config.threads.busy_policy,
            on_turn=self._notify,
            created=created,
            default_sink=default_sink,
        )

    def session_options(self, key: str | None = None) -> SessionOptions:
        """How the manager's sessions run; ``key`` names the thread they run for.

        What is the same for every session is made once and shared: a live
        session holds its options, and each bound method is an object more
        for every garbage collection to walk, in every live session.
        """
        return dataclasses.replace(
            self._shared_options,
            gate=partial(self._turn_gate, key),
            turn_hold=partial(self._holds.get, key) if key is not None else None,
        )

    def _options_every_session_shares(self) -> SessionOptions:
        return SessionOptions(
            max_queue=self.config.threads.inbox_size,
            collect_window=self.config.threads.collect_window_seconds,
            load_payload=self.load_wake,
            resume=self._resume,
            hand_offs=self.ledger.hand_offs,
            redeliver=self.ledger.redeliver,
            flush_store=self.config.store.fsync == "on_flush",
            outage=self.outage,
            on_held=self._held,
            on_park=self._parked,
            on_resume=self._resumed,
            siblings=self._siblings,
        )

    def _siblings(self) -> int:
        return self._turns_in_flight

    def _parked(self, session: Session, requests: Sequence[ApprovalRequestEntry]) -> None:
        for listener in self.park_listeners:
            listener(session, requests)

    def _resumed(self, session: Session, payload: Any, turn: Turn) -> None:
        for listener in self.resume_listeners:
            listener(session, payload, turn)

    @contextlib.asynccontextmanager
    async def _turn_gate(self, key: str | None) -> AsyncIterator[None]:
        """A turn slot; a sync delegation's child runs on the slot its waiting parent holds."""
        if key is not None and self.pool.lends(key):
            yield
            return
        async with self._gate:
            self._turns_in_flight += 1
            try:
                yield
            finally:
                self._turns_in_flight -= 1

    def _notify(self, thread: Thread, wake: Wake, turn: Turn) -> None:
        if isinstance(wake.caller, UserCaller) and not wake.sink.drops:
            turn.add_done_callback(partial(self._not_started, wake))
        for observer in self._observers:
            observer(thread, wake, turn)

    def _held(self, session: Session, payloads: list[Any]) -> None:
        """Accepted input waits for the store: the key is marked, each user told once."""
        self.recovery.mark(session.header.meta.get("key", session.id))
        if self._closed:
            return
        for wake in payloads:
            if (
                isinstance(wake, Wake)
                and isinstance(wake.caller, UserCaller)
                and not wake.sink.drops
            ):
                self.spawn(_tell(wake, HELD), name="tell a turn waits for the store")

    def _not_started(self, wake: Wake, turn: Turn) -> None:
        """A user whose turn could not start, or whose turn's end was not saved, is told so."""
        if self._closed:
            return
        if isinstance(turn.error, NotRunError):
            self.spawn(_tell(wake, NOT_STARTED), name="tell a turn did not start")
        elif isinstance(turn.error, NotPersistedError) and not isinstance(
            turn.error.__cause__, FencedError
        ):
            # A node that lost the key's lease says nothing: its new owner runs the input.
            self.spawn(_tell(wake, NOT_SAVED), name="tell a turn's end was not saved")

    # -- sinks and restored wakes

    def resolve_sink(self, wire: Mapping[str, str]) -> Sink:
        kind = wire.get("kind")
        if kind == "drop":
            return DropSink(reason=wire.get("reason", "system"))
        if kind == "session":
            return SessionSink(
                target=SessionKey(wire["target"]),
                origin=SessionKey(wire["origin"]),
                manager=self,
                chain=wire.get("chain", ""),
                depth=int(wire.get("depth", "0")),
            )
        if kind == "capture":
            return CaptureSink(caller=SessionKey(wire["caller"]))
        if self._channel_sinks is None:
            return DropSink(reason=f"the unavailable channel {wire.get('channel', kind)}")
        return ChannelSinkRef(wire=dict(wire), resolve=self._channel_sinks)

    def user_sink(self, key: SessionKey) -> Sink | None:
        """The key's default sink: its channel user (``dispatch(to=user)``); None for others."""
        thread = self._threads.get(key)
        if thread is not None and thread.default_sink is not None:
            return thread.default_sink
        if self._user_sinks is None or not key.is_user_facing:
            return None
        return self._user_sinks(key)

    def session_sink(
        self, target: SessionKey, origin: SessionKey, *, cause: Cause | None = None
    ) -> SessionSink:
        """A sink whose replies wake ``target`` as ``origin``, for a wake of ``cause``'s chain.

        Without ``cause`` (a cron fire) the sink answers in the chain the
        wake it rides with starts when it is accepted.
        """
        if cause is None:
            return SessionSink(target=target, origin=origin, manager=self)
        return SessionSink(
            target=target, origin=origin, manager=self, chain=cause.chain, depth=cause.depth
        )

    def load_wake(self, wire: Mapping[str, JSON]) -> Wake:
        return wake_from_wire(wire, "", self.resolve_sink)

    def _resume(
        self, session: Session, prompt: MessageEntry
    ) -> tuple[Message, Wake, Mapping[str, JSON]] | None:
        if not prompt.wake:
            return None
        original = self.load_wake(prompt.wake)
        if self.chains.refused(original):
            return None  # its chain was stopped: the interrupted turn stays ended
        sent = already_sent(session, prompt.run_id)
        body = f"{RESUME_BODY}\n\n{sent}" if sent else RESUME_BODY
        wake = Wake(
            source=WakeSource.RESUME,
            body=body,
            caller=original.caller,
            sink=original.sink,
            agent=original.agent,
            chain=original.chain,
            depth=original.depth,
            expects_reply=original.expects_reply,
        )
        key = session.header.meta.get("key", session.id)
        text = render_prompt(wake, thread=key, session_id=session.id, tz=self.tz)
        return Message.user(text), wake, wake_to_wire(wake)

    # -- operations

    async def create_fork(self, key: SessionKey, parent: Session, *, agent: str | None) -> None:
        """Start a fork child: a new session holding the parent's stripped history."""
        await self._thread(key, create=True, agent=agent, fork_of=parent)

    async def _start_fork(
        self, key: SessionKey, parent: Session, *, agent: str | None, fence: Fence | None
    ) -> Thread:
        name = agent or parent.header.meta.get("agent", self.config.default_agent)
        session_id = new_session_id()
        self.ownership.fence(session_id, fence)
        session = await Session.create(
            self.store,
            self.agent,
            session_id=session_id,
            meta={"key": str(key), "agent": name},
            parent=ParentRef(session=parent.id, entry=parent.leaf),
            options=self.session_options(key),
        )
        history = strip_for_fork(parent.context())
        if history:
            await session.append_messages(history)
        await self.store.point(key, session.id)
        return self._make_thread(key, session, agent=name, created=True)

    async def forget(self, key: str, *, delete: bool = True) -> None:
        """Unload the key's thread, drop the key from the index and, with ``delete``, its session.

        For children that are done for good (``sessions_spawn`` with cleanup=delete).
        """
        session_key = SessionKey(key)
        if session_key not in self._threads:
            await self.ownership.own(session_key)
        thread = self._threads.pop(session_key, None)
        session_id = await self.store.resolve(session_key)
        if thread is not None:
            await thread.session.close(self.config.threads.close_deadline_seconds)
            await self._let_go(thread)
            session_id = session_id or thread.session.id
        await self.store.unpoint(session_key)
        await self._let_go_unused(session_key)
        self.quarantine.lift(session_key)
        if delete and session_id is not None:
            with contextlib.suppress(NotFoundError):
                await self.store.delete(session_id)

    async def new_session(self, key: str) -> str:
        """Point the key at a fresh session (``/new``); the old one is kept.

        Scaled out, a key another node runs gets its new session there.
        """
        session_key = SessionKey(key)
        try:
            fence = self.ownership.held(session_key) or await self.ownership.own(session_key)
        except OwnedElsewhereError:
            answer = await self.ownership.ask_owner(session_key, "new", {})
            if answer is None:  # the owner let go meanwhile: ask again, it is free now
                return await self.new_session(key)
            return str(answer["session_id"])
        thread = self._threads.pop(session_key, None)
        agent = self.config.default_agent
        if thread is not None:
            agent = thread.agent
            await thread.session.close(self.config.threads.close_deadline_seconds)
            self.ownership.unfence(thread.session.id)
        session_id = new_session_id()
        self.ownership.fence(session_id, fence)
        try:
            session = await Session.create(
                self.store,
                self.agent,
                session_id=session_id,
                meta={"key": key, "agent": agent},
                options=self.session_options(key),
            )
            await self.store.point(session_key, session.id)
            self.quarantine.lift(session_key)
            await session.close()
        finally:
            self.ownership.unfence(session_id)
            await self._let_go_unused(session_key)
        return session.id

    async def stop(
        self, key: str, *, drain: bool = False, by_user: bool = False
    ) -> stops.StopReport:
        """Stop a key's turn and its exchange chains: see :func:`threads.stops.stop_key`.

        Scaled out, a key another node runs is stopped there.
        """
        session_key = SessionKey(key)
        if session_key not in self._threads:
            args = {"drain": drain, "by_user": by_user}
            answer = await self.ownership.ask_owner(session_key, "stop", args)
            if answer is not None:
                return stops.StopReport.from_json(answer["report"])
        return await stops.stop_key(self, session_key, drain=drain, by_user=by_user)

    async def stop_all(self, *, drain: bool = False) -> stops.StopReport:
        """Stop every running turn and queued system wake: see :func:`threads.stops.stop_all`."""
        return await stops.stop_all(self, drain=drain)

    async def overspent(self, key: str, run: Run, over: Overspent) -> None:
        """A turn's session or chain spent its budget: see :func:`threads.stops.overspent`."""
        await stops.overspent(self, SessionKey(key), run, over)

    async def check_session(self, key: str) -> dict[str, Any]:
        """Seed 000's ``check_session``: see :func:`threads.reports.check_session`."""
        return await reports.check_session(self, SessionKey(key))

    async def health(self) -> dict[str, Any]:
        """Seed 000's ``health``: see :func:`threads.reports.health`."""
        return await reports.health(self)

    @property
    def turns_in_flight(self) -> int:
        return self._turns_in_flight

    # -- eviction

    async def evict_idle(self, idle_after: float) -> int:
        """Close threads idle longer than ``idle_after`` seconds; see :mod:`threads.eviction`."""
        return await self._eviction.evict_idle(idle_after)

    async def _evict(self, thread: Thread) -> None:
        await thread.session.close()
        await self._let_go(thread)

    async def drop(self, key: SessionKey) -> None:
        """Drop the key's thread at once, writing nothing more: its lease is gone (scale-out).

        The running turn is cancelled; what it would record is refused by the
        store (the fence), and the key's new owner records it as canceled.
        """
        thread = self._threads.pop(key, None)
        if thread is None:
            return
        try:
            await thread.session.close(0, drain=False)
        except Exception as exc:
            log.info("closing %s after its lease was lost: %s", key, exc)
        self.ownership.unfence(thread.session.id)


async def _tell(wake: Wake, text: str) -> None:
    try:
        await wake.sink.deliver(OutboundMessage(text=text))
    except Exception:
        log.exception("telling the user that their turn did not start failed")
