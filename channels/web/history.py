"""A web chat's conversation as the page shows it, read from the chat's session.

Every tab of a chat, and a tab reloaded, shows the same conversation: the
last messages of the chat's current session, in order (docs/decisions/web-06):

- the person's messages (the text they typed, without the wake header, and
  the files they sent), queued ones included;
- what was sent to them: each send the outbound ledger recorded for the
  chat (answers, ``dispatch`` sends, notices), with its id, unless a policy
  blocked it or it failed; for turns from before the ledger, the final text
  answer or the ``dispatch`` sends to the user;
- the tool calls in between, one line each, grouped so the page can fold them.

Wakes from elsewhere (cron, other sessions, a child's report) and the model's
notes to itself are not part of the conversation and are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from channels.web.files import page_url
from threads.history import tool_summary
from threads.llm.echo import split_wake
from threads.messages import FilePart, Message, ToolCallPart, ToolResultPart
from threads.store.entries import (
    OUTBOUND_BLOCKED,
    OUTBOUND_FAILED,
    Entry,
    MessageEntry,
    OutboundEntry,
    ReceiptEntry,
)
from threads.tree import unsettled_receipts

Item = dict[str, Any]
Render = Callable[[str], str]

#: The ``to`` of a dispatch send that reaches the person in the chat.
USER_TARGETS = frozenset({"caller:user", "user"})


def chat_history(
    path: Sequence[Entry], entries: Sequence[Entry], *, limit: int, render: Render
) -> tuple[list[Item], bool]:
    """The last ``limit`` items of the conversation on ``path``, and whether older ones exist.

    ``entries`` are all of the session's entries (for input accepted but not
    run yet); ``render`` turns an answer's markdown into the page's HTML.
    """
    items: list[Item] = []
    results = {p.call_id: p for e in path if isinstance(e, MessageEntry) for p in _results(e)}
    recorded = {e.run_id for e in path if isinstance(e, OutboundEntry) and not e.record}
    refused = {
        e.record
        for e in path
        if isinstance(e, OutboundEntry) and e.status in (OUTBOUND_BLOCKED, OUTBOUND_FAILED)
    }
    run = ""
    for entry in path:
        if isinstance(entry, MessageEntry):
            run = entry.run_id or run
            answers = run not in recorded  # a turn from before the ledger
            items.extend(_items(entry.message, entry.wake, results, render, answers=answers))
        elif isinstance(entry, OutboundEntry) and _to_the_person(entry, refused):
            items.append(_bot(entry.text, render, entry.id))
    for receipt in unsettled_receipts(entries):
        if receipt.msg is not None:
            items.extend(_items(receipt.msg, receipt.wake, results, render, answers=False))
    items = _grouped(items)
    return items[-limit:] if limit else [], len(items) > limit


def message_ids(entries: Iterable[Entry]) -> set[str]:
    """The page's ids of the messages a session accepted (kept in each wake's ``meta``)."""
    found: set[str] = set()
    for entry in entries:
        wake = entry.wake if isinstance(entry, MessageEntry | ReceiptEntry) else None
        meta = wake.get("meta") if wake else None
        if isinstance(meta, Mapping) and isinstance(meta.get("message_id"), str):
            found.add(meta["message_id"])
    return found


def file_item(part: FilePart) -> Item:
    """A file as the page lists it under a message."""
    return {
        "name": part.name or "file",
        "type": part.media_type,
        "size": part.size,
        "url": page_url(part),
    }


def _results(entry: MessageEntry) -> list[ToolResultPart]:
    return entry.message.tool_results() if entry.message.role == "tool" else []


def _to_the_person(entry: OutboundEntry, refused: set[str]) -> bool:
    return (
        not entry.record
        and entry.id not in refused
        and entry.to.get("kind") == "channel"
        and entry.to.get("channel") == "web"
    )


def _items(
    message: Message,
    wake: Any,
    results: dict[str, ToolResultPart],
    render: Render,
    *,
    answers: bool,
) -> list[Item]:
    """The items of one message; its answers too when ``answers`` (no record holds them)."""
    if message.role == "user":
        return _user(message, wake)
    if message.role != "assistant":
        return []
    calls = message.tool_calls()
    if not calls:
        text = message.text()
        return [_bot(text, render)] if answers and text.strip() else []
    out: list[Item] = []
    for call in calls:
        result = results.get(call.id)
        if call.name == "dispatch":
            if answers and (result is None or not result.is_error):
                out.extend(_bot(body, render) for body in _sends_to_user(call))
        else:
            out.append(
                {
                    "role": "tool",
                    "name": call.name,
                    "summary": tool_summary(call, result),
                    "error": bool(result is not None and result.is_error),
                }
            )
    return out


def _user(message: Message, wake: Any) -> list[Item]:
    fields, body = split_wake(message.text())
    if fields.get("sender") != "user":
        return []  # a wake from cron, another session or the gateway itself
    item: Item = {
        "role": "user",
        "text": body,
        "files": [file_item(p) for p in message.content if isinstance(p, FilePart)],
    }
    meta = wake.get("meta") if isinstance(wake, Mapping) else None
    if isinstance(meta, Mapping) and isinstance(meta.get("message_id"), str):
        item["id"] = meta["message_id"]
    return [item]


def _bot(text: str, render: Render, ident: str = "") -> Item:
    item: Item = {"role": "bot", "text": text, "html": render(text)}
    if ident:
        item["id"] = ident  # the send's outbound id: the page shows an id once
    return item


def _sends_to_user(call: ToolCallPart) -> list[str]:
    sends = call.args.get("sends")
    if not isinstance(sends, list):
        return []
    return [
        send["body"]
        for send in sends
        if isinstance(send, dict)
        and send.get("to") in USER_TARGETS
        and isinstance(send.get("body"), str)
    ]


def _grouped(items: list[Item]) -> list[Item]:
    """Tool calls in a row become one ``tools`` item the page shows folded."""
    out: list[Item] = []
    for item in items:
        if item["role"] != "tool":
            out.append(item)
            continue
        call = {k: item[k] for k in ("name", "summary", "error")}
        if out and out[-1]["role"] == "tools":
            out[-1]["calls"].append(call)
        else:
            out.append({"role": "tools", "calls": [call]})
    return out
