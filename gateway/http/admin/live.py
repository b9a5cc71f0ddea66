"""What the admin API pushes: server-sent event streams, the live threads view, session tails.

:class:`EventStreams` serves every ``text/event-stream`` answer: a *source*
coroutine pushes events through ``emit`` into a bounded queue (a slow reader
holds its source back, never the gateway), the handler writes them, a comment
every ``heartbeat`` seconds finds readers that went away, and :meth:`close`
ends every stream at shutdown.

:class:`LiveThreads` is the source of ``/api/live``: the threads view (as
``threads`` events) and the metrics (``metrics``), pushed when they change.
It learns of changes from the thread manager's turn observer (a wake
accepted, a turn decided) and, while a turn runs, looks again every
``throttle`` seconds (the tool and the steps move on); a push goes out only
when the view changed, and every ``refresh`` seconds the view is compared
again, which shows threads that were evicted. Nobody watching, the observer
returns at once and nothing is looked at. Its cost does not grow with the
turn rate: at most one look per ``throttle`` seconds, whatever the load.

:func:`tail_session` is the source of a session's live tail: the store's
watcher, each new entry as it is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from gateway.http.admin.errors import ApiError, api_error_of
from gateway.metrics import Metrics
from threads.manager import ThreadManager
from threads.messages import message_to_wire
from threads.runner import Thread
from threads.store.base import Watcher
from threads.store.entries import (
    CustomMessageEntry,
    Entry,
    MessageEntry,
    ReceiptEntry,
    TurnEntry,
)
from threads.store.watching import wait_for_change
from threads.turns import Turn
from threads.wake import Wake

log = logging.getLogger(__name__)

Emit = Callable[[str, Any], Awaitable[None]]
Source = Callable[[Emit], Awaitable[None]]

HEARTBEAT_SECONDS = 15.0
MAX_STREAMS = 32
QUEUE_FRAMES = 256
IDLE_SHOWN = 200
CLOSE_SECONDS = 5.0


def frame(event: str, data: Any) -> bytes:
    """One server-sent event: its name and its data as one line of JSON."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class EventStreams:
    """Every open event stream of the admin API."""

    def __init__(self, *, heartbeat: float = HEARTBEAT_SECONDS, limit: int = MAX_STREAMS) -> None:
        self.heartbeat = heartbeat
        self.limit = limit
        self._queues: set[asyncio.Queue[bytes | None]] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._closing = False

    @property
    def open(self) -> int:
        return len(self._queues)

    async def serve(self, request: web.Request, source: Source) -> web.StreamResponse:
        """Answer ``request`` with the events ``source`` emits, until it ends or the reader goes.

        A source that ends sends ``end``; one that fails sends ``error`` with
        the line its error maps to, then the stream ends.
        """
        if self._closing:
            raise ApiError(503, "the gateway is shutting down")
        if len(self._queues) >= self.limit:
            raise ApiError(
                503, f"{self.limit} event streams are open already; close a dashboard tab"
            )
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=QUEUE_FRAMES)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        try:
            await response.prepare(request)
        except ConnectionError:
            return response  # the reader left before the stream began
        task = asyncio.current_task()
        assert task is not None
        self._queues.add(queue)
        self._handlers.add(task)

        async def emit(event: str, data: Any) -> None:
            await queue.put(frame(event, data))

        async def produce() -> None:
            try:
                await source(emit)
                await queue.put(frame("end", {"message": "the stream ended"}))
            except Exception as exc:
                await queue.put(frame("error", {"message": api_error_of(exc).message}))
            await queue.put(None)

        producer = asyncio.create_task(produce(), name=f"event source {request.path}")
        try:
            await response.write(b": open\n\n")
            while True:
                try:
                    # asyncio.timeout, not wait_for (decision reliability-09)
                    async with asyncio.timeout(self.heartbeat):
                        item = await queue.get()
                except TimeoutError:
                    item = b": ping\n\n"
                if item is None:
                    break
                await response.write(item)
        except ConnectionError:
            pass  # the reader went away
        finally:
            producer.cancel()
            try:
                await asyncio.gather(producer, return_exceptions=True)
            finally:
                # Open until its source has ended: a closed stream holds nothing any more.
                self._queues.discard(queue)
                self._handlers.discard(task)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def close(self) -> None:
        """End every stream (each reader is told why) and wait for their handlers."""
        self._closing = True
        for queue in list(self._queues):
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait(frame("end", {"message": "the gateway is shutting down"}))
            queue.put_nowait(None)
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=CLOSE_SECONDS)


class _Watcher:
    """One reader of the live view: the newest payload of each event, and a bell."""

    def __init__(self) -> None:
        self.latest: dict[str, Any] = {}
        self.bell = asyncio.Event()

    def put(self, event: str, data: Any) -> None:
        self.latest[event] = data
        self.bell.set()

    def take(self) -> list[tuple[str, Any]]:
        taken, self.latest = list(self.latest.items()), {}
        self.bell.clear()
        return taken


class LiveThreads:
    """The threads view and the metrics, pushed to every reader of ``/api/live`` as they change."""

    def __init__(
        self,
        manager: ThreadManager,
        metrics: Metrics | None,
        *,
        throttle: float = 0.25,
        refresh: float = 5.0,
        idle_shown: int = IDLE_SHOWN,
    ) -> None:
        self.manager = manager
        self.metrics = metrics
        self.throttle = throttle
        self.refresh = refresh
        self.idle_shown = idle_shown
        self._watchers: set[_Watcher] = set()
        self._dirty = asyncio.Event()
        self._publisher: asyncio.Task[None] | None = None
        self._signature: object = None
        self._metrics_version = -1

    @property
    def watching(self) -> int:
        """How many readers the live view has now."""
        return len(self._watchers)

    # -- the turn observer

    def observe(self, thread: Thread, wake: Wake, turn: Turn) -> None:
        """A wake was accepted: while anyone watches, look again now and when its turn ends."""
        if not self._watchers:
            return
        self._dirty.set()
        turn.add_done_callback(self._turn_done)

    def _turn_done(self, turn: Turn) -> None:
        self._dirty.set()

    # -- the views

    def threads_view(self) -> dict[str, Any]:
        """The ``ThreadsOut`` answer: the busy threads and the most recently active idle ones.

        ``live`` counts every live thread; idle ones past ``idle_shown`` (the
        least recently active) are counted, not listed.
        """
        threads = self.manager.threads()
        busy = [t for t in threads if t.state != "idle"]
        idle = heapq.nlargest(
            self.idle_shown,
            (t for t in threads if t.state == "idle"),
            key=lambda t: t.last_activity,
        )
        snaps = [t.snapshot() for t in busy] + [t.snapshot() for t in idle]
        order = {"running": 0, "pending": 1, "idle": 2}
        snaps.sort(key=lambda s: (order.get(s["state"], 3), s["session_key"]))
        return {
            "threads": snaps,
            "live": len(threads),
            "running": sum(s["state"] == "running" for s in snaps),
            "pending": sum(s["state"] == "pending" for s in snaps),
            "turns_in_flight": self.manager.turns_in_flight,
            "max_concurrent_turns": self.manager.config.threads.max_concurrent_turns,
        }

    def metrics_view(self) -> dict[str, Any] | None:
        return self.metrics.series() if self.metrics is not None else None

    # -- readers

    async def stream(self, emit: Emit) -> None:
        """An :class:`EventStreams` source: the views now, then each change."""
        watcher = _Watcher()
        self._watchers.add(watcher)
        try:
            await emit("threads", self.threads_view())
            metrics = self.metrics_view()
            if metrics is not None:
                await emit("metrics", metrics)
            if self._publisher is None or self._publisher.done():
                self._publisher = asyncio.create_task(self._publish(), name="admin: live view")
            while True:
                await watcher.bell.wait()
                for event, data in watcher.take():
                    await emit(event, data)
        finally:
            self._watchers.discard(watcher)

    async def _publish(self) -> None:
        """Push what changed to every reader; return when nobody is left.

        While a turn runs or waits, the view is looked at every ``throttle``
        seconds (its tool and steps move on); otherwise only when a wake
        arrives, a turn ends, or every ``refresh`` seconds (evictions).
        """
        busy = True
        while self._watchers:
            if not busy:
                await wait_for_change(self._dirty, self.refresh)
            self._dirty.clear()
            view = self.threads_view()
            busy = bool(view["running"] or view["pending"])
            signature = [
                (t["session_key"], t["session_id"], t["state"], t["pending"], t["current_tool"],
                 t["iterations"], t.get("run_id"))
                for t in view["threads"]
            ]  # fmt: skip
            if signature != self._signature:
                self._signature = signature
                for watcher in self._watchers:
                    watcher.put("threads", view)
            if self.metrics is not None and self.metrics.version != self._metrics_version:
                self._metrics_version = self.metrics.version
                series = self.metrics.series()
                for watcher in self._watchers:
                    watcher.put("metrics", series)
            await asyncio.sleep(self.throttle)  # a burst of changes becomes one push
        self._signature = None
        self._metrics_version = -1

    async def close(self) -> None:
        if self._publisher is not None:
            self._publisher.cancel()
            await asyncio.gather(self._publisher, return_exceptions=True)


# -- a session's live tail


def entry_view(entry: Entry) -> dict[str, Any]:
    """An entry as the tail pushes it: id, type and time; a message's role and parts; a turn's end."""
    out: dict[str, Any] = {
        "id": entry.id,
        "type": entry.TYPE,
        "created": entry.created.isoformat(),
    }
    if isinstance(entry, MessageEntry | CustomMessageEntry):
        out.update(message_to_wire(entry.message))
        if isinstance(entry, MessageEntry) and entry.run_id:
            out["run_id"] = entry.run_id
        if isinstance(entry, CustomMessageEntry):
            out["custom"] = entry.kind
    elif isinstance(entry, ReceiptEntry):
        out["status"] = entry.status
        if entry.msg is not None:
            out.update(message_to_wire(entry.msg))
    elif isinstance(entry, TurnEntry):
        out.update(
            run_id=entry.run_id,
            stop_reason=entry.stop_reason,
            steps=entry.steps,
            input_tokens=entry.usage.input_tokens,
            output_tokens=entry.usage.output_tokens,
            error=entry.err,
            canceled=entry.canceled,
        )
    return out


def tail_session(store: Watcher, session_id: str, after: str) -> Source:
    """A source pushing each entry of ``session_id`` written after ``after`` (event ``entry``)."""

    async def source(emit: Emit) -> None:
        # A deleted session ends the stream with its NotFoundError, sent as an ``error`` event.
        async for entry in store.watch(session_id, after):
            await emit("entry", entry_view(entry))

    return source
