"""Two gateways on one Redis, in one process: ownership, forwarding, takeover and fencing.

Each gateway is a whole :class:`Gateway` with a chat double at the transport
boundary and the offline echo model. Leases lapse on the test's lease clock
(the nodes tick when the test says), so nothing here waits for time to pass.
The subprocess tests in ``tests/e2e/test_scaleout.py`` kill real processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channels.testing import FakeDiscord, FakeTelegram
from config import GatewayConfig, validate
from gateway.app import Gateway
from tests.gateway.chat_double import ChatDouble
from tests.gateway.telegram_rig import telegram_config
from tests.threads.cluster.conftest import REDIS_URL, LeaseClock, lease_clock, space

__all__ = ["lease_clock", "space"]  # the fixtures this module uses from the cluster tests
from threads.cluster.owner import ManagerOwner
from threads.keys import SessionKey
from threads.store.entries import MessageEntry, TurnEntry
from threads.testing.scripted import ScriptedModel

LEASE = 15.0
DEADLINE = 10.0


@dataclass
class Node:
    gateway: Gateway
    chat: ChatDouble
    model: ScriptedModel

    @property
    def id(self) -> str:
        assert self.gateway.member is not None
        return self.gateway.member.node


def node_config(
    tmp_path: Path, name: str, space: str, lease: float = LEASE, **more: Any
) -> GatewayConfig:
    """Node ``name``'s configuration: a data directory of its own, the shared Redis prefix."""
    base: dict[str, Any] = {
        "data_dir": str(tmp_path / name),
        "models": {"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        "agents": {"default": {"model": "scripted/test"}},
        "store": {"url": f"{REDIS_URL}?cron_prefix={space}cron:"},
        "http": {"port": 0},
        "node_id": name,
        "cluster": {"lease_seconds": lease},
        "channels": {
            "web": {"enabled": False},
            "cli": {"enabled": False},
            "telegram": {"access": {"dm_policy": "open"}},
        },
    }
    for section, table in more.items():
        base[section] = {**base.get(section, {}), **table}
    return validate(base, "test")


@pytest.fixture
def lease() -> float:
    """The nodes' lease time: it does not pass by itself (the lease clock moves when told)."""
    return LEASE


@pytest.fixture
async def nodes(
    tmp_path: Path, space: str, lease_clock: LeaseClock, lease: float, api: dict[str, Any]
) -> AsyncIterator[tuple[Node, Node]]:
    started: list[Node] = []
    try:
        for name in ("a", "b"):
            chat, model = ChatDouble("telegram"), ScriptedModel()
            gateway = Gateway(
                node_config(tmp_path, name, space, lease, **api),
                model_clients={"scripted": model},
                channels=[chat],
                control=False,
                lease_clock=lease_clock,
            )
            await gateway.start()
            started.append(Node(gateway, chat, model))
        yield started[0], started[1]
    finally:
        for node in reversed(started):
            await node.gateway.close()


def said(chat: ChatDouble, chat_id: str) -> list[str]:
    """What the echo model answered in a chat: the message's own text, after its header."""
    return [text.rsplit("\n", 1)[-1] for text in chat.to(chat_id)]


async def entries_of(node: Node, key: str) -> list[object]:
    store = node.gateway.store
    session = await store.resolve(SessionKey(key))
    assert session is not None
    return list((await store.load(session)).entries)


async def test_a_message_for_a_key_another_node_owns_is_run_and_answered_by_the_owner(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    await a.chat.push(chat_id="1", user_id="1", text="first")
    await a.chat.wait(1)
    await b.chat.push(chat_id="1", user_id="1", text="second")
    await a.chat.wait(2)
    await a.gateway.wait_idle()
    assert said(a.chat, "1") == ["first", "second"]
    assert b.chat.sent == []
    assert b.gateway.manager.thread("telegram:1") is None
    turns = [e for e in await entries_of(a, "telegram:1") if isinstance(e, TurnEntry)]
    assert len(turns) == 2


async def test_health_names_the_node_and_the_keys_each_node_owns(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    await b.chat.push(chat_id="7", user_id="7", text="hi")
    await b.chat.wait(1)
    health = await a.gateway.manager.health()
    assert health["node"]["id"] == "a"
    owned = {n["node"]: n["keys"] for n in health["cluster"]["nodes"]}
    assert owned["b"] == ["telegram:7"]
    assert {n["node"] for n in health["cluster"]["nodes"] if n["alive"]} == {"a", "b"}


async def test_keys_of_a_node_that_stopped_renewing_are_taken_over_and_its_writes_are_refused(
    nodes: tuple[Node, Node], lease_clock: LeaseClock
) -> None:
    a, b = nodes
    await a.chat.push(chat_id="3", user_id="3", text="before")
    await a.chat.wait(1)
    await a.gateway.wait_idle()
    # a stalls (no tick renews its leases) past the lease; b ticks and takes over.
    lease_clock.advance(LEASE)
    assert b.gateway.member is not None
    await b.gateway.member.tick()
    await b.chat.push(chat_id="3", user_id="3", text="after")
    await b.chat.wait(1)
    assert said(b.chat, "3") == ["after"]
    assert a.gateway.member is not None
    await a.gateway.member.tick()  # a learns its lease is gone and drops the thread
    assert a.gateway.manager.thread("telegram:3") is None
    texts = [
        e.message.content[0]
        for e in await entries_of(b, "telegram:3")
        if isinstance(e, MessageEntry) and e.message.role == "assistant"
    ]
    assert len(texts) == 2


async def test_a_turn_cut_off_by_a_lapsed_lease_is_recorded_canceled_and_resumed_by_the_new_owner(
    nodes: tuple[Node, Node], lease_clock: LeaseClock
) -> None:
    a, b = nodes
    a.model.gate = asyncio.Event()
    await a.chat.push(chat_id="4", user_id="4", text="slow")
    async with asyncio.timeout(DEADLINE):
        await a.model.called.wait()
    lease_clock.advance(LEASE)
    assert b.gateway.member is not None
    await b.gateway.member.tick()  # b finds the lapsed key, records the cut turn, resumes it
    await b.chat.wait(1)
    async with asyncio.timeout(DEADLINE):
        await b.gateway.wait_idle()
    a.model.gate.set()  # a's model answers at last: its write is refused (fenced)
    assert a.gateway.member is not None
    await a.gateway.member.tick()
    async with asyncio.timeout(DEADLINE):
        await a.gateway.wait_idle()
    entries = await entries_of(b, "telegram:4")
    turns = [e for e in entries if isinstance(e, TurnEntry)]
    assert [t.canceled for t in turns] == [True, False]
    assert "restarted while your previous turn was running" in b.chat.to("4")[0]


async def test_a_node_whose_lease_lapsed_mid_turn_sends_no_reply(
    nodes: tuple[Node, Node], lease_clock: LeaseClock
) -> None:
    """Its answer's ledger record is a session write, refused by the fence: nothing is sent."""
    a, b = nodes
    a.model.gate = asyncio.Event()
    await a.chat.push(chat_id="6", user_id="6", text="slow")
    async with asyncio.timeout(DEADLINE):
        await a.model.called.wait()
    lease_clock.advance(LEASE)
    assert b.gateway.member is not None
    await b.gateway.member.tick()
    await b.chat.wait(1)
    a.model.gate.set()
    async with asyncio.timeout(DEADLINE):
        await a.gateway.wait_idle()
    assert a.chat.to("6") == []


async def test_wakes_sent_to_a_dead_nodes_inbox_are_taken_over_and_run_once(
    nodes: tuple[Node, Node], lease_clock: LeaseClock
) -> None:
    a, b = nodes
    await a.chat.push(chat_id="5", user_id="5", text="own it")
    await a.chat.wait(1)
    await a.gateway.wait_idle()
    assert a.gateway.member is not None
    await a.gateway.member.stop_reading()  # a hears nothing more: its inbox fills up
    for n in range(3):
        await b.chat.push(chat_id="5", user_id="5", text=f"m{n}")
    lease_clock.advance(LEASE)
    assert b.gateway.member is not None
    await b.gateway.member.tick()
    await b.chat.wait(3)
    async with asyncio.timeout(DEADLINE):
        await b.gateway.wait_idle()
    assert said(b.chat, "5") == ["m0", "m1", "m2"]
    assert await b.gateway.member.streams.backlog("a") == 0


@pytest.mark.parametrize("lease", [0.5])  # what a dead node read is claimed once idle half that
async def test_wakes_a_dead_node_read_but_never_acknowledged_are_claimed_and_run_once(
    nodes: tuple[Node, Node], lease_clock: LeaseClock, lease: float
) -> None:
    a, b = nodes
    assert a.gateway.member is not None
    assert b.gateway.member is not None
    await a.chat.push(chat_id="8", user_id="8", text="own it")
    await a.chat.wait(1)
    await a.gateway.member.stop_reading()
    for n in range(2):
        await b.chat.push(chat_id="8", user_id="8", text=f"p{n}")
    read = await a.gateway.member.streams.read(block_ms=None)
    assert [e.forward.key for e in read] == ["telegram:8", "telegram:8"]
    # a makes the first durable and dies before it acknowledges either.
    await ManagerOwner(a.gateway.manager).receive(read[0].forward, read[0].marker)
    async with asyncio.timeout(DEADLINE):
        await a.gateway.wait_idle()
    lease_clock.advance(lease)
    async with asyncio.timeout(DEADLINE):
        while await b.gateway.member.streams.backlog("a"):
            await b.gateway.member.tick()  # XAUTOCLAIM takes a's entries once they are idle
            await asyncio.sleep(lease / 10)
    await b.chat.wait(1)
    async with asyncio.timeout(DEADLINE):
        await b.gateway.wait_idle()
    assert said(a.chat, "8") == ["own it", "p0"]
    assert said(b.chat, "8") == ["p1"]
    prompts = [
        e.message.text().rsplit("\n", 1)[-1]
        for e in await entries_of(b, "telegram:8")
        if isinstance(e, MessageEntry) and e.run_id and e.message.role == "user"
    ]
    assert prompts == ["own it", "p0", "p1"]


@pytest.fixture
def api() -> dict[str, Any]:
    """More configuration for every node (the API channel, in the API test)."""
    return {}


@pytest.mark.parametrize(
    "api", [{"channels": {"web": {"enabled": False}, "cli": {"enabled": False},
                          "api": {"enabled": True}}}]
)  # fmt: skip
async def test_an_api_request_to_a_node_that_does_not_own_the_session_gets_the_owners_answer(
    nodes: tuple[Node, Node], api: dict[str, Any]
) -> None:
    a, b = nodes
    headers = {"X-Session-Key": "api:notes"}
    body = {"model": "default", "messages": [{"role": "user", "content": "remember 7"}]}
    async with aiohttp.ClientSession() as http:
        urls = [f"{n.gateway.http.url}v1/chat/completions" for n in (a, b) if n.gateway.http]
        async with http.post(urls[0], json=body, headers=headers) as answer:
            assert answer.status == 200, await answer.text()
            first = await answer.json()
        body["messages"] = [{"role": "user", "content": "what was it?"}]
        async with http.post(urls[1], json=body, headers=headers) as answer:
            assert answer.status == 200, await answer.text()
            second = await answer.json()
    assert first["choices"][0]["message"]["content"].endswith("remember 7")
    assert second["choices"][0]["message"]["content"].endswith("what was it?")
    assert b.gateway.manager.thread("api:notes") is None, "a runs the session; b relayed"
    assert len(a.model.requests) == 2


async def test_stop_and_new_sent_to_a_node_that_does_not_own_the_chat_act_on_the_owner(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    a.model.gate = asyncio.Event()
    await a.chat.push(chat_id="9", user_id="9", text="long")
    async with asyncio.timeout(DEADLINE):
        await a.model.called.wait()
    await b.chat.push(chat_id="9", user_id="9", text="/stop")
    assert b.chat.to("9") == ["Stopped the running turn and what it started."]
    async with asyncio.timeout(DEADLINE):
        await a.gateway.wait_idle()
    turns = [e for e in await entries_of(a, "telegram:9") if isinstance(e, TurnEntry)]
    assert [t.canceled for t in turns] == [True]
    before = await a.gateway.store.resolve(SessionKey("telegram:9"))
    await b.chat.push(chat_id="9", user_id="9", text="/new")
    assert b.chat.to("9")[-1].startswith("Started a new conversation")
    after = await a.gateway.store.resolve(SessionKey("telegram:9"))
    assert after != before
    thread = a.gateway.manager.thread("telegram:9")
    assert thread is None or thread.session.id == after


async def test_cron_and_each_bots_updates_move_to_another_node_when_their_leader_stops_renewing(
    tmp_path: Path, space: str, lease_clock: LeaseClock
) -> None:
    async with FakeTelegram() as telegram, FakeDiscord() as discord:
        channels = {
            "web": {"enabled": False},
            "cli": {"enabled": False},
            "telegram": telegram_config(tmp_path, telegram),
            "discord": {"enabled": True, "token": discord.token, "api_base": discord.api_url,
                        "gateway_url": discord.ws_url, "ready_timeout_seconds": 0.05},
        }  # fmt: skip
        started: list[Gateway] = []
        try:
            for name in ("a", "b"):
                config = node_config(tmp_path, name, space, channels=channels)
                gateway = Gateway(config, control=False, lease_clock=lease_clock)
                await gateway.start()
                started.append(gateway)

            def leading(gw: Gateway) -> list[str]:
                bots = [gw.channels["telegram"], gw.channels["discord"]]
                parts = [c.name for c in bots if getattr(c, "receiving", False)]
                parts += ["cron"] if gw.cron is not None and gw.cron.running else []
                return parts + (["heartbeats"] if gw.heartbeats and gw.heartbeats.running else [])

            first, second = started
            assert leading(first) == ["telegram", "discord", "cron", "heartbeats"]
            assert leading(second) == []
            lease_clock.advance(LEASE)  # first stalls: it renews nothing
            assert second.member is not None
            await second.member.tick()
            assert leading(second) == ["telegram", "discord", "cron", "heartbeats"]
            assert first.member is not None
            await first.member.tick()  # first learns it lost the leases: it stops all four
            assert leading(first) == []
            await discord.wait_for_ready()
            await telegram.wait_for_poll()
        finally:
            for gateway in reversed(started):
                await gateway.close()


async def test_a_node_that_stops_hands_the_wakes_left_in_its_inbox_to_another_node(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    assert a.gateway.member is not None
    await a.chat.push(chat_id="10", user_id="10", text="own it")
    await a.chat.wait(1)
    await a.gateway.member.stop_reading()
    for n in range(2):
        await b.chat.push(chat_id="10", user_id="10", text=f"late {n}")
    await a.gateway.close()
    await b.chat.wait(2)
    async with asyncio.timeout(DEADLINE):
        await b.gateway.wait_idle()
    assert said(b.chat, "10") == ["late 0", "late 1"]
    assert b.gateway.member is not None
    assert await b.gateway.member.streams.backlog("a") == 0


async def test_a_send_policy_set_on_a_node_that_does_not_own_the_session_is_set_by_the_owner(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    await a.chat.push(chat_id="11", user_id="11", text="hi")
    await a.chat.wait(1)
    assert b.gateway.send_policy is not None
    decision = await b.gateway.send_policy.set("telegram:11", "deny")
    assert not decision.allowed
    assert a.gateway.send_policy is not None
    assert not (await a.gateway.send_policy.check("telegram:11")).allowed
    assert b.gateway.manager.thread("telegram:11") is None
