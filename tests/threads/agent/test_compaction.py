"""Compaction: when it triggers, where it cuts, what it keeps, and what it never stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from config import validate
from config.models import ModelSettings
from tests.threads.agent.conftest import Runtime, make_runtime
from threads.agent.compaction import NOTICE, NothingToCompactError, compact
from threads.agent.summaries import SUMMARY_PROMPT, Summarizer, SummaryTruncatedError, Writer
from threads.context import SUMMARY_OPEN
from threads.llm.base import ModelRequest, ModelResponse
from threads.llm.errors import ContextOverflowError
from threads.messages import Usage
from threads.store.entries import CompactionEntry, MessageEntry
from threads.testing.scripted import ScriptedModel, call, dispatch, say

SUMMARY = "## Goal\nHelp with orders.\n## Progress\nOrder 12 shipped."


def small_window_config() -> object:
    return validate(
        {
            "models": {
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}},
                "settings": {
                    "scripted/test": {
                        "context_window": 2000,
                        "reserve_tokens": 500,
                        "keep_recent_tokens": 60,
                        "max_output_tokens": 200,
                    }
                },
            },
            "agents": {"default": {"model": "scripted/test"}},
        },
        "test",
    )


@pytest.fixture
async def small(model: ScriptedModel) -> AsyncIterator[Runtime]:
    runtime = await make_runtime(model, small_window_config())  # type: ignore[arg-type]
    yield runtime
    await runtime.manager.close()


async def chat(runtime: Runtime, text: str, answer: str, input_tokens: int = 0) -> None:
    response = dispatch(("caller:user", answer))
    runtime.model.add(replace(response, usage=Usage(input_tokens=input_tokens)))
    await runtime.result(await runtime.say("telegram:1", text))


def one_model(model: ScriptedModel, settings: ModelSettings) -> Summarizer:
    """A summarizer asking one model."""
    return Summarizer([Writer(client=model, model="test", settings=settings)])


def session_of(runtime: Runtime):  # type: ignore[no-untyped-def]
    thread = runtime.manager.thread("telegram:1")
    assert thread is not None
    return thread.session


async def test_a_turn_over_the_threshold_compacts_first_and_the_user_is_told(
    small: Runtime,
) -> None:
    await chat(small, "first question " * 20, "first answer")
    await chat(small, "second question " * 20, "second answer", input_tokens=1600)
    small.model.add(say(SUMMARY))  # the summarizer's answer
    await chat(small, "third question", "third answer")
    session = session_of(small)
    (entry,) = [e for e in session.entries() if isinstance(e, CompactionEntry)]
    assert entry.summary == SUMMARY
    assert entry.reason == "threshold"
    summarizer_request = small.model.requests[2]
    assert SUMMARY_PROMPT in summarizer_request.messages[0].text()
    for section in (
        "Goal",
        "Constraints",
        "Progress",
        "Key decisions",
        "Next steps",
        "Critical context",
    ):
        assert f"## {section}" in summarizer_request.messages[0].text()
    turn_request = small.model.requests[3]
    assert turn_request.messages[0].text().startswith(SUMMARY_OPEN)
    assert "first question" not in " ".join(m.text() for m in turn_request.messages)
    assert NOTICE in small.inbox("telegram:1").messages


async def test_the_cut_is_at_a_user_message_never_between_a_call_and_its_result(
    small: Runtime,
) -> None:
    small.model.add(call("health"), dispatch(("caller:user", "a")))
    await small.result(await small.say("telegram:1", "one " * 40))
    small.model.add(call("health"), dispatch(("caller:user", "b")))
    await small.result(await small.say("telegram:1", "two " * 40))
    small.model.add(say(SUMMARY))
    session = session_of(small)
    client = small.model
    settings = small_window_config().models.settings["scripted/test"]  # type: ignore[attr-defined]
    entry = await compact(session, one_model(client, settings), settings)
    first_kept = next(e for e in session.entries() if e.id == entry.first_kept)
    assert isinstance(first_kept, MessageEntry)
    assert first_kept.message.role == "user"
    context = session.context()
    calls = {c.id for m in context for c in m.tool_calls()}
    results = {r.call_id for m in context for r in m.tool_results()}
    assert calls == results


async def test_nothing_is_deleted_and_uncompact_restores_the_context(small: Runtime) -> None:
    await chat(small, "alpha " * 30, "A")
    await chat(small, "beta " * 30, "B")
    session = session_of(small)
    before = session.context()
    count = len(session.entries())
    small.model.add(say(SUMMARY))
    settings = small_window_config().models.settings["scripted/test"]  # type: ignore[attr-defined]
    await compact(session, one_model(small.model, settings), settings)
    assert len(session.entries()) == count + 1
    assert session.context() != before
    await session.uncompact()
    assert session.context() == before


async def test_a_summary_cut_off_at_the_output_cap_is_never_stored(small: Runtime) -> None:
    await chat(small, "alpha " * 30, "A")
    await chat(small, "beta " * 30, "B")
    session = session_of(small)
    cut = replace(say("## Goal\nHalf a sum"), stop_reason="max_tokens")
    small.model.add(cut, cut)  # asked again once, cut again
    settings = small_window_config().models.settings["scripted/test"]  # type: ignore[attr-defined]
    with pytest.raises(SummaryTruncatedError):
        await compact(session, one_model(small.model, settings), settings)
    assert not [e for e in session.entries() if isinstance(e, CompactionEntry)]


async def test_a_session_with_one_message_has_nothing_to_compact(small: Runtime) -> None:
    await chat(small, "only", "one")
    settings = small_window_config().models.settings["scripted/test"]  # type: ignore[attr-defined]
    with pytest.raises(NothingToCompactError):
        await compact(session_of(small), one_model(small.model, settings), settings)


async def test_an_overflow_triggers_one_compaction_and_one_rerun(small: Runtime) -> None:
    await chat(small, "alpha " * 30, "A")
    await chat(small, "beta " * 30, "B")

    def overflow(request: ModelRequest) -> ModelResponse:
        raise ContextOverflowError("maximum context length exceeded")

    small.model.add(overflow, say(SUMMARY), dispatch(("caller:user", "after compaction")))
    await small.result(await small.say("telegram:1", "gamma"))
    session = session_of(small)
    (entry,) = [e for e in session.entries() if isinstance(e, CompactionEntry)]
    assert entry.reason == "overflow"
    assert small.inbox("telegram:1").messages[-1] == "after compaction"


async def test_a_second_overflow_in_the_same_turn_fails_the_turn(small: Runtime) -> None:
    await chat(small, "alpha " * 30, "A")
    await chat(small, "beta " * 30, "B")

    def overflow(request: ModelRequest) -> ModelResponse:
        raise ContextOverflowError("maximum context length exceeded")

    small.model.add(overflow, say(SUMMARY), overflow)
    result = await small.result(await small.say("telegram:1", "gamma"))
    assert result.stop_reason == "error"
    assert "ContextOverflowError" in result.error
