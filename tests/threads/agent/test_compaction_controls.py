"""Compaction controls: pins, preview then apply, focus, the summary chain and its check,
the summaries bucket, limits on automatic compaction, trims replayed on load, branch summaries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from config import GatewayConfig, validate
from tests.threads.agent.conftest import Runtime, make_runtime
from threads.agent.compaction import (
    NotPinnableError,
    apply,
    pin,
    prepare,
    preview,
    summarize_branch,
)
from threads.agent.loop import summarizer_for
from threads.agent.models import Models
from threads.agent.pin_tool import pin_message_tool
from threads.agent.summaries import CompactionError
from threads.context import SUMMARY_OPEN
from threads.errors import NoEntryError
from threads.messages import Usage
from threads.session import Session
from threads.store.entries import CompactionEntry, MessageEntry, TurnEntry
from threads.testing.scripted import ScriptedModel, call, dispatch, say

SUMMARY = "## Goal\nHelp with orders.\n## Progress\nOrder 12 shipped."
KEY = "telegram:1"


def config(**compaction: Any) -> GatewayConfig:
    return validate(
        {
            "models": {
                "providers": {
                    "scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"},
                    "cheap": {"kind": "openai", "base_url": "http://127.0.0.1:9"},
                },
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
            "compaction": compaction,
        },
        "test",
    )


@pytest.fixture
async def small(model: ScriptedModel) -> AsyncIterator[Runtime]:
    runtime = await make_runtime(model, config(), [pin_message_tool])
    yield runtime
    await runtime.manager.close()


async def chat(runtime: Runtime, text: str, answer: str, input_tokens: int = 0) -> None:
    response = dispatch(("caller:user", answer))
    runtime.model.add(replace(response, usage=Usage(input_tokens=input_tokens)))
    await runtime.result(await runtime.say(KEY, text))


def session_of(runtime: Runtime) -> Session:
    thread = runtime.manager.thread(KEY)
    assert thread is not None
    return thread.session


def compactions(session: Session) -> list[CompactionEntry]:
    return [e for e in session.entries() if isinstance(e, CompactionEntry)]


def user_entry(session: Session, words: str) -> MessageEntry:
    return next(
        e
        for e in session.entries()
        if isinstance(e, MessageEntry) and e.message.role == "user" and words in e.message.text()
    )


async def manual(runtime: Runtime, **options: Any) -> CompactionEntry:
    return await runtime.loop.compact_session(session_of(runtime), **options)


# -- pins


async def test_a_pinned_message_is_shown_raw_after_every_summary_that_cuts_past_it(
    small: Runtime,
) -> None:
    await chat(small, "REQUIREMENT: ship by Friday " + "x " * 40, "noted")
    await chat(small, "beta " * 40, "B")
    session = session_of(small)
    requirement = user_entry(session, "REQUIREMENT")
    await pin(session, requirement.id)
    small.model.add(say(SUMMARY))
    first = await manual(small)
    assert first.pinned == (requirement.id,)
    context = session.context()
    assert context[0].text().startswith(SUMMARY_OPEN)
    assert "REQUIREMENT: ship by Friday" in context[1].text()
    await chat(small, "gamma " * 40, "C")
    await chat(small, "delta " * 40, "D")
    small.model.add(say(SUMMARY))
    second = await manual(small)
    assert second.pinned == (requirement.id,)  # read again at every compaction
    assert "REQUIREMENT" in session.context()[1].text()


async def test_only_a_message_can_be_pinned(small: Runtime) -> None:
    await chat(small, "hello", "hi")
    session = session_of(small)
    turn = next(e for e in session.entries() if isinstance(e, TurnEntry))
    with pytest.raises(NotPinnableError, match="is a turn entry"):
        await pin(session, turn.id)
    with pytest.raises(NoEntryError):
        await pin(session, "e_nowhere")


async def test_the_model_pins_a_message_by_quoting_it(small: Runtime) -> None:
    await chat(small, "the budget is 40k euros, never more", "noted")
    small.model.add(call("pin_message", quote="40k euros"), dispatch(("caller:user", "pinned")))
    await small.result(await small.say(KEY, "remember the budget"))
    session = session_of(small)
    budget = user_entry(session, "40k euros")
    small.model.add(say(SUMMARY))
    await chat(small, "more " * 40, "M")
    assert budget.id in prepare(session, 60).pinned


# -- preview, apply, focus


async def test_a_preview_writes_nothing_and_apply_writes_exactly_the_plan(small: Runtime) -> None:
    await chat(small, "alpha " * 40, "A")
    await chat(small, "beta " * 40, "B")
    session = session_of(small)
    count = len(session.entries())
    plan = prepare(session, 60)
    assert plan.tokens_kept < plan.tokens_before
    assert plan.summarized_entries >= 2
    small.model.add(say(SUMMARY))
    settings = config().models.settings["scripted/test"]
    computed = await preview(session, small.loop.summarizer("scripted/test"), settings)
    assert len(session.entries()) == count  # nothing written by the preview
    assert computed.summary == SUMMARY
    entry = await apply(session, computed)
    assert (entry.first_kept, entry.summary) == (plan.first_kept, SUMMARY)
    assert entry.summarizer_model == {"model": "test"}


async def test_compact_focus_and_the_standing_focus_reach_the_summary_prompt(
    model: ScriptedModel,
) -> None:
    runtime = await make_runtime(model, config(focus="keep every file path"))
    try:
        await chat(runtime, "alpha " * 40, "A")
        await chat(runtime, "beta " * 40, "B")
        model.add(say(SUMMARY))
        await manual(runtime, instructions="focus on the API design")
        prompt = model.requests[-1].messages[0].text()
        assert "Also: keep every file path" in prompt
        assert "Also: focus on the API design" in prompt
    finally:
        await runtime.manager.close()


# -- the summary chain, its check, its cost


async def test_a_rejected_summary_is_retried_then_the_next_model_writes_it() -> None:
    cfg = config(summary_models=["cheap/mini"], required_headings=["Goal"])
    cheap = ScriptedModel(say("it went fine"), say("still fine"))
    own = ScriptedModel(say(SUMMARY, usage=Usage(input_tokens=30, output_tokens=9)))
    models = Models(cfg.models, clients={"cheap": cheap, "scripted": own})
    summarizer = summarizer_for(cfg, models, "scripted/test")
    summary = await summarizer.summarize("user: hello")
    assert (len(cheap.requests), len(own.requests)) == (2, 1)
    assert (summary.text, summary.model) == (SUMMARY, "test")


async def test_no_summary_from_any_model_fails_the_compaction_naming_each_reason() -> None:
    cfg = config(summary_models=["cheap/mini"], min_summary_chars=500)
    cheap = ScriptedModel(say("short"), say("short"))
    own = ScriptedModel(say(SUMMARY), say(SUMMARY))
    summarizer = summarizer_for(
        cfg, Models(cfg.models, clients={"cheap": cheap, "scripted": own}), "scripted/test"
    )
    with pytest.raises(CompactionError, match=r"mini \(attempt 2\): the summary was rejected"):
        await summarizer.summarize("user: hello")


async def test_summary_costs_land_in_their_own_bucket(small: Runtime) -> None:
    await chat(small, "alpha " * 40, "A")
    await chat(small, "beta " * 40, "B")
    small.model.add(say(SUMMARY, usage=Usage(input_tokens=300, output_tokens=40)))
    await manual(small)
    usage = session_of(small).usage()
    assert usage.summaries == Usage(input_tokens=300, output_tokens=40)
    assert usage.turns == Usage()  # the chat turns reported none


# -- limits on automatic compaction


@pytest.mark.parametrize(
    "limits", [{"max_per_session": 1}, {"min_turns_between": 3}], ids=["max", "min-turns"]
)
async def test_automatic_compaction_stops_at_its_limits_and_manual_still_works(
    model: ScriptedModel, limits: dict[str, int]
) -> None:
    runtime = await make_runtime(model, config(**limits))
    try:
        await chat(runtime, "first " * 20, "1")
        await chat(runtime, "second " * 20, "2", input_tokens=1600)
        model.add(say(SUMMARY))
        await chat(runtime, "third " * 20, "3", input_tokens=1600)  # compacts before it runs
        assert [c.reason for c in compactions(session_of(runtime))] == ["threshold"]
        await chat(runtime, "fourth " * 20, "4", input_tokens=1600)  # over again: held back
        assert len(compactions(session_of(runtime))) == 1
        model.add(say(SUMMARY))
        await manual(runtime)
        assert [c.reason for c in compactions(session_of(runtime))] == ["threshold", "manual"]
    finally:
        await runtime.manager.close()


# -- trims


async def test_a_trim_stubs_old_tool_results_summarizes_nothing_and_replays_on_load(
    model: ScriptedModel,
) -> None:
    runtime = await make_runtime(model, config(keep_tool_results=1))
    try:
        for word in ("one", "two"):
            model.add(call("health"), dispatch(("caller:user", word)))
            await runtime.result(await runtime.say(KEY, word))
        model.add(
            replace(dispatch(("caller:user", "3")), usage=Usage(input_tokens=1600)),
        )
        await runtime.result(await runtime.say(KEY, "three"))
        asked = len(model.requests)
        model.add(dispatch(("caller:user", "4")))
        await runtime.result(await runtime.say(KEY, "four"))
        assert len(model.requests) == asked + 1  # the turn only: no summarizer was asked
        session = session_of(runtime)
        (trim,) = compactions(session)
        assert (trim.reason, trim.summary) == ("trim", "")
        stubs = trim.trim["stubs"]
        results = [(p.call_id, p.content) for m in session.context() for p in m.tool_results()]
        old, recent = results[: len(stubs)], results[len(stubs) :]
        assert [s["call_id"] for s in stubs] == [call_id for call_id, _ in old]
        assert all(content.startswith("[cleared tool result ") for _, content in old)
        # The newest result when it ran stays raw, and so does the one turn four added.
        assert len(recent) == 2
        assert not any(content.startswith("[cleared") for _, content in recent)
        stored = [e for e in session.entries() if isinstance(e, MessageEntry)]
        assert not any(
            p.content.startswith("[cleared") for e in stored for p in e.message.tool_results()
        )  # the file keeps every result
        reopened = Session.from_loaded(
            runtime.manager.store, await runtime.manager.store.load(session.id), runtime.loop
        )
        assert reopened.context() == session.context()  # the record is replayed, not the setting
    finally:
        await runtime.manager.close()


# -- branch summaries


async def test_a_branch_left_behind_is_summarized_by_the_summarizer(small: Runtime) -> None:
    await chat(small, "where is order 1234?", "checking")
    session = session_of(small)
    ask = user_entry(session, "order 1234")
    await chat(small, "try the carrier API", "rate-limited")
    small.model.add(say("Tried the carrier API; it rate-limits."))
    text = await summarize_branch(session, ask.id, small.loop.summarizer("scripted/test"))
    assert text == "Tried the carrier API; it rate-limits."
    assert "carrier API" in small.model.requests[-1].messages[0].text()
    await session.branch(ask.id, summary=text)
    assert session.context()[-1].text() == f"{SUMMARY_OPEN}\n{text}\n</summary>"
    assert (
        await summarize_branch(session, session.leaf, small.loop.summarizer("scripted/test")) == ""
    )


async def test_compact_without_a_summary_model_that_answers_leaves_the_session_as_it_was(
    small: Runtime,
) -> None:
    await chat(small, "alpha " * 40, "A")
    await chat(small, "beta " * 40, "B")
    before = session_of(small).context()
    small.model.add(say(""), say(""))
    with pytest.raises(CompactionError, match="it is empty"):
        await manual(small)
    assert session_of(small).context() == before
