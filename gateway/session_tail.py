"""``gateway sessions tail``: a session as it is written, one readable line per step.

The store's watcher (every backend has one) yields each entry once, in
append order — the backlog after a starting point, then every new entry as
it lands, also when another process writes. Each entry becomes at most a few
lines a person can follow: the user's message (its wake header shortened to
where it came from), the assistant's text, each tool call and its result,
and one line for each bookkeeping step (a turn's end, a queued message, a
delegation, a compaction). ``--json`` prints the stored wire form instead,
one entry per line, for ``jq``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import tzinfo

import orjson

from threads.llm.echo import split_wake
from threads.messages import Message, TextPart, ToolCallPart, ToolResultPart
from threads.store.base import SessionStore, Watcher
from threads.store.codec import entry_to_wire
from threads.store.entries import (
    ApprovalDecisionEntry,
    ApprovalRequestEntry,
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    CustomMessageEntry,
    Entry,
    InfoEntry,
    LabelEntry,
    LeafEntry,
    MessageEntry,
    PoolReceiptEntry,
    ReceiptEntry,
    TurnEntry,
)

WIDTH = 240
"""A line is cut here: the transcript (``gateway sessions history``) keeps it whole."""


class NotWatchableError(LookupError):
    """A store that cannot follow a session (it has no watcher)."""


def lines_of(entry: Entry, tz: tzinfo) -> list[str]:
    """What a person reads for one entry: a time, then who did what."""
    stamp = entry.created.astimezone(tz).strftime("%H:%M:%S")
    return [f"{stamp} {line}" for line in _describe(entry)]


def _describe(entry: Entry) -> list[str]:
    if isinstance(entry, MessageEntry):
        return _message(entry.message)
    if isinstance(entry, CustomMessageEntry):
        return [f"note ({entry.kind}): {_flat(entry.message.text())}"]
    if isinstance(entry, TurnEntry):
        return [_turn(entry)]
    if isinstance(entry, ReceiptEntry):
        return [_receipt(entry)]
    if isinstance(entry, PoolReceiptEntry):
        return [_pool(entry)]
    if isinstance(entry, CompactionEntry):
        what = "trimmed old tool results" if entry.trim else "summarized what came before"
        return [
            f"· compacted ({entry.reason or 'manual'}): {what}, keeping from {entry.first_kept}"
        ]
    if isinstance(entry, BranchSummaryEntry):
        return [f"· branch summary: {_flat(entry.summary)}"]
    if isinstance(entry, LeafEntry):
        return [f"· moved back to {entry.entry or 'the start'}"]
    if isinstance(entry, InfoEntry):
        changes = [f"title {entry.title!r}"] if entry.title else []
        changes += [f"{k}={v!r}" for k, v in sorted(entry.meta.items())]
        return [f"· set {', '.join(changes)}"]
    if isinstance(entry, LabelEntry):
        return [f"· labeled {entry.entry} {entry.name!r}"]
    if isinstance(entry, ApprovalRequestEntry):
        return [f"· {entry.tool} waits for approval ({entry.reason or 'approval required'})"]
    if isinstance(entry, ApprovalDecisionEntry):
        who = f" by {entry.who}" if entry.who else ""
        return [f"· decided {entry.outcome}{who} for call {entry.call_id}"]
    if isinstance(entry, CustomEntry):
        return [f"· {entry.kind}"]
    return [f"· {entry.TYPE}"]


def _message(message: Message) -> list[str]:
    out = []
    for part in message.content:
        if isinstance(part, TextPart) and part.text.strip():
            if message.role == "user":
                fields, body = split_wake(part.text)
                source = fields.get("source")
                who = f"user ({source})" if source else "user"
                out.append(f"{who}: {_flat(body)}")
            else:
                out.append(f"{message.role}: {_flat(part.text)}")
        elif isinstance(part, ToolCallPart):
            args = orjson.dumps(dict(part.args)).decode()
            out.append(_cut(f"→ {part.name}({args})"))
        elif isinstance(part, ToolResultPart):
            arrow = f"← {part.name} failed" if part.is_error else f"← {part.name}"
            out.append(f"{arrow}: {_flat(part.content)}")
    return out


def _turn(entry: TurnEntry) -> str:
    run = entry.run_id.rpartition("-")[2] or entry.run_id
    how = "canceled" if entry.canceled else entry.stop_reason or "ended"
    details = [f"{entry.steps} step{'s' if entry.steps != 1 else ''}"]
    if entry.usage:
        details.append(f"{entry.usage.total_tokens} tokens")
    line = f"· turn {run} {how} ({', '.join(details)})"
    return _cut(f"{line}: {entry.err}") if entry.err else line


def _receipt(entry: ReceiptEntry) -> str:
    if entry.msg is not None:
        _fields, body = split_wake(entry.msg.text())
        kind = "steer" if entry.status == "queued" else "queued"
        return f"· {kind}: {_flat(body)}"
    return f"· message {entry.receipt} {entry.status}"


def _pool(entry: PoolReceiptEntry) -> str:
    if entry.status == "accepted" and not entry.receipt:
        return f"· delegated to {entry.child}: {_flat(entry.prompt)}"
    tail = f": {_flat(entry.stop)}" if entry.stop else ""
    return _cut(f"· delegation to {entry.child} {entry.status}{tail}")


def _flat(text: str) -> str:
    return _cut(" ".join(text.split()))


def _cut(text: str) -> str:
    return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"


async def follow(
    store: SessionStore,
    session_id: str,
    *,
    last: int,
    tz: tzinfo,
    write: Callable[[str], None],
    as_json: bool = False,
) -> None:
    """Print the session's last ``last`` entries, then every entry as it lands; runs until cancelled.

    Raises :class:`NotWatchableError` for a store without a watcher, and what
    the watcher raises (the session deleted under it: ``NotFoundError``).
    """
    if not isinstance(store, Watcher):
        raise NotWatchableError(f"the {type(store).__name__} store cannot follow a session")
    entries = (await store.load(session_id)).entries
    start = max(0, len(entries) - last)
    after = entries[start - 1].id if start else ""
    async for entry in store.watch(session_id, after):
        if as_json:
            write(orjson.dumps(entry_to_wire(entry)).decode())
            continue
        for line in lines_of(entry, tz):
            write(line)
