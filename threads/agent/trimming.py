"""The cheap pre-pass: stub old tool results, and when that is enough, summarize nothing.

When the context nears the window and ``compaction.keep_tool_results`` is
set, every tool result in the context but the newest N is replaced with a
stub naming the call. If the context then fits the window minus its reserve,
a compaction entry with reason ``trim`` lands instead of a summary: its trim
record names each stubbed result and the text shown in its place, and every
later context build replays exactly that record (``threads.tree``) — never
the setting, so changing it later never changes what a recorded trim shows.
The stored results stay in the file.
"""

from __future__ import annotations

from config.models import ModelSettings
from threads.agent.compaction import estimate_tokens, latest_summary
from threads.context import replay_trims
from threads.ids import new_entry_id
from threads.messages import Message, ToolResultPart
from threads.session import Session
from threads.store.entries import CompactionEntry, MessageEntry
from threads.turns import Run

TRIM = "trim"


def stub(name: str, call_id: str) -> str:
    return f"[cleared tool result {name} {call_id}]"


def trim_record(session: Session, keep: int) -> dict[str, list[dict[str, str]]]:
    """The stubs for every tool result in the context but the newest ``keep``; none: empty."""
    path = session.path()
    summary = latest_summary(path)
    start = 0
    if summary is not None:
        start = next((i for i, e in enumerate(path) if e.id == summary.first_kept), 0)
    results: list[tuple[str, ToolResultPart]] = []
    for entry in path[start:]:
        if isinstance(entry, MessageEntry) and entry.message.role == "tool":
            results += [(entry.id, p) for p in entry.message.tool_results()]
    old = results[: max(len(results) - keep, 0)]
    stubs = [
        {"entry": entry_id, "call_id": part.call_id, "content": stub(part.name, part.call_id)}
        for entry_id, part in old
        if part.content != stub(part.name, part.call_id)
    ]
    return {"stubs": stubs} if stubs else {}


def trimmed_context(session: Session, record: dict[str, list[dict[str, str]]]) -> list[Message]:
    """The context as it reads once ``record`` is replayed over it."""
    return replay_trims(session.context(), record)


async def trim(
    session: Session, settings: ModelSettings, keep: int, *, run: Run | None = None
) -> CompactionEntry | None:
    """Write a trim when stubbing old results brings the context under the line; else None."""
    record = trim_record(session, keep)
    if not record:
        return None
    after = estimate_tokens(trimmed_context(session, record))
    if after > settings.context_window - settings.reserve_tokens:
        return None
    summary = latest_summary(session.path())
    path = session.path()
    boundary = summary.first_kept if summary is not None else path[0].id
    entry = CompactionEntry(
        id=new_entry_id(),
        first_kept=boundary,
        tokens_before=estimate_tokens(session.context()),
        reason=TRIM,
        trim=record,
    )
    await session.apply_compaction(entry, run=run)
    return entry
