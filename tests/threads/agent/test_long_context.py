"""A long session's context packs its older messages; the model reads the whole history all the same."""

from __future__ import annotations

from typing import Any

from config import validate
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import ToolRegistry
from threads.dispatch import dispatch_tool
from threads.manager import ThreadManager
from threads.message_list import BLOCK, KEEP
from threads.store.memory import MemoryStore
from threads.testing.fake_openai import FakeOpenAIServer
from threads.wake import UserCaller, Wake, WakeSource

TURNS = (KEEP + 2 * BLOCK) // 2 + 5  # past two packed blocks


def wake(text: str) -> Wake:
    return Wake(source=WakeSource.API, body=text, caller=UserCaller(channel="api", user_id="u"))


async def test_a_long_session_sends_its_whole_history_in_order_before_and_after_a_reopen() -> None:
    async with FakeOpenAIServer(api_key="k") as server:
        config = validate(
            {
                "models": {
                    "providers": {
                        "fake": {"kind": "openai", "base_url": server.base_url, "api_key": "k"}
                    },
                    "settings": {"fake/fake-model": {"stream": False}},
                },
                "agents": {"default": {"model": "fake/fake-model", "tools": []}},
            },
            "test",
        )
        models = Models(config.models)
        store = MemoryStore()
        loop = AgentLoop(config=config, models=models, tools=ToolRegistry([dispatch_tool]))
        manager = ThreadManager(store=store, agent=loop, config=config)
        loop.services = manager
        await manager.start()
        try:
            sent: list[Any] = []  # the conversation as the last request sent it
            for turn in range(TURNS):
                if turn == TURNS - 3:
                    await manager.evict_idle(0)  # the last turns run on the session reopened
                    assert manager.thread("api:long") is None
                _, started = await manager.wake_turn("api:long", wake(f"question {turn} ✓"))
                await started.wait()
                messages = server.requests[-1].body["messages"][1:]  # after the system message
                *history, new = messages
                answered = [{"role": "assistant", "content": sent[-1]["content"]}] if sent else []
                assert history == sent + answered, f"turn {turn}"
                assert new["role"] == "user"
                assert new["content"].endswith(f"\nquestion {turn} ✓")
                sent = messages
            thread = manager.thread("api:long")
            assert thread is not None
            context = [(m.role, m.text()) for m in thread.session.context()]
            assert context == [(m["role"], m["content"]) for m in sent] + [
                ("assistant", sent[-1]["content"])
            ]
        finally:
            await manager.close()
            await models.close()
