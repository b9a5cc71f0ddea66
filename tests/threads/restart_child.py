"""The process the restart test kills: a manager over a jsonl store, held mid-turn with wakes queued.

Run as ``python -m tests.threads.restart_child <dir> [<store url>]``. It prints
``MID-TURN`` when its first turn is inside a tool call, then accepts more wakes
(three queued sends and a steer) and prints ``ACCEPTED``; then it waits to be
killed. The store is a jsonl directory under ``<dir>`` unless a URL is given;
then the process claims the node identity in ``<dir>/state`` first, as a
gateway does, so its locks name this node and boot.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from pydantic import BaseModel

from config import validate
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import ToolContext, ToolRegistry, tool
from threads.dispatch import dispatch_tool
from threads.manager import ThreadManager
from threads.node import claim_node
from threads.sinks import Delivery, OutboundMessage
from threads.store import open_store
from threads.store.base import StoreOptions
from threads.testing.scripted import ScriptedModel, call
from threads.wake import UserCaller, Wake, WakeSource

KEY = "telegram:42"


class Endpoint:
    """A channel endpoint by name; this process never gets to deliver to it."""

    def __init__(self, chat: str) -> None:
        self.chat = chat

    @property
    def drops(self) -> bool:
        return False

    def describe(self) -> str:
        return f"Caller is {self.chat} - reply with dispatch(to=caller:user)"

    def to_wire(self) -> dict[str, str]:
        return {"kind": "channel", "channel": "test", "chat": self.chat}

    async def deliver(self, message: OutboundMessage) -> Delivery:
        raise AssertionError("the killed process delivers nothing")


class Nothing(BaseModel):
    pass


def wake(body: str, chat: str, source: WakeSource = WakeSource.API) -> Wake:
    caller = UserCaller(channel=source.value, user_id="7")
    return Wake(source=source, body=body, caller=caller, sink=Endpoint(chat))


async def main(root: Path, url: str) -> None:
    entered = asyncio.Event()

    async def block(args: Nothing, ctx: ToolContext) -> str:
        print("MID-TURN", flush=True)
        entered.set()
        await asyncio.Event().wait()
        return "never"

    config = validate(
        {
            "models": {"providers": {"scripted": {"base_url": "http://127.0.0.1:9"}}},
            "agents": {"default": {"model": "scripted/x"}},
        },
        "restart child",
    )
    if url:
        node = claim_node(root / "state").identity
        store = open_store(url, StoreOptions(node=node))
    else:
        store = open_store(f"jsonl://{root / 'sessions'}")
    tools = ToolRegistry([dispatch_tool, tool("block", "Blocks forever.", Nothing)(block)])
    model = ScriptedModel(call("block"))
    loop = AgentLoop(
        config=config, models=Models(config.models, clients={"scripted": model}), tools=tools
    )
    manager = ThreadManager(
        store=store, agent=loop, config=config, recovery_path=root / "recovery.json"
    )
    loop.services = manager
    await manager.start()
    await manager.wake(KEY, wake("wake 1", "w1"))
    await entered.wait()
    for n in (2, 3, 4):
        await manager.wake(KEY, wake(f"wake {n}", f"w{n}"))
    await manager.wake(KEY, wake("steer 5", "w5", WakeSource.TELEGRAM))
    print("ACCEPTED", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else ""))
