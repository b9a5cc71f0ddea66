"""A long session's context packs its older messages; the model reads the whole history all the same."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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


def said(body: Any) -> list[str]:
    """The last line of each message a chat request holds: a prompt's body, after its header."""
    return [str(m["content"]).rsplit("\n", 1)[-1] for m in body["messages"]]


def wake(text: str) -> Wake:
    return Wake(source=WakeSource.API, body=text, caller=UserCaller(channel="api", user_id="u"))


@asynccontextmanager
async def gateway(server: FakeOpenAIServer) -> AsyncIterator[tuple[ThreadManager, Models]]:
    """A thread manager whose agent talks to ``server`` through the OpenAI client."""
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
    loop = AgentLoop(config=config, models=models, tools=ToolRegistry([dispatch_tool]))
    manager = ThreadManager(store=MemoryStore(), agent=loop, config=config)
    loop.services = manager
    await manager.start()
    try:
        yield manager, models
    finally:
        await manager.close()
        await models.close()


async def test_a_long_session_sends_its_whole_history_in_order_before_and_after_a_reopen() -> None:
    async with FakeOpenAIServer(api_key="k") as server, gateway(server) as (manager, _):
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


async def test_an_evicted_sessions_encoded_conversation_is_let_go_by_the_model_client() -> None:
    async with FakeOpenAIServer(api_key="k") as server, gateway(server) as (manager, models):
        client, _, _ = models.resolve("fake/fake-model")
        kept = client._conversations  # type: ignore[attr-defined]  # what the client holds
        for turn in range(3):
            _, started = await manager.wake_turn("api:one", wake(f"question {turn}"))
            await started.wait()
        assert kept.kept_bytes > 0
        assert await manager.evict_idle(0) == 1
        gc.collect()  # an evicted session is freed by the collector (decision perf-41)
        assert kept.kept_bytes == 0
        _, started = await manager.wake_turn("api:one", wake("question 3"))
        await started.wait()
        assert said(server.requests[-1].body)[-2:] == ["question 2", "question 3"]
        assert kept.kept_bytes > 0
