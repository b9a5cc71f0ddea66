"""The live tail every backend's ``watch`` is built on, and the change pulse it waits on.

A backend supplies two things: ``read(position)``, returning the session's
identity (which tells a recreated session from the one being watched), the
complete lines stored after ``position`` and the position after them; and a
:class:`Pulse` it fires on every change it makes. The watcher waits on the
pulse with a deadline, so writes from another process are seen within one
poll interval and this store's own writes at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import suppress

from threads.errors import CorruptError, NewerFormatError, NoEntryError, NotFoundError
from threads.messages import WireError
from threads.store.codec import decode_entry, decode_header
from threads.store.entries import Entry
from threads.store.lines import complete_end, entry_id_of, log_skipped, whole_entry
from threads.store.referrals import Referrals

ReadFrom = Callable[[int], Awaitable[tuple[Hashable, bytes, int]]]


class Pulse:
    """A broadcast "something changed" signal for waiters on one event loop.

    Take :meth:`current` *before* reading, then wait on it: a change between
    the read and the wait has already set it, so nothing is missed.
    """

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def current(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def fire(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None


async def wait_for_change(event: asyncio.Event, timeout: float | None) -> None:
    """Wait until ``event`` is set or ``timeout`` seconds pass (None: no deadline)."""
    if timeout is None:
        await event.wait()
        return
    # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation
    # that comes as the event is set, and the watch would go on after it was cancelled
    # (decision reliability-09).
    with suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


async def tail(
    session: str,
    after: str,
    read: ReadFrom,
    pulse: Pulse,
    *,
    salvage: bool,
    poll_interval: float | None,
) -> AsyncIterator[Entry]:
    """Yield a session's entries after ``after``, then each new one exactly once.

    Ends with :class:`NotFoundError` when the session is deleted or recreated,
    :class:`NoEntryError` when ``after`` names no entry of the backlog, and
    :class:`CorruptError` / :class:`NewerFormatError` on data it cannot decode
    (a malformed line is skipped under salvage; a newer one never is).
    """
    event = pulse.current()
    identity, data, position = await read(0)
    line_number = 0
    started = after == ""
    header_seen = False
    referrals = Referrals()
    while True:
        for line in data.split(b"\n")[:-1]:
            line_number += 1
            if not header_seen:
                header_seen = True
                try:
                    decode_header(line)
                except NewerFormatError as exc:
                    raise NewerFormatError(f"session {session}: {exc}", line=1) from None
                except WireError as exc:
                    raise CorruptError(session, line_number, "", str(exc)) from None
                continue
            try:
                entry = whole_entry(referrals, decode_entry(line))
            except NewerFormatError as exc:
                raise NewerFormatError(
                    f"session {session} line {line_number}: {exc}", line=line_number
                ) from None
            except (WireError, ValueError, TypeError) as exc:
                if salvage:
                    log_skipped(session, line_number, line, exc)
                    continue
                raise CorruptError(session, line_number, entry_id_of(line), str(exc)) from None
            if started:
                yield entry
            elif entry.id == after:
                started = True
        if not started:
            raise NoEntryError(session, after)
        await wait_for_change(event, poll_interval)
        event = pulse.current()
        try:
            now, data, position = await read(position)
        except NotFoundError:
            raise NotFoundError(session, "deleted while being watched") from None
        if now != identity:
            raise NotFoundError(session, "deleted and created again while being watched")


def advance(pieces: list[tuple[int, bytes]], position: int) -> tuple[bytes, int]:
    """The complete lines in numbered pieces of a stream, and the position after them.

    A backend that stores a session as numbered pieces (rows, list items; the
    header is piece 0) reads the pieces numbered from ``position >> 32`` on,
    in order; ``position``'s low 32 bits are the offset already consumed in
    the first. A line may span pieces (a torn tail completed later); the
    position never passes an incomplete line.
    """
    first, offset = position >> 32, position & 0xFFFFFFFF
    spans = [(n, offset if n == first else 0, data) for n, data in pieces if n >= first]
    buffer = b"".join(data[start:] for _, start, data in spans)
    complete = complete_end(buffer)
    remaining = complete
    for n, start, data in spans:
        size = len(data) - start
        if remaining >= size:
            remaining -= size
            position = (n + 1) << 32
            continue
        position = (n << 32) + start + remaining
        break
    return buffer[:complete], position
