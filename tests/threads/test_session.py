"""Sessions: open validates and only reads, the context, branch, fork, bookkeeping, one writer, close."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from tests.threads.conftest import (
    HandAgent,
    Hold,
    kinds,
    plant,
    stored,
    texts,
)
from threads.context import INTERRUPTED
from threads.errors import (
    BusyError,
    ClosedError,
    CorruptError,
    LockedError,
    ReservedKeyError,
    StaleError,
)
from threads.ids import new_entry_id, new_session_id
from threads.messages import Message, ToolCallPart, ToolResultPart
from threads.session import Session
from threads.store.base import SessionStore
from threads.store.entries import (
    CompactionEntry,
    CustomEntry,
    Entry,
    Header,
    LabelEntry,
    LeafEntry,
    MessageEntry,
    ParentRef,
    ReceiptEntry,
    TurnEntry,
)
from threads.store.memory import MemoryStore
from threads.turns import Outcome, Policy, Run, RunResult


def _header() -> Header:
    return Header(id=new_session_id(), created=datetime.now(UTC))


def _msg(text: str, parent: str = "", **extra: object) -> MessageEntry:
    return MessageEntry(id=new_entry_id(), parent=parent, message=Message.user(text), **extra)  # type: ignore[arg-type]


# -- open validates the tree, and only reads


async def test_open_refuses_a_duplicate_entry_id_naming_the_entry(
    session_store: SessionStore,
) -> None:
    header = _header()
    first = _msg("one")
    again = MessageEntry(id=first.id, parent=first.id, message=Message.user("two"))
    await plant(session_store, header, [first, again])
    with pytest.raises(CorruptError, match=f"entry {first.id}.*duplicate entry id") as caught:
        await Session.open(session_store, header.id, HandAgent())
    assert caught.value.entry == first.id
    assert caught.value.line == 3


async def test_open_refuses_a_parent_that_is_not_an_earlier_entry(
    session_store: SessionStore,
) -> None:
    header = _header()
    later = _msg("later")
    early = _msg("early", parent=later.id)
    await plant(session_store, header, [early, later])
    with pytest.raises(CorruptError, match=f"entry {early.id}: parent {later.id}"):
        await Session.open(session_store, header.id, HandAgent())


async def test_open_refuses_a_leaf_entry_whose_target_is_not_earlier(
    session_store: SessionStore,
) -> None:
    header = _header()
    first = _msg("one")
    ahead = new_entry_id()
    leaf = LeafEntry(id=new_entry_id(), parent=first.id, entry=ahead)
    await plant(session_store, header, [first, leaf])
    with pytest.raises(CorruptError, match=f"entry {leaf.id}: leaf target {ahead}"):
        await Session.open(session_store, header.id, HandAgent())


async def test_a_leaf_entry_may_target_the_root(session_store: SessionStore) -> None:
    header = _header()
    first = _msg("one")
    to_root = LeafEntry(id=new_entry_id(), parent=first.id, entry="")
    await plant(session_store, header, [first, to_root])
    session = await Session.open(session_store, header.id, HandAgent())
    assert session.leaf == ""
    assert session.context() == []


async def test_open_writes_nothing_takes_no_lease_and_runs_nothing(
    session_store: SessionStore,
) -> None:
    header = _header()
    prompt = _msg("was running", run_id=f"{header.id}-t1")
    waiting = ReceiptEntry(
        id=new_entry_id(),
        parent=prompt.id,
        status="accepted",
        msg=Message.user("waiting"),
        run_id=f"{header.id}-t2",
        turn=new_entry_id(),
        policy="queue",
    )
    await plant(session_store, header, [prompt, waiting])
    agent = HandAgent()
    reader = await Session.open(session_store, header.id, agent)
    assert len(await stored(session_store, header.id)) == 2
    assert [m.text() for _, m, _ in reader.queue()] == ["waiting"]
    assert reader.state == "pending"
    assert agent.runs == []
    # No lease was taken: another session value becomes the writer.
    writer = await Session.open(session_store, header.id, agent)
    await writer.custom("note", {"n": 1})
    assert agent.runs == []
    await writer.close()


# -- the context


async def test_the_context_is_the_leaf_path_with_the_latest_compaction_summary_in_its_place(
    session_store: SessionStore,
) -> None:
    session = await Session.create(session_store, HandAgent())
    await session.append_messages([Message.user("one"), Message.assistant("two")])
    await session.custom("state", {"x": 1})
    await session.label(session.leaf, "here")
    await session.set_info(title="a title")
    await session.append_messages([Message.user("three")])
    kept = session.leaf
    await session.append_messages([Message.assistant("four")])
    await session.apply_compaction(
        CompactionEntry(id=new_entry_id(), first_kept=kept, summary="one to two")
    )
    await session.append_messages([Message.user("five")])
    context = session.context()
    assert [m.text() for m in context] == [
        "<summary>\none to two\n</summary>",
        "three",
        "four",
        "five",
    ]
    reopened = await Session.open(session_store, session.id, HandAgent())
    assert reopened.context() == context
    await session.close()


async def test_branch_summaries_sit_where_they_were_written(session_store: SessionStore) -> None:
    session = await Session.create(session_store, HandAgent())
    await session.append_messages([Message.user("root question")])
    fork_point = session.leaf
    await session.append_messages([Message.assistant("abandoned answer")])
    await session.branch(fork_point, summary="tried an answer that did not help")
    await session.append_messages([Message.assistant("better answer")])
    assert texts_of(session) == [
        "root question",
        "<summary>\ntried an answer that did not help\n</summary>",
        "better answer",
    ]
    await session.close()


def texts_of(session: Session) -> list[str]:
    return [m.text() for m in session.context()]


async def test_a_tool_call_without_a_result_gets_the_interruption_result_last(
    session_store: SessionStore,
) -> None:
    session = await Session.create(session_store, HandAgent())
    call = ToolCallPart(id="c1", name="search", args={"q": "x"})
    await session.append_messages(
        [Message.user("look"), Message(role="assistant", content=(call,))]
    )
    context = session.context()
    assert context[-1] == Message(
        role="tool",
        content=(ToolResultPart(call_id="c1", name="search", content=INTERRUPTED, is_error=True),),
    )
    assert INTERRUPTED == "no result recorded: the call was interrupted"
    await session.custom_message("note", Message.user("a note"))
    after = session.context()
    assert [m.role for m in after] == ["user", "assistant", "tool", "user"]
    await session.close()


async def test_bookkeeping_entries_never_enter_the_context(session_store: SessionStore) -> None:
    session = await Session.create(session_store, HandAgent())
    await session.append_messages([Message.user("hello")])
    await session.label(session.leaf, "start")
    await session.set_info(title="t", meta={"k": "v"})
    await session.custom("state", [1, 2])
    await session.custom_message("note", Message.user("seen by the model"))
    assert texts_of(session) == ["hello", "seen by the model"]
    assert session.title() == "t"
    assert session.meta()["k"] == "v"
    assert kinds(await stored(session_store, session.id)) == [
        "message",
        "label",
        "info",
        "custom",
        "custom_message",
    ]
    await session.close()


# -- branch, fork, bookkeeping


async def test_branch_appends_a_leaf_entry_and_rewrites_nothing(
    session_store: SessionStore,
) -> None:
    session = await Session.create(session_store, HandAgent())
    await session.append_messages([Message.user("a"), Message.assistant("b")])
    first = session.entries()[0].id
    before = await stored(session_store, session.id)
    await session.branch(first)
    after = await stored(session_store, session.id)
    assert after[: len(before)] == before
    (leaf,) = after[len(before) :]
    assert isinstance(leaf, LeafEntry)
    assert leaf.entry == first
    assert texts_of(session) == ["a"]
    await session.append_messages([Message.assistant("c")])
    assert texts_of(session) == ["a", "c"]
    assert texts(await stored(session_store, session.id)) == ["a", "b", "c"]
    await session.close()


async def test_fork_copies_the_path_into_a_new_session_whose_header_names_its_origin(
    session_store: SessionStore,
) -> None:
    session = await Session.create(session_store, HandAgent())
    await session.append_messages([Message.user("a"), Message.assistant("b")])
    at = session.leaf
    await session.append_messages([Message.user("not copied")])
    fork = await session.fork(at, meta={"purpose": "try"})
    assert fork.id != session.id
    assert fork.header.parent == ParentRef(session=session.id, entry=at)
    loaded = await session_store.load(fork.id)
    assert loaded.header.parent == ParentRef(session=session.id, entry=at)
    assert [e.id for e in loaded.entries] == [e.id for e in session.path(at)]
    assert texts_of(fork) == ["a", "b"]
    assert texts_of(session) == ["a", "b", "not copied"]
    await session.branch(at)
    with pytest.raises(ValueError, match="is a leaf entry; fork the entry it names"):
        await session.fork(session.entries()[-1].id)
    await fork.close()
    await session.close()


async def test_a_fork_drops_the_input_still_waiting_on_the_copied_path(
    session_store: SessionStore,
) -> None:
    hold = Hold()
    session = await Session.create(session_store, HandAgent(hold.turn()))
    running = await session.send(Message.user("first"))
    await hold.reached()
    waiting = await session.send(Message.user("second"), policy=Policy.QUEUE)
    fork = await session.fork(session.leaf)
    (dropped,) = [e for e in fork.entries() if isinstance(e, ReceiptEntry) and e.receipt]
    assert dropped.status == "dropped"
    assert fork.queue() == []
    assert next(t for t in fork.entries() if isinstance(t, TurnEntry)).canceled
    reopened = await Session.open(session_store, fork.id, HandAgent())
    assert reopened.queue() == []
    hold.release.set()
    await running.wait(10)
    await waiting.wait(10)
    assert texts(await stored(session_store, session.id)).count("second") == 1
    await fork.close()
    await session.close()


async def test_set_info_refuses_weft_keys_and_writes_nothing(session_store: SessionStore) -> None:
    session = await Session.create(session_store, HandAgent())
    with pytest.raises(ReservedKeyError, match=r"weft\.public_id"):
        await session.set_info(title="x", meta={"weft.public_id": "p"})
    await session.set_info()
    assert await stored(session_store, session.id) == []
    await session.close()


async def test_label_and_custom_are_appended_in_order(session_store: SessionStore) -> None:
    session = await Session.create(session_store, HandAgent())
    await session.append_messages([Message.user("x")])
    target = session.leaf
    await session.label(target, "checkpoint")
    await session.custom("progress", {"done": 3})
    label, custom = (await stored(session_store, session.id))[1:]
    assert isinstance(label, LabelEntry)
    assert (label.entry, label.name) == (target, "checkpoint")
    assert isinstance(custom, CustomEntry)
    assert (custom.kind, custom.data) == ("progress", {"done": 3})
    await session.close()


async def test_custom_message_and_branch_are_refused_while_a_turn_runs(
    session_store: SessionStore,
) -> None:
    hold = Hold()
    session = await Session.create(session_store, HandAgent(hold.turn()))
    turn = await session.send(Message.user("go"))
    await hold.reached()
    before = await stored(session_store, session.id)
    with pytest.raises(BusyError, match=f"session {session.id} is busy"):
        await session.custom_message("note", Message.user("n"))
    with pytest.raises(BusyError):
        await session.branch("")
    await session.custom("allowed", None)
    assert len(await stored(session_store, session.id)) == len(before) + 1
    hold.release.set()
    await turn.wait(10)
    await session.close()


# -- one writer


async def test_a_second_writer_is_refused_until_the_first_closes(
    session_store: SessionStore,
) -> None:
    first = await Session.create(session_store, HandAgent())
    second = await Session.open(session_store, first.id, HandAgent())
    with pytest.raises(LockedError, match=first.id):
        await second.custom("x")
    await first.close()
    reopened = await Session.open(session_store, first.id, HandAgent())
    await reopened.custom("x")
    await reopened.close()


async def test_a_session_whose_view_fell_behind_refuses_to_write_with_stale_error(
    session_store: SessionStore,
) -> None:
    created = await Session.create(session_store, HandAgent())
    await created.close()
    behind = await Session.open(session_store, created.id, HandAgent())
    ahead = await Session.open(session_store, created.id, HandAgent())
    await ahead.append_messages([Message.user("moved on")])
    await ahead.close()
    with pytest.raises(StaleError, match=f"session {created.id} changed since it was opened"):
        await behind.append_messages([Message.user("would fork the line")])
    assert texts(await stored(session_store, created.id)) == ["moved on"]


# -- close


async def test_close_drains_the_running_turn_and_the_queue_then_seals_and_releases(
    session_store: SessionStore,
) -> None:
    hold = Hold()
    session = await Session.create(session_store, HandAgent(hold.turn("first done")))
    first = await session.send(Message.user("first"))
    await hold.reached()
    second = await session.send(Message.user("second"))
    closing = asyncio.create_task(session.close())
    await asyncio.sleep(0)
    with pytest.raises(ClosedError, match=f"session {session.id} is closed"):
        await session.send(Message.user("too late"))
    assert not closing.done()
    hold.release.set()
    await closing
    assert first.done()
    assert second.done()
    entries = await stored(session_store, session.id)
    assert texts(entries) == ["first", "first done", "second", "ok"]
    with pytest.raises(ClosedError):
        await session.custom("after close")
    assert session.context()[-1].text() == "ok"
    other = await Session.open(session_store, session.id, HandAgent())
    await other.custom("the lease was released")
    await other.close()


async def test_close_with_a_deadline_cancels_the_running_turn_and_keeps_the_queue_durable(
    session_store: SessionStore,
) -> None:
    hold = Hold()
    session = await Session.create(session_store, HandAgent(hold.turn()))
    first = await session.send(Message.user("first"))
    await hold.reached()
    second = await session.send(Message.user("second"))
    await session.close(timeout=0.01, drain=False)
    assert (await first.wait()) is not None
    assert first.outcome == "canceled"
    with pytest.raises(ClosedError):
        await second.wait()
    (turn,) = [e for e in await stored(session_store, session.id) if isinstance(e, TurnEntry)]
    assert turn.canceled
    reopened = await Session.open(session_store, session.id, HandAgent())
    assert [m.text() for _, m, _ in reopened.queue()] == ["second"]


class _HeldAppends(MemoryStore):
    """A memory store whose appends can be held at the door (to cancel callers mid-write)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def append(self, session: str, entries: Sequence[Entry], *, durable: bool = True) -> None:
        if self.hold:
            self.entered.set()
            await self.release.wait()
        await super().append(session, entries, durable=durable)


class _FlushingAgent:
    """One step: stage a message, make it durable, then answer."""

    def __init__(self, store: _HeldAppends) -> None:
        self.store = store

    async def run(self, run: Run) -> RunResult:
        run.stage(Message.assistant("working on it"))
        self.store.hold = True
        await run.flush()
        return RunResult(stop_reason="end_turn", text="done")


async def test_an_interrupt_during_a_step_write_leaves_memory_equal_to_the_store() -> None:
    store = _HeldAppends()
    session = await Session.create(store, _FlushingAgent(store))
    turn = await session.send(Message.user("go"))
    await asyncio.wait_for(store.entered.wait(), 5)
    assert session.interrupt("stop")
    store.hold = False
    store.release.set()
    await turn.wait(5)
    assert turn.outcome is Outcome.CANCELED
    stored = (await store.load(session.id)).entries
    assert [e.id for e in session.entries()] == [e.id for e in stored]
    assert any(isinstance(e, MessageEntry) and e.message.text() == "working on it" for e in stored)


class _DrainingAgent:
    """Drains the steers waiting for its run and remembers what it was handed."""

    def __init__(self) -> None:
        self.drained: list[str] = []

    async def run(self, run: Run) -> RunResult:
        self.drained.extend(m.text() for m in await run.drain())
        return RunResult(stop_reason="end_turn", text="ok")


async def test_a_steer_restored_after_a_restart_is_delivered_marked_injected() -> None:
    store = MemoryStore()
    header = Header(id=new_session_id())
    await store.create(header)
    prompt = "---\nsource: telegram\nthread: telegram:1\nsender: user\n---\nalso do this"
    await store.append(
        header.id,
        [
            ReceiptEntry(
                id=new_entry_id(), status="queued", msg=Message.user(prompt), policy="steer"
            )
        ],
    )
    agent = _DrainingAgent()
    session = await Session.open(store, header.id, agent)
    assert [policy for _, _, policy in session.queue()] == [Policy.STEER]
    turn = await session.send(Message.user("next message"))
    await turn.wait(5)
    (delivered,) = agent.drained
    assert "injected: true" in delivered
    assert delivered.endswith("also do this")
