"""A long session opens from its checkpoint, and means what an open of every line means."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.threads.conftest import HandAgent, plant
from threads import checkpoint
from threads.checkpoint import open_session
from threads.errors import CorruptError, StaleError
from threads.ids import new_entry_id, new_session_id
from threads.messages import Message, Usage
from threads.outbound import mark, send_id
from threads.session import Session
from threads.store import open_store
from threads.store.base import SessionStore
from threads.store.checkpoints import DIRECTORY, decode_checkpoint, encode_checkpoint
from threads.store.entries import (
    ApprovalAuditEntry,
    CompactionEntry,
    Entry,
    Header,
    InfoEntry,
    MessageEntry,
    OutboundEntry,
    ReceiptEntry,
    TurnEntry,
)
from threads.store.packed import DICTIONARY_ID
from threads.tree import reparent

EVERY = 20
"""Entries an open decodes past a checkpoint before it leaves one, in these tests."""


@pytest.fixture(autouse=True)
def small_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "CHECKPOINT_AFTER", EVERY)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = open_store(f"jsonl://{tmp_path / 'sessions'}")
    yield opened
    await opened.close()


def turns(header_id: str, first: int, count: int, parent: str) -> list[Entry]:
    """``count`` turns as a gateway writes them, the fifth of each compacting before it,
    every other one sending its answer (a send record and its mark: ids of every shape
    the id index numbers, decision perf-28)."""
    out: list[Entry] = []
    for n in range(first, first + count):
        run_id = f"{header_id}-t{n}"
        prompt = MessageEntry(
            id=new_entry_id(),
            message=Message.user(f"question {n}"),
            run_id=run_id,
            wake={"source": "web", "origin": f"o-{n}"} if n % 7 == 0 else {"source": "web"},
        )
        batch: list[Entry] = [prompt]
        if n % 5 == 0:
            batch.append(
                CompactionEntry(
                    id=new_entry_id(), first_kept=prompt.id, summary=f"before {n}", pinned=()
                )
            )
        batch.append(MessageEntry(id=new_entry_id(), message=Message.assistant(f"answer {n}")))
        if n % 2 == 0:
            to = {"kind": "channel", "channel": "web", "chat": "c", "key": "web:c"}
            record = OutboundEntry(
                id=send_id(run_id, 1, 0), status="pending", run_id=run_id, kind="reply", to=to
            )
            batch += [record, mark(record, "delivered")]
        batch.append(TurnEntry(id=new_entry_id(), run_id=run_id, usage=Usage(input_tokens=n)))
        if n % 3 == 0:
            batch.append(InfoEntry(id=new_entry_id(), title=f"title {n}"))
        for entry in batch:
            out.append(dataclasses.replace(entry, parent=parent))
            parent = entry.id
    return out


async def planted(store: SessionStore) -> tuple[str, list[Entry]]:
    """A session of 30 compacting turns, planted whole; its id and entries."""
    sid = new_session_id()
    history = turns(sid, 1, 30, "")
    await plant(store, Header(id=sid, created=datetime.now(UTC)), history)
    return sid, history


async def checkpointed(store: SessionStore) -> tuple[str, list[Entry]]:
    """A planted session opened once, which leaves its checkpoint."""
    sid, history = await planted(store)
    await (await open_session(store, sid, HandAgent())).close()
    return sid, history


async def whole(store: SessionStore, session_id: str) -> Session:
    """The session as an open of every line makes it."""
    return Session.from_loaded(store, await store.load(session_id), HandAgent())


async def assert_same(opened: Session, full: Session) -> None:
    assert opened.entry_count == full.entry_count
    assert opened.leaf == full.leaf
    assert opened.context() == full.context()
    assert opened.path() == full.path()
    assert opened.entries() == full.entries()
    assert opened.queue() == full.queue()
    assert opened.title() == full.title()
    assert opened.usage() == full.usage()
    assert opened._tree.highest_turn() == full._tree.highest_turn()
    assert opened._tree.origins == full._tree.origins
    assert opened._tree.unmarked == full._tree.unmarked
    for entry in full.entries()[:: max(1, full.entry_count // 50)]:
        assert opened._tree.by_id[entry.id] == entry
    assert new_entry_id() not in opened._tree.by_id


async def test_a_long_compacted_session_opens_from_its_checkpoint_as_it_would_whole(
    store: SessionStore,
) -> None:
    sid, _history = await planted(store)
    first = await open_session(store, sid, HandAgent())
    assert first._tree.restored_from == 0
    await first.close()
    again = await open_session(store, sid, HandAgent())
    assert again._tree.restored_from == again.entry_count
    await assert_same(again, await whole(store, sid))


async def test_what_was_written_after_the_checkpoint_is_read_from_its_lines(
    store: SessionStore,
) -> None:
    sid, _history = await checkpointed(store)
    live = await open_session(store, sid, HandAgent())
    before = live.entry_count
    await live.send(Message.user("one more"))
    await live.wait_idle()
    await live.close()
    reopened = await open_session(store, sid, HandAgent())
    assert reopened._tree.restored_from == before
    assert reopened.entry_count > before
    await assert_same(reopened, await whole(store, sid))


async def test_a_checkpoint_is_left_again_once_enough_was_written_after_it(
    store: SessionStore,
) -> None:
    sid, history = await checkpointed(store)
    more = turns(sid, 31, 10, history[-1].id)
    await store.append(sid, more)
    await (await open_session(store, sid, HandAgent())).close()
    reopened = await open_session(store, sid, HandAgent())
    assert reopened._tree.restored_from == len(history) + len(more)
    await assert_same(reopened, await whole(store, sid))


async def test_a_line_damaged_before_the_checkpoint_still_fails_the_open(
    store: SessionStore, tmp_path: Path
) -> None:
    sid, _history = await checkpointed(store)
    path = tmp_path / "sessions" / f"{sid}.jsonl"
    data = path.read_bytes()
    second = data.index(b"\n", data.index(b"\n") + 1)
    path.write_bytes(data[:second] + b"\n{not json" + data[second:])
    with pytest.raises(CorruptError) as caught:
        await open_session(store, sid, HandAgent())
    assert caught.value.line == 3


async def test_a_torn_checkpoint_file_is_read_as_none(
    store: SessionStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sid, _history = await checkpointed(store)
    kept = tmp_path / "sessions" / DIRECTORY / sid
    kept.write_bytes(kept.read_bytes()[:-10])
    opened = await open_session(store, sid, HandAgent())
    assert opened._tree.restored_from == 0
    assert "checkpoint cannot be read" in caplog.text
    await assert_same(opened, await whole(store, sid))


async def test_input_left_unsettled_and_runs_left_unfinished_before_it_are_restored(
    store: SessionStore,
) -> None:
    sid = new_session_id()
    history = turns(sid, 1, 30, "")
    run_id = f"{sid}-t31"
    receipt = ReceiptEntry(
        id=new_entry_id(),
        status="accepted",
        msg=Message.user("waiting"),
        run_id=f"{sid}-t32",
        turn=new_entry_id(),
        policy="queue",
        wake={"source": "web"},
        parent=history[-1].id,
    )
    dead = MessageEntry(
        id=new_entry_id(), message=Message.user("cut off"), run_id=run_id, parent=receipt.id
    )
    record = OutboundEntry(
        id=new_entry_id(),
        status="pending",
        run_id=run_id,
        kind="reply",
        to={"kind": "channel", "channel": "web", "chat": "c", "key": "web:c"},
        text="sent?",
        parent=dead.id,
    )
    entries = [*history, receipt, dead, record]
    await plant(store, Header(id=sid, created=datetime.now(UTC)), entries)
    await (await open_session(store, sid, HandAgent())).close(drain=False)
    opened = await open_session(store, sid, HandAgent())
    assert opened._tree.restored_from == len(entries)
    full = await whole(store, sid)
    unfinished = opened._driver._inbox._unfinished
    assert [p.run_id for p in unfinished] == [run_id]
    assert unfinished == full._driver._inbox._unfinished
    assert opened.queue() == full.queue() != []
    assert list(opened._tree.unmarked) == [record.id]
    await assert_same(opened, full)


async def test_a_session_never_compacted_or_with_approvals_leaves_no_checkpoint(
    store: SessionStore, tmp_path: Path
) -> None:
    plain = new_session_id()
    history = [e for e in turns(plain, 1, 30, "") if not isinstance(e, CompactionEntry)]
    await plant(store, Header(id=plain, created=datetime.now(UTC)), reparent(history))
    approved = new_session_id()
    history = turns(approved, 1, 30, "")
    audit = ApprovalAuditEntry(id=new_entry_id(), step="request", parent=history[-1].id)
    await plant(store, Header(id=approved, created=datetime.now(UTC)), [*history, audit])
    for sid in (plain, approved):
        await (await open_session(store, sid, HandAgent())).close()
        assert not (tmp_path / "sessions" / DIRECTORY / sid).exists()


async def test_a_deleted_session_leaves_no_checkpoint(store: SessionStore, tmp_path: Path) -> None:
    sid, _history = await checkpointed(store)
    kept = tmp_path / "sessions" / DIRECTORY / sid
    assert kept.exists()
    await store.release(sid)  # type: ignore[attr-defined]
    await store.delete(sid)
    assert not kept.exists()


async def long_session(store: SessionStore) -> str:
    """A session past a mebibyte, whose open counts its lines for its first write."""
    sid = new_session_id()
    history = turns(sid, 1, 30, "")
    bulk = MessageEntry(
        id=new_entry_id(), message=Message.user("x" * (1 << 20)), parent=history[-1].id
    )
    await plant(store, Header(id=sid, created=datetime.now(UTC)), [*history, bulk])
    return sid


async def test_a_long_sessions_first_write_after_its_open_lands_and_counts(
    store: SessionStore,
) -> None:
    sid = await long_session(store)
    opened = await open_session(store, sid, HandAgent())
    await opened.append_messages([Message.user("after")])
    await opened.close()
    assert (await whole(store, sid)).entry_count == opened.entry_count


async def test_a_long_session_written_after_its_open_refuses_the_stale_view(
    store: SessionStore,
) -> None:
    sid = await long_session(store)
    behind = await open_session(store, sid, HandAgent())
    leaf = (await store.load(sid)).entries[-1].id
    moved = MessageEntry(id=new_entry_id(), message=Message.user("moved on"), parent=leaf)
    await store.append(sid, [moved])  # another writer, after the open counted the lines
    await store.release(sid)  # type: ignore[attr-defined]
    with pytest.raises(StaleError, match=f"session {sid} changed since it was opened"):
        await behind.append_messages([Message.user("would fork the line")])


def rewrite_state(kept: Path, old: bytes, new: bytes) -> None:
    """The checkpoint file at ``kept`` with ``old`` in its state's head made ``new``, its
    CRCs made again: only what the state says changes."""
    session = kept.name
    found = decode_checkpoint(session, kept.read_bytes())
    assert found is not None
    head, rest = found.state.split(b"\n", 1)
    assert old in head
    state = head.replace(old, new, 1) + b"\n" + rest
    kept.write_bytes(encode_checkpoint(session, found.mark, state, found.held))


async def test_a_checkpoint_of_another_state_format_is_read_as_none(
    store: SessionStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sid, _history = await checkpointed(store)
    rewrite_state(tmp_path / "sessions" / DIRECTORY / sid, b'"v":%d' % checkpoint.STATE, b'"v":1')
    opened = await open_session(store, sid, HandAgent())
    assert opened._tree.restored_from == 0
    assert "state cannot be read (not a state of this build" in caplog.text
    await assert_same(opened, await whole(store, sid))


async def test_a_checkpoint_packed_against_another_dictionary_is_read_as_none(
    store: SessionStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sid, _history = await checkpointed(store)
    named = b'"dictionary":%d' % DICTIONARY_ID
    rewrite_state(tmp_path / "sessions" / DIRECTORY / sid, named, named + b"1")
    opened = await open_session(store, sid, HandAgent())
    assert opened._tree.restored_from == 0
    assert "state cannot be read (not a state of this build" in caplog.text
    await assert_same(opened, await whole(store, sid))
