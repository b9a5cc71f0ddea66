"""The terminal side of ``gateway run`` and ``gateway chat``: input lines and stop signals.

Lines are read on the event loop, never in a thread: a thread blocked in
``readline`` cannot be interrupted, and ``asyncio.run`` joins it at exit, so
Ctrl-C would leave the process waiting for one more line. Here the loop
watches the descriptor and reads only what is there, so stopping is just
leaving the ``async for``.

* A terminal is reopened by name, non-blocking: its own open file, because
  the one the shell handed over is shared with stdout and stderr, and making
  it non-blocking would let a long reply fail half-printed.
* A pipe or socket is made non-blocking while it is read, then put back.
* A regular file or ``/dev/null`` cannot be watched (``epoll`` refuses them)
  and never makes a reader wait, so it is read directly.

:class:`StopSignals` turns Ctrl-C and SIGTERM into a clean stop: the first
asks the command to end (a gateway closes, letting running turns finish
within ``threads.close_deadline_seconds``); a second ends the process at once
(decision terminal-01).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator, Coroutine, Iterator
from types import TracebackType
from typing import Any

CHUNK = 64 * 1024
NOTICE_AFTER_SECONDS = 1.0
INTERRUPT_CLOSE_SECONDS = 0.5
"""How long a Ctrl-C gives running turns (SIGTERM gives ``close_deadline_seconds``).

Below ``NOTICE_AFTER_SECONDS``, so such a stop prints no "stopping" line.
"""
SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def input_lines(fd: int) -> AsyncIterator[str]:
    """Each line read from ``fd`` (with its newline, if it had one) until end of input.

    An unreadable or closed ``fd`` is an empty input. Bytes that are not UTF-8
    are replaced, not refused: a stray byte in a paste must not end the chat.
    """
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return
    loop = asyncio.get_running_loop()
    if stat.S_ISREG(mode) or not _watchable(loop, fd):
        with open(fd, "rb", closefd=False) as file:  # noqa: ASYNC230 - a file never waits
            for raw in file:
                yield raw.decode("utf-8", "replace")
        return
    with _own_nonblocking(fd) as readable:
        buffer = bytearray()
        while True:
            end = buffer.find(b"\n")
            if end >= 0:
                line = bytes(buffer[: end + 1])
                del buffer[: end + 1]
                yield line.decode("utf-8", "replace")
                continue
            chunk = await _read_some(loop, readable)
            if not chunk:
                if buffer:
                    yield bytes(buffer).decode("utf-8", "replace")
                return
            buffer += chunk


def _watchable(loop: asyncio.AbstractEventLoop, fd: int) -> bool:
    """Whether the loop can wait for ``fd`` to become readable."""
    try:
        loop.add_reader(fd, _nothing)
    except (PermissionError, ValueError):
        return False
    loop.remove_reader(fd)
    return True


def _nothing() -> None:
    pass


@contextlib.contextmanager
def _own_nonblocking(fd: int) -> Iterator[int]:
    """A non-blocking descriptor reading what ``fd`` reads, for as long as the block runs."""
    if os.isatty(fd):
        try:
            own = os.open(os.ttyname(fd), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:
            # No name to reopen it by: read it as it is, only once the loop says it is readable.
            yield fd
            return
        try:
            yield own
        finally:
            os.close(own)
        return
    was_blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        yield fd
    finally:
        with contextlib.suppress(OSError):
            os.set_blocking(fd, was_blocking)


async def _read_some(loop: asyncio.AbstractEventLoop, fd: int) -> bytes:
    """What ``fd`` has to read, once it has some; empty at end of input."""
    while True:
        ready = loop.create_future()
        loop.add_reader(fd, _settle, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        try:
            return os.read(fd, CHUNK)
        except BlockingIOError:
            continue  # another reader took it first
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""  # the terminal hung up
            raise


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


class StopSignals:
    """SIGINT and SIGTERM while a terminal command runs, as ``with StopSignals(...) as stop:``.

    The first signal sets :attr:`requested` (and :attr:`interrupted` when it
    is a Ctrl-C: a person at the terminal, who is given
    :data:`INTERRUPT_CLOSE_SECONDS`, not the whole close deadline a service
    manager's SIGTERM gets; see :func:`close_deadline`). Should the command
    still be running a second later, one line on stderr says what it is
    waiting for (``waiting_for``) and that a second Ctrl-C stops at once. The second
    signal ends the process there and then, with exit code 128 + the signal:
    what the gateway accepted is already durable, so this is the crash it is
    built to recover from at its next start, not a loss.
    """

    def __init__(self, *, waiting_for: str) -> None:
        self.requested = asyncio.Event()
        self.interrupted = False
        self.waiting_for = waiting_for
        self._loop: asyncio.AbstractEventLoop | None = None
        self._notice: asyncio.TimerHandle | None = None

    def __enter__(self) -> StopSignals:
        self._loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            self._loop.add_signal_handler(sig, self._received, sig)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._notice is not None:
            self._notice.cancel()
        if self._loop is not None and not self._loop.is_closed():
            for sig in SIGNALS:
                self._loop.remove_signal_handler(sig)

    async def wait(self) -> None:
        """Return once a stop was asked for."""
        await self.requested.wait()

    def _received(self, sig: signal.Signals) -> None:
        if not self.requested.is_set():
            self.interrupted = sig == signal.SIGINT
            self.requested.set()
            assert self._loop is not None
            self._notice = self._loop.call_later(NOTICE_AFTER_SECONDS, self._still_stopping)
            return
        print(f"stopped at once ({sig.name})", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(128 + sig.value)

    def _still_stopping(self) -> None:
        print(
            f"stopping: {self.waiting_for} (press Ctrl-C again to stop at once)",
            file=sys.stderr,
            flush=True,
        )


def close_deadline(stop: StopSignals, configured: float) -> float:
    """How long a close lets running turns finish: shorter after a Ctrl-C.

    A person who pressed Ctrl-C is not kept waiting for a slow model: a turn
    still running then is canceled and recorded so (its message is kept,
    not run again); queued input waits for the next start.
    """
    return min(configured, INTERRUPT_CLOSE_SECONDS) if stop.interrupted else configured


async def first_of(*work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` together until one ends, then cancel the others.

    The one that ended decides (the earliest argument, when several ended
    together): its error, if it failed, is raised here.
    """
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if task in done:
            task.result()
            return
