"""Sessions with history, planted: a real turn's entries cloned into a session's file.

``bench/history.py`` makes its sessions' history this way rather than by
running thousands of turns: :func:`template_of` takes the wire form of a turn
the gateway just ran, and :func:`seed` writes a session of ``turns`` clones of
it, fresh ids and all, straight through the store, before the gateway first
opens the session. With ``compact_every`` the clones hold a compaction every
so many turns, as a long session that compacted as it grew does.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from threads.ids import new_entry_id, new_session_id
from threads.messages import Usage
from threads.store.codec import encode_header, entry_to_wire
from threads.store.entries import CompactionEntry, Entry, Header, MessageEntry


def template_of(entries: list[Entry]) -> list[dict[str, Any]]:
    """The wire form of the last turn in a session: its prompt (the last message
    entry with a run id) and every entry after it."""
    for index in range(len(entries) - 1, -1, -1):
        entry = entries[index]
        if isinstance(entry, MessageEntry) and entry.run_id:
            return [entry_to_wire(e) for e in entries[index:]]
    raise SystemExit("the template session holds no turn")


async def seed(
    store: Any, key: str, turns: int, template: list[dict[str, Any]], *, compact_every: int = 0
) -> None:
    """A session for ``key`` holding ``turns`` clones of the template turn, planted whole.

    The clones are the template's lines with fresh ids and run ids, of the
    shapes a gateway gives them (a minted entry id; an outbound record's id
    made from its run id); every field that named an entry of the template
    (a parent, a receipt, an outbound record) names the clone of that entry,
    and the first entry of each turn follows the last of the turn before
    (the format is the store's own: the template was written by a real turn).
    With ``compact_every``, every such turn holds a compaction after its
    prompt (:func:`compaction_line`).
    """
    header = Header(id=new_session_id(), meta={"key": key, "agent": "default"})
    lines = [encode_header(header)]
    template_run = str(template[0]["run_id"])
    last = ""
    for turn in range(1, turns + 1):
        run_id = f"{header.id}-t{turn}"
        ids = {
            wire["id"]: run_id + wire["id"][len(template_run) :]
            if wire["id"].startswith(template_run)
            else new_entry_id()
            for wire in template
        }
        compacts = compact_every > 0 and turn % compact_every == 0
        for index, wire in enumerate(template):
            line = {k: ids.get(v, v) if isinstance(v, str) else v for k, v in wire.items()}
            if index == 0:
                line.pop("parent", None)
                if last:
                    line["parent"] = last
            if "run_id" in line:
                line["run_id"] = run_id
            if index == 1 and compacts:
                compaction = compaction_line(prompt=str(line["parent"]), turns=turn)
                lines.append(compaction)
                line["parent"] = orjson.loads(compaction)["id"]
            lines.append(orjson.dumps(line) + b"\n")
        last = ids[template[-1]["id"]]
    await store.plant(header.id, b"".join(lines))
    await store.point(key, header.id)


def compaction_line(*, prompt: str, turns: int) -> bytes:
    """A threshold compaction as a turn writes it after its prompt: everything before the
    prompt summarized, the prompt kept on."""
    entry = CompactionEntry(
        id=new_entry_id(),
        parent=prompt,
        first_kept=prompt,
        summary=f"The user sent {turns - 1} short messages; each was answered with ok. " * 12,
        tokens_before=250_000,
        reason="threshold",
        summarizer_usage=Usage(input_tokens=250_000, output_tokens=300),
        summarizer_model={"model": "fake/bench"},
        range_hash=hashlib.sha256(str(turns).encode()).hexdigest(),
    )
    return orjson.dumps(entry_to_wire(entry)) + b"\n"
