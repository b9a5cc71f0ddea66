"""What the thread manager reports: ``check_session`` and ``health`` (seed 000).

Read-only views over the manager's live threads, its store and the process;
the gateway adds channel and cron figures through ``health_sources``.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import resource
import time
from typing import TYPE_CHECKING, Any

from threads import outbound
from threads.errors import NotFoundError, UnavailableError
from threads.keys import SessionKey
from threads.quarantine import UNREADABLE, Quarantined
from threads.store.base import location
from threads.store.codec import encode_entry
from threads.store.entries import Entry, MessageEntry, TurnEntry

if TYPE_CHECKING:
    from threads.manager import ThreadManager


async def check_session(manager: ThreadManager, key: SessionKey) -> dict[str, Any]:
    """Seed 000's three states: on disk or not, and the live thread when loaded.

    ``exists`` and ``thread_active`` tell them apart; a stored session adds
    its message count, size, last modification and agent, and the sends whose
    delivery is uncertain (a restart found them unconfirmed and could not
    repeat them, see :mod:`threads.outbound`); a loaded thread adds
    ``thread_state`` (running, pending or idle), its iterations, current tool
    and elapsed seconds, and the approval requests it waits on
    (``thread_awaiting_approval``, when there are any). A session that cannot
    be read adds ``quarantined``: where it is kept, the line and why.
    """
    thread = manager.thread(key)
    out: dict[str, Any] = {"session_key": str(key), "exists": False, "thread_active": False}
    header = thread.session.header if thread else None
    entries: list[Entry]
    if thread is not None:
        entries = thread.session.entries()
    else:
        session_id = await manager.store.resolve(key)
        if session_id is None:
            return out
        record = manager.quarantine.get(key)
        try:
            if record is None:
                loaded = await manager.store.load(session_id)
                header, entries = loaded.header, loaded.entries
        except NotFoundError:
            return out
        except UNREADABLE as exc:
            record = Quarantined.of(key, session_id, location(manager.store, session_id), exc)
        if record is not None:
            out.update(exists=True, session_id=session_id, quarantined=record.to_json())
            return out
    assert header is not None
    last = entries[-1].created if entries else header.created
    out.update(
        exists=True,
        session_id=header.id,
        message_count=sum(isinstance(e, MessageEntry) for e in entries),
        turn_count=sum(isinstance(e, TurnEntry) for e in entries),
        size_bytes=sum(len(encode_entry(e)) for e in entries),
        last_modified=last.isoformat(),
        agent=header.meta.get("agent", manager.config.default_agent),
        delivery_uncertain=outbound.uncertain_sends(entries),
    )
    if thread is not None:
        snap = thread.snapshot()
        out.update(
            thread_active=True,
            thread_state=snap["state"],
            thread_pending=snap["pending"],
            thread_iterations=snap["iterations"],
            thread_current_tool=snap["current_tool"],
            thread_elapsed_sec=snap["elapsed_sec"],
        )
        if snap.get("awaiting_approval"):
            out["thread_awaiting_approval"] = snap["awaiting_approval"]
    return out


async def health(manager: ThreadManager) -> dict[str, Any]:
    """Every active thread, with store, model, channel, cron and process figures.

    ``sessions`` says whether the store takes writes now (and, when it does
    not, for how long and how many writes wait) and lists the quarantined
    sessions.

    Channel and cron figures come from :attr:`ThreadManager.health_sources`, which the
    gateway fills (name → a function returning a value or an awaitable).
    """
    threads = [t.snapshot() for t in manager.threads()]
    out: dict[str, Any] = {
        "all_threads": threads,
        "threads": {
            "active": len(threads),
            "running": sum(t["state"] == "running" for t in threads),
            "pending": sum(t["state"] == "pending" for t in threads),
            "max_concurrent_turns": manager.config.threads.max_concurrent_turns,
            "turns_in_flight": manager.turns_in_flight,
        },
        "provider": {
            "default_model": manager.config.models.default,
            "providers": sorted(manager.config.models.providers),
        },
        "sessions": {
            "store": manager.config.store.safe_url,
            "backend": type(manager.store).__name__,
            "keys": await _key_count(manager),
            **manager.outage.snapshot(),
            "quarantined": manager.quarantine.listing(),
        },
        # Sends this start found unconfirmed and could not repeat: delivery uncertain.
        "outbound": {"uncertain": list(manager.ledger.uncertain)},
        "process": process_figures(manager.started_at),
    }
    for name, source in manager.health_sources.items():
        value = source()
        out[name] = await value if inspect.isawaitable(value) else value
    return out


async def _key_count(manager: ThreadManager) -> int | str:
    """How many session keys the store indexes; what went wrong when it cannot say now."""
    try:
        return len(await manager.store.keys())
    except UnavailableError as exc:
        return f"unknown: {exc}"


def process_figures(started_at: float) -> dict[str, Any]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rss = 0
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/self/statm") as handle:
        rss = int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return {
        "pid": os.getpid(),
        "uptime_seconds": round(time.time() - started_at, 1),
        "rss_bytes": rss,
        # The kernel's peak is sampled apart from the current figure: never below it.
        "max_rss_bytes": max(usage.ru_maxrss * 1024, rss),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
    }
