"""A live session keeps the history it loaded as its stored lines, and reads back equal values."""

from __future__ import annotations

import dataclasses
import sys
from datetime import UTC, datetime

from tests.threads.conftest import HandAgent, plant, stored
from threads.entry_log import EntryLog, Kinds, LogParts
from threads.ids import new_entry_id, new_session_id
from threads.messages import Message, Usage
from threads.session import Session
from threads.store.base import SessionStore
from threads.store.codec import encode_entry
from threads.store.entries import (
    Entry,
    Header,
    InfoEntry,
    MessageEntry,
    ReceiptEntry,
    TurnEntry,
)
from threads.store.packed import BLOCK


def history(turns: int) -> list[Entry]:
    """``turns`` turns as a gateway writes them: prompt (with its wake), answer, ledger."""
    header_id = "s_x"
    out: list[Entry] = []
    parent = ""
    for n in range(1, turns + 1):
        run_id = f"{header_id}-t{n}"
        for entry in (
            MessageEntry(
                id=new_entry_id(),
                message=Message.user(f"question {n}"),
                run_id=run_id,
                wake={"source": "web", "caller": {"kind": "user", "channel": "web"}},
            ),
            MessageEntry(id=new_entry_id(), message=Message.assistant(f"answer {n}")),
            TurnEntry(id=new_entry_id(), run_id=run_id, usage=Usage(input_tokens=n)),
        ):
            linked = dataclasses.replace(entry, parent=parent)
            out.append(linked)
            parent = linked.id
    return out


async def test_an_opened_session_keeps_its_history_as_lines_and_reads_it_back_equal(
    session_store: SessionStore,
) -> None:
    header = Header(id=new_session_id(), created=datetime.now(UTC))
    turns = history(50)
    entries = [*turns, InfoEntry(id=new_entry_id(), parent=turns[-1].id, title="named")]
    await plant(session_store, header, entries)
    session = await Session.open(session_store, header.id, HandAgent())
    log = session._tree.entries
    assert log.lines_kept == len(entries)
    assert session.entries() == await stored(session_store, header.id)
    assert session.path() == entries
    assert session.title() == "named"
    assert session.usage().total.input_tokens == sum(range(1, 51))
    assert [m.text() for m in session.context()][-2:] == ["question 50", "answer 50"]
    assert session._tree.by_id[entries[10].id] == entries[10]


async def test_a_turn_on_an_opened_session_decodes_none_of_its_history(
    session_store: SessionStore,
) -> None:
    header = Header(id=new_session_id(), created=datetime.now(UTC))
    await plant(session_store, header, history(30))
    agent = HandAgent()
    session = await Session.open(session_store, header.id, agent)
    turn = await session.send(Message.user("one more"))
    await turn.wait()
    (run,) = agent.runs
    assert [m.text() for m in run.messages][-3:] == ["question 30", "answer 30", "one more"]
    log = session._tree.entries
    assert len(log) > 90
    assert log.lines_kept == len(log)  # the turn's entries too, as the store wrote them
    await session.close()


async def test_a_session_that_grew_live_keeps_what_it_wrote_as_the_stored_lines(
    session_store: SessionStore,
) -> None:
    agent = HandAgent()
    session = await Session.create(session_store, agent)
    for n in range(30):
        turn = await session.send(Message.user(f"question {n}"))
        await turn.wait()
    log = session._tree.entries
    assert log.lines_kept == len(log) > BLOCK
    assert log.packed_bytes > 0
    assert session.entries() == await stored(session_store, session.id)
    assert session.path() == list(reversed(list(session.path_reversed())))
    assert [m.text() for m in session.context()][-2:] == ["question 29", "ok"]
    await session.close()


def test_kept_lines_are_packed_and_read_back_equal_and_kinds_are_read_alone() -> None:
    entries = history(100)
    log = EntryLog()
    for entry in entries:
        log.append(entry)
    lines = [encode_entry(e)[:-1] for e in entries]
    log.keep_lines(lines)
    assert log.lines_kept == len(entries)
    assert log.packed_bytes * 4 < sum(len(line) for line in lines)
    assert log.has_kind(TurnEntry.TYPE)
    assert not log.has_kind(ReceiptEntry.TYPE)
    turns = list(log.of_kind(TurnEntry.TYPE, newest_first=True))
    assert [t.run_id for t in turns][:2] == ["s_x-t100", "s_x-t99"]
    assert list(log) == entries
    assert list(reversed(log)) == entries[::-1]
    assert log[3:5] == entries[3:5]
    assert log[-1] == entries[-1]
    assert list(log.at([200, 3, 299, 64, 63])) == [entries[i] for i in (200, 3, 299, 64, 63)]


def test_kinds_are_a_byte_an_entry_and_read_as_the_kinds_they_were() -> None:
    written = ["message", "turn", "message", "outbound", "message", "info"] * 500
    kinds = Kinds(written)
    assert list(kinds) == written
    assert [kinds[at] for at in range(len(written))] == written
    assert kinds[2:5] == written[2:5]
    assert "outbound" in kinds
    assert "label" not in kinds
    assert 7 not in kinds
    assert list(kinds.positions("info")) == [at for at, k in enumerate(written) if k == "info"]
    assert list(kinds.positions("turn", newest_first=True))[:2] == [
        len(written) - 5,
        len(written) - 11,
    ]
    assert list(kinds.positions("label")) == []
    assert sys.getsizeof(kinds._codes) < 2 * len(written)  # a list was 8 bytes an entry
    log = EntryLog()
    for n in range(300):
        log.append(
            InfoEntry(id=f"e_{n}", title=str(n))
            if n % 3
            else TurnEntry(id=f"e_{n}", run_id="s_x-t1")
        )
    assert [e.id for e in log.of_kind(TurnEntry.TYPE, newest_first=True)][:2] == ["e_297", "e_294"]
    assert list(EntryLog.restored(_parts_of(log)).kinds()) == list(log.kinds())


def _parts_of(log: EntryLog) -> LogParts:
    lines = [encode_entry(entry).rstrip(b"\n") for entry in log]
    kept = EntryLog()
    for entry, line in zip(log, lines, strict=True):
        kept.append(entry, line)
    parts = kept.dump()
    assert parts is not None
    return parts
