"""The process the stopped-chain restart test kills: a chain stopped just before a crash.

Run as ``python -m tests.threads.stop_child <dir>``. Session ``cron:a`` runs a
turn held inside a tool call, a reply of the same exchange chain waits queued
behind it, and the chain is stopped — recorded, and nothing else yet, as if the
process died right after the stop was written. It prints ``STOPPED`` and waits
to be killed.
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
from threads.keys import SessionKey
from threads.manager import ThreadManager
from threads.store import open_store
from threads.testing.scripted import ScriptedModel, call
from threads.wake import SessionCaller, SystemCaller, Wake, WakeSource

KEY = "cron:a"


class Nothing(BaseModel):
    pass


async def main(root: Path) -> None:
    entered = asyncio.Event()

    async def block(args: Nothing, ctx: ToolContext) -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    config = validate(
        {
            "models": {"providers": {"scripted": {"base_url": "http://127.0.0.1:9"}}},
            "agents": {"default": {"model": "scripted/x"}},
        },
        "stop child",
    )
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
    fire = Wake(source=WakeSource.CRON, body="work", caller=SystemCaller(name="cron"))
    await manager.wake(KEY, fire)
    await entered.wait()
    thread = manager.thread(KEY)
    assert thread is not None
    running = thread.session.active_payload
    assert isinstance(running, Wake)
    reply = Wake(
        source=WakeSource.SESSION,
        body="a reply in the same chain",
        caller=SessionCaller(session_key=SessionKey("cron:b")),
        chain=running.chain,
        depth=1,
    )
    await manager.wake(KEY, reply)
    manager.chains.cut(running.chain, 0, "stopped just before a crash")
    print("STOPPED", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
