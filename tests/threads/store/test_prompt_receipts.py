"""A queued input's message and wake are stored once: its prompt names the receipt that holds them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.threads.conftest import HandAgent, Hold, answer
from threads.errors import CorruptError
from threads.messages import Message
from threads.session import Session
from threads.store.codec import decode_entry, encode_entry, encode_header
from threads.store.entries import Header, MessageEntry, ReceiptEntry
from threads.store.jsonl import JsonlStore
from threads.store.lines import decode_session, encode_batch
from threads.turns import Policy

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
