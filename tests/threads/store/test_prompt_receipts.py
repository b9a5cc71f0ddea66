"""A queued input's message and wake are stored once: its prompt refers to the receipt that holds them.

The prompt of a receipt whose id says it (``accepted_id``) names neither the
receipt nor its run (decision perf-12); one that does not names its receipt
(decision perf-04, the ``prompt_of_receipt`` golden).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.clock import ManualClock
from tests.threads.conftest import HandAgent, Hold, answer
from threads.entry_log import EntryLog
from threads.errors import CorruptError
from threads.messages import Message, WireError
from threads.session import Session, SessionOptions
from threads.store.codec import decode_entry, encode_entry, encode_header
from threads.store.entries import Header, MessageEntry, ReceiptEntry, accepted_id, injected_id
from threads.store.jsonl import JsonlStore
from threads.store.lines import decode_session, encode_batch
from threads.turns import Policy
from threads.wake import injected_message

GOLDEN = Path(__file__).parent / "golden"
T = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
WAKE = {"source": "web", "caller": {"kind": "user", "channel": "web", "user_id": "u1"}}


def receipt_and_prompt() -> tuple[ReceiptEntry, MessageEntry]:
    message = Message.user("---\nsource: web\n---\nhello while busy")
    receipt = ReceiptEntry(
        id="e_01JNA0000000000000000000R7",
        parent="e_01JNA0000000000000000000P0",
        created=T,
        status="accepted",
        msg=message,
        run_id="s_01JNA0000000000000000000S1-t2",
        turn="e_01JNA0000000000000000000M7",
        policy="queue",
        wake=WAKE,
    )
    prompt = MessageEntry(
        id="e_01JNA0000000000000000000M7",
        parent="e_01JNA0000000000000000000T1",
        created=T,
        message=message,
        run_id="s_01JNA0000000000000000000S1-t2",
        wake=WAKE,
        receipt=receipt.id,
    )
    return receipt, prompt


def test_the_prompt_line_leaves_the_message_and_wake_to_its_receipt() -> None:
    receipt, prompt = receipt_and_prompt()
    line = orjson.loads(encode_entry(prompt))
    assert line["v"] == 2  # a reader that does not know the reference refuses, loudly
    assert line["receipt"] == receipt.id
    assert "message" not in line
    assert "wake" not in line
    assert len(encode_entry(prompt)) < len(encode_entry(receipt))


def test_a_session_reads_the_prompt_whole_from_its_receipt() -> None:
    receipt, prompt = receipt_and_prompt()
    data = encode_header(Header(id="s_01JNA0000000000000000000S1", created=T)) + encode_batch(
        [receipt, prompt]
    )
    assert (GOLDEN / "prompt_of_receipt.jsonl").read_bytes() == data
    loaded = decode_session("s_01JNA0000000000000000000S1", data)
    assert loaded.entries == [receipt, prompt]


def test_a_prompt_whose_receipt_is_not_earlier_is_corrupt() -> None:
    _, prompt = receipt_and_prompt()
    data = encode_header(Header(id="s_01JNA0000000000000000000S1", created=T)) + encode_entry(
        prompt
    )
    with pytest.raises(CorruptError, match="receipt e_01JNA0000000000000000000R7"):
        decode_session("s_01JNA0000000000000000000S1", data)
    # Read alone, the line is a prompt whose message is still to be put back.
    assert decode_entry(encode_entry(prompt)).message == Message(role="user", content=())


async def test_a_message_queued_behind_a_turn_is_stored_once(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    hold = Hold()
    agent = HandAgent(hold.turn("first"), answer("second"))
    session = await Session.create(store, agent)
    first = await session.send(Message.user("the first message"))
    await hold.reached()
    queued = await session.send(Message.user("sent while busy"), policy=Policy.QUEUE, wake=WAKE)
    hold.release.set()
    await first.wait()
    await queued.wait()
    await session.close()
    data = (tmp_path / f"{session.id}.jsonl").read_bytes()
    assert data.count(b"sent while busy") == 1
    assert data.count(b'"user_id":"u1"') == 1
    again = await Session.open(store, session.id, agent)
    (prompt,) = [e for e in again.entries() if isinstance(e, MessageEntry) and e.receipt]
    assert prompt.message == Message.user("sent while busy")
    assert prompt.wake == WAKE
    await store.close()


def accepted_and_prompt(
    run_id: str = "s_01JNA0000000000000000000S1-t2",
) -> tuple[ReceiptEntry, MessageEntry]:
    """A receipt taken for a prompt that does not exist yet: its id is the prompt's."""
    receipt, prompt = receipt_and_prompt()
    receipt = ReceiptEntry(
        id=accepted_id(prompt.id),
        parent=receipt.parent,
        created=T,
        status="accepted",
        msg=receipt.msg,
        run_id=receipt.run_id,
        turn=prompt.id,
        policy="queue",
        wake=WAKE,
    )
    prompt = MessageEntry(
        id=prompt.id,
        parent=prompt.parent,
        created=T,
        message=prompt.message,
        run_id=run_id,
        wake=WAKE,
        receipt=receipt.id,
    )
    return receipt, prompt


def test_a_prompt_whose_id_says_its_receipt_names_neither_the_receipt_nor_its_run() -> None:
    receipt, prompt = accepted_and_prompt()
    receipt_line = orjson.loads(encode_entry(receipt))
    prompt_line = orjson.loads(encode_entry(prompt))
    # Readers before this shape refuse both lines loudly (they read receipts to v3, prompts to v2).
    assert receipt_line["v"] == 4
    assert prompt_line["v"] == 3
    assert "status" not in receipt_line  # v4 says accepted
    assert "turn" not in receipt_line  # its id says it
    assert "policy" not in receipt_line  # queue, the policy left unsaid
    assert sorted(prompt_line) == ["created", "id", "parent", "type", "v"]


def test_a_session_reads_a_prompt_whole_from_the_receipt_its_id_says() -> None:
    receipt, prompt = accepted_and_prompt()
    data = encode_header(Header(id="s_01JNA0000000000000000000S1", created=T)) + encode_batch(
        [receipt, prompt]
    )
    assert (GOLDEN / "prompt_of_accepted_id.jsonl").read_bytes() == data
    loaded = decode_session("s_01JNA0000000000000000000S1", data)
    assert loaded.entries == [receipt, prompt]


def test_a_prompt_with_no_run_of_its_own_still_names_its_receipt() -> None:
    receipt, prompt = accepted_and_prompt(run_id="")  # a collected message after the first
    line = orjson.loads(encode_entry(prompt))
    assert line["v"] == 2
    assert line["receipt"] == receipt.id
    assert "run_id" not in line
    data = encode_header(Header(id="s_01JNA0000000000000000000S1", created=T)) + encode_batch(
        [receipt, prompt]
    )
    assert decode_session("s_01JNA0000000000000000000S1", data).entries == [receipt, prompt]


def test_a_prompt_whose_receipt_its_id_says_is_not_earlier_is_corrupt() -> None:
    receipt, prompt = accepted_and_prompt()
    data = encode_header(Header(id="s_01JNA0000000000000000000S1", created=T)) + encode_entry(
        prompt
    )
    with pytest.raises(CorruptError, match=f"receipt {receipt.id}"):
        decode_session("s_01JNA0000000000000000000S1", data)


def test_a_v4_receipt_whose_id_says_no_prompt_is_corrupt() -> None:
    receipt, _ = accepted_and_prompt()
    line = orjson.loads(encode_entry(receipt))
    line["id"] = "e_01JNA0000000000000000000R7"
    data = (
        encode_header(Header(id="s_01JNA0000000000000000000S1", created=T))
        + orjson.dumps(line)
        + b"\n"
    )
    with pytest.raises(CorruptError, match="must end in '-r'"):
        decode_session("s_01JNA0000000000000000000S1", data)


async def test_a_queued_prompt_line_holds_only_its_place_in_the_tree(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    hold = Hold()
    agent = HandAgent(hold.turn("first"), answer("second"))
    session = await Session.create(store, agent)
    first = await session.send(Message.user("the first message"))
    await hold.reached()
    queued = await session.send(Message.user("sent while busy"), policy=Policy.QUEUE, wake=WAKE)
    hold.release.set()
    await first.wait()
    await queued.wait()
    await session.close()
    lines = [
        orjson.loads(line)
        for line in (tmp_path / f"{session.id}.jsonl").read_bytes().split(b"\n")[1:-1]
    ]
    (prompt_line,) = [line for line in lines if line["id"] == queued.id]
    assert sorted(set(prompt_line) - {"more"}) == ["created", "id", "parent", "type", "v"]
    again = await Session.open(store, session.id, agent)
    (prompt,) = [e for e in again.entries() if e.id == queued.id]
    assert isinstance(prompt, MessageEntry)
    assert prompt.run_id == queued.run_id
    assert prompt.receipt == accepted_id(queued.id)
    assert prompt.message == Message.user("sent while busy")
    await again.close()
    await store.close()


async def test_collected_prompts_keep_one_run_when_read_back(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    agent = HandAgent()
    clock = ManualClock()
    options = SessionOptions(collect_window=0.3, clock=clock)
    session = await Session.create(store, agent, options=options)
    turns = [await session.send(Message.user(t), policy=Policy.COLLECT) for t in ("a", "b", "c")]
    clock.advance(0.3)
    for turn in turns:
        await turn.wait(10)
    await session.close()
    again = await Session.open(store, session.id, agent, options=options)
    prompts = [e for e in again.entries() if isinstance(e, MessageEntry) and e.receipt]
    assert [p.message.text() for p in prompts] == ["a", "b", "c"]
    assert [p.run_id for p in prompts] == [f"{session.id}-t1", "", ""]
    await again.close()
    await store.close()


def test_a_v4_receipt_is_an_accepted_one() -> None:
    receipt, _ = accepted_and_prompt()
    line = orjson.loads(encode_entry(receipt))
    assert decode_entry(orjson.dumps(line)) == receipt
    with pytest.raises(WireError, match="a v4 receipt is 'accepted', not 'queued'"):
        decode_entry(orjson.dumps({**line, "status": "queued"}))
    with pytest.raises(WireError, match="'status' is missing"):
        decode_entry(orjson.dumps({**line, "v": 3, "turn": receipt.turn}))


def steer_entries() -> list[ReceiptEntry | MessageEntry]:
    """A steer taken while a turn ran, then delivered into it: its message refers to the receipt."""
    queued = ReceiptEntry(
        id="e_01JNA0000000000000000000Q1",
        parent="e_01JNA0000000000000000000P0",
        created=T,
        status="queued",
        msg=Message.user("---\nsource: web\n---\nand one more thing"),
        run_id="s_01JNA0000000000000000000S1-t1",
        policy="steer",
        wake=WAKE,
    )
    assert queued.msg is not None
    delivered = ReceiptEntry(
        id="e_01JNA0000000000000000000D1",
        parent="e_01JNA0000000000000000000T0",
        created=T,
        status="delivered",
        receipt=queued.id,
        run_id=queued.run_id,
    )
    message = MessageEntry(
        id=injected_id(queued.id),
        parent=delivered.id,
        created=T,
        message=injected_message(queued.msg),
        receipt=queued.id,
    )
    return [queued, delivered, message]


def test_a_steers_message_line_holds_only_its_place_in_the_tree() -> None:
    *_, message = steer_entries()
    line = orjson.loads(encode_entry(message))
    assert line["v"] == 4  # a reader before this shape refuses it, loudly
    assert sorted(line) == ["created", "id", "parent", "type", "v"]
    assert message.message.text() == "---\nsource: web\ninjected: true\n---\nand one more thing"


def test_a_session_reads_a_steers_message_as_its_receipt_marked_injected() -> None:
    entries = steer_entries()
    data = encode_header(Header(id="s_01JNA0000000000000000000S1", created=T)) + encode_batch(
        entries
    )
    assert (GOLDEN / "injected_of_receipt.jsonl").read_bytes() == data
    assert data.count(b"and one more thing") == 1
    assert decode_session("s_01JNA0000000000000000000S1", data).entries == entries


def test_a_v4_message_whose_id_says_no_receipt_is_corrupt() -> None:
    *_, message = steer_entries()
    line = {**orjson.loads(encode_entry(message)), "id": "e_01JNA0000000000000000000M9"}
    with pytest.raises(WireError, match="must end in '-i'"):
        decode_entry(orjson.dumps(line))


def test_a_live_sessions_kept_lines_read_back_whole() -> None:
    entries = [*accepted_and_prompt(), *steer_entries()]
    log = EntryLog()
    for entry in entries:
        log.append(entry)
    log.keep_lines([encode_entry(e)[:-1] for e in entries])
    assert log.lines_kept == len(entries)
    assert list(log) == entries
