"""The whole gateway with a store in trouble: it starts, and the terminal says what was not taken."""

from __future__ import annotations

from pathlib import Path

from channels.refusals import LINES, Refused
from config import GatewayConfig
from gateway.app import Gateway
from tests.gateway.conftest import Replies
from tests.threads.conftest import FullDisk, plant
from threads.ids import new_entry_id, new_session_id
from threads.messages import Message
from threads.store.entries import Header, MessageEntry
from threads.store.jsonl import JsonlStore


async def _unreadable_cli_session(sessions: Path) -> str:
    """The terminal's session, with a garbage line a damaged disk left in its middle."""
    store = JsonlStore(sessions)
    header = Header(id=new_session_id(), meta={"key": "cli", "agent": "default"})
    await plant(store, header, [MessageEntry(id=new_entry_id(), message=Message.user("hi"))])
    await store.inject(header.id, b"\x00\x00garbage\n")
    await store.append(header.id, [MessageEntry(id=new_entry_id(), message=Message.user("on"))])
    await store.point("cli", header.id)
    await store.close()
    return header.id


async def test_the_gateway_starts_past_an_unreadable_session_and_its_chat_hears_why(
    config: GatewayConfig,
) -> None:
    broken = await _unreadable_cli_session(config.data_dir / "sessions")
    async with Gateway(config) as gw:  # no recovery record: it looks at every session
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        refusal = await gw.cli.submit("hello?")
        assert refusal is not None
        assert refusal.kind is Refused.UNREADABLE
        assert replies.items == [LINES[Refused.UNREADABLE]]

        (listed,) = (await gw.manager.health())["sessions"]["quarantined"]
        assert listed["session_id"] == broken
        assert listed["where"] == str(config.data_dir / "sessions" / f"{broken}.jsonl")
        assert listed["line"] == 3

        await gw.cli.submit("/new")
        assert await gw.cli.submit("a fresh start") is None
        assert (await replies.wait(3))[-1].endswith("a fresh start")


async def test_the_terminal_says_in_one_line_that_a_message_could_not_be_saved(
    config: GatewayConfig,
) -> None:
    disk = FullDisk()
    store = JsonlStore(config.data_dir / "sessions", pause=disk)
    async with Gateway(config, store=store) as gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        await gw.cli.submit("first")
        await replies.wait()
        await gw.wait_idle()

        disk.fill()
        refusal = await gw.cli.submit("lost in a full disk?")
        assert refusal is not None
        assert refusal.kind is Refused.NOT_SAVED
        assert replies.items[1:] == [LINES[Refused.NOT_SAVED]]

        disk.free()
        assert await gw.cli.submit("again, with room") is None
        assert (await replies.wait(3))[2].endswith("again, with room")
    await store.close()
    reader = JsonlStore(config.data_dir / "sessions")
    session_id = await reader.resolve("cli")
    assert session_id is not None
    stored = (await reader.load(session_id)).entries
    assert not any("lost in a full disk?" in str(e) for e in stored)  # nothing of it was kept
    await reader.close()
