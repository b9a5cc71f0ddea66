"""The session tools wired into the whole gateway: send policy on channels, /send, recovery."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from channels.base import Inbound, InboundHandler
from channels.cli import CliChannel
from config import GatewayConfig
from gateway.app import Gateway
from tests.gateway.conftest import Replies, make_config
from tests.threads.sessions.conftest import SUBAGENT, GatedModel, SessionScript, eventually
from threads.keys import SessionKey
from threads.sessions.policy import PolicySink
from threads.sinks import Delivery, OutboundMessage
from threads.store.entries import CustomEntry
from threads.testing.scripted import call, dispatch, say


@dataclass
class FakeChannel:
    """A channel adapter at the transport boundary: inbound by hand, outbound recorded."""

    name: str
    sent: list[tuple[str, str]] = field(default_factory=list)
    handler: InboundHandler | None = None

    async def start(self, handler: InboundHandler) -> None:
        self.handler = handler

    async def stop(self) -> None:
        self.handler = None

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        self.sent.append((chat_id, message.text))
        return Delivery(delivered_to=f"{self.name}:{chat_id}")

    async def receive(self, **fields: Any) -> None:
        assert self.handler is not None
        await self.handler(Inbound(channel=self.name, **fields))


# Everyone may talk to the bot here: these tests are about the send policy.
OPEN = {"dm_policy": "open", "group_policy": "open", "require_mention": False}


def scripted_config(tmp_path: Path, **session: Any) -> GatewayConfig:
    return make_config(
        tmp_path,
        models={
            "default": "scripted/test",
            "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}},
        },
        channels={
            "web": {"enabled": False},
            "telegram": {"access": OPEN},
            "discord": {"access": OPEN},
        },
        session=session,
        threads={"close_deadline_seconds": 0},
    )


def blocked_texts(gw: Gateway, key: str) -> list[str]:
    thread = gw.manager.thread(key)
    assert thread is not None
    return [
        e.data["text"]
        for e in thread.session.entries()
        if isinstance(e, CustomEntry) and e.kind == "send_blocked"
    ]


async def test_a_denied_discord_group_gets_no_reply_and_the_refusal_is_recorded(
    tmp_path: Path,
) -> None:
    script = SessionScript()
    discord = FakeChannel("discord")
    config = scripted_config(
        tmp_path,
        send_policy={
            "rules": [{"match": {"channel": "discord", "chat_type": "group"}, "action": "deny"}]
        },
    )
    async with Gateway(
        config, model_clients={"scripted": GatedModel(script)}, channels=[discord], control=False
    ) as gw:
        script.add("discord:channel:555", dispatch(("caller:user", "hello everyone")))
        script.add("discord:9", dispatch(("caller:user", "hello you")))
        await discord.receive(chat_id="channel:555", chat_type="group", user_id="9", text="hi bot")
        await discord.receive(chat_id="9", chat_type="direct", user_id="9", text="hi bot")
        await gw.wait_idle()
        assert discord.sent == [("9", "hello you")]
        assert blocked_texts(gw, "discord:channel:555") == ["hello everyone"]


async def test_an_owner_turns_a_chat_off_and_on_with_send_and_no_turn_runs(
    tmp_path: Path,
) -> None:
    script = SessionScript()
    telegram = FakeChannel("telegram")
    config = scripted_config(tmp_path, owners=["telegram:42"])
    async with Gateway(
        config, model_clients={"scripted": GatedModel(script)}, channels=[telegram], control=False
    ) as gw:
        await telegram.receive(
            chat_id="group:-1001", chat_type="group", user_id="7", text="/send off"
        )
        await telegram.receive(
            chat_id="group:-1001", chat_type="group", user_id="42", text="/send off"
        )
        assert [text for _, text in telegram.sent] == [
            "Only an owner of this bot can use /send.",
            "Send policy for telegram:group:-1001: deny (this session's own setting).",
        ]
        assert script.requests == {}  # answered by the router: no turn ran
        script.add("telegram:group:-1001", dispatch(("caller:user", "quiet please")))
        await telegram.receive(chat_id="group:-1001", chat_type="group", user_id="7", text="hi")
        await gw.wait_idle()
        assert blocked_texts(gw, "telegram:group:-1001") == ["quiet please"]
        await telegram.receive(
            chat_id="group:-1001", chat_type="group", user_id="42", text="/send on"
        )
        script.add("telegram:group:-1001", dispatch(("caller:user", "speaking again")))
        await telegram.receive(chat_id="group:-1001", chat_type="group", user_id="7", text="hi")
        await gw.wait_idle()
        assert telegram.sent[-1] == ("group:-1001", "speaking again")


def test_gateway_chat_answers_send_with_the_new_policy(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["GATEWAY_HTTP__PORT"] = "0"  # a free port: another gateway may hold the default one
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "chat"],
        input="/send off\n/send inherit\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "Send policy for cli: deny (this session's own setting)." in lines
    assert "Send policy for cli: allow, inherited (the default send policy is allow)." in lines
    assert "No model is configured" not in result.stdout  # no turn ran


async def test_sinks_restored_from_stored_wakes_still_obey_the_send_policy(
    tmp_path: Path,
) -> None:
    async with Gateway(scripted_config(tmp_path), control=False) as gw:
        assert gw.send_policy is not None
        await gw.send_policy.set("cli", "deny", create=True)
        for wire in (
            {"kind": "channel", "channel": "cli", "chat": "cli", "key": "cli"},
            {"kind": "channel", "channel": "cli", "chat": "cli"},  # written before keys were kept
        ):
            delivery = await gw.manager.resolve_sink(wire).deliver(OutboundMessage(text="x"))
            assert "the session's own send policy is deny" in delivery.blocked
        user = gw.manager.user_sink(SessionKey("cli"))
        assert isinstance(user, PolicySink)
        assert user.to_wire()["key"] == "cli"


async def test_gateway_subagents_get_no_session_tools(tmp_path: Path) -> None:
    script = SessionScript()
    cli = CliChannel()
    replies = Replies()
    cli.listeners.append(replies)
    config = scripted_config(tmp_path)
    async with Gateway(
        config, model_clients={"scripted": GatedModel(script)}, channels=[cli], control=False
    ) as gw:
        script.add("cli", call("sessions_spawn", task="count"), dispatch(("caller:user", "on it")))
        script.add(SUBAGENT, say("3"), say("Result: 3"))
        await cli.submit("count for me")
        announce = (await replies.wait(2))[-1]
        await gw.wait_idle()
    assert "Status: completed successfully" in announce
    (child,) = script.keys(SUBAGENT)
    names = {spec.name for spec in script.requests[child][0].tools}
    assert "dispatch" in names
    assert not names & {"sessions_list", "sessions_history", "sessions_send", "sessions_spawn"}
    assert "transcript " + str(config.data_dir / "sessions") in announce


async def test_the_gateway_settles_and_announces_open_delegations_when_it_starts(
    tmp_path: Path,
) -> None:
    script = SessionScript()
    config = scripted_config(tmp_path)
    model = GatedModel(script)
    model.hold(SUBAGENT)
    async with Gateway(config, model_clients={"scripted": model}, control=False) as gw:
        assert gw.cli is not None
        script.add("cli", call("sessions_spawn", task="count", label="counter"), dispatch())
        await gw.cli.submit("count for me")
        await model.reached(SUBAGENT)
        # The watcher starts once the delegation is recorded as running, which may come
        # after the child's first model call: wait for it, then it dies with the process.
        await eventually(
            lambda: _true(any(t.get_name().startswith("delegation") for t in gw.manager._tasks)),
            "the delegation's watcher started",
        )
        for task in list(gw.manager._tasks):
            if task.get_name().startswith("delegation"):
                task.cancel()
    cli = CliChannel()
    replies = Replies()
    cli.listeners.append(replies)
    async with Gateway(
        config, model_clients={"scripted": GatedModel(script)}, channels=[cli], control=False
    ):
        (announce,) = await replies.wait()
    assert announce.startswith("Sub-agent counter finished.\nStatus: canceled")


async def _true(value: bool) -> bool:
    return value
