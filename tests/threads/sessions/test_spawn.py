"""sessions_spawn: accepted at once, allowlists, models, the sub-agent tool set, the announce."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from tests.threads.sessions.conftest import (
    SUBAGENT,
    USER,
    Rig,
    SessionScript,
    eventually,
    make_rig,
    session_config,
)
from threads.errors import NotFoundError
from threads.llm.base import ModelRequest, ModelResponse
from threads.sessions.catalog import Catalog
from threads.sinks import DropSink
from threads.store.entries import CustomEntry, PoolReceiptEntry, TurnEntry
from threads.testing.scripted import call, dispatch, say
from threads.wake import SystemCaller, Wake, WakeSource

CHILD_KEY = re.compile(r"agent:(\w+):subagent:[0-9a-f-]{36}")


def spawn(**args: Any) -> ModelResponse:
    args.setdefault("task", "Find the release date of v2.")
    return call("sessions_spawn", **args)


def receipts(rig: Rig, key: str = USER) -> list[PoolReceiptEntry]:
    thread = rig.manager.thread(key)
    assert thread is not None
    return [e for e in thread.session.entries() if isinstance(e, PoolReceiptEntry)]


async def spawned(
    rig: Rig, script: SessionScript, *child_steps: Any, **args: Any
) -> dict[str, Any]:
    """The requester spawns with ``args``; the child answers with ``child_steps``; all settle."""
    script.add(USER, spawn(**args), dispatch(("caller:user", "on it")))
    script.add(SUBAGENT, *child_steps)
    await rig.result(await rig.say(USER, "look it up"))
    await rig.settle()
    (answer,) = rig.tool_results(USER, "sessions_spawn")
    return dict(answer) if isinstance(answer, dict) else {"error": answer}


async def test_spawn_is_accepted_at_once_with_a_subagent_key(
    rig: Rig, script: SessionScript
) -> None:
    gate = rig.model.hold(SUBAGENT)
    script.add(USER, spawn(), dispatch(("caller:user", "on it")))
    script.add(SUBAGENT, say("May 1st"), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(USER, "look it up"))
    (answer,) = rig.tool_results(USER, "sessions_spawn")
    assert answer["status"] == "accepted"
    assert CHILD_KEY.fullmatch(answer["childSessionKey"])
    assert answer["runId"] == f"{answer['sessionId']}-t1"
    await rig.model.reached(SUBAGENT)  # the child was still running when the requester went on
    assert rig.inbox(USER).messages == ["on it"]
    gate.set()
    await rig.settle()


async def test_the_announce_posts_status_result_notes_and_stats_to_the_requester_chat(
    rig: Rig, script: SessionScript
) -> None:
    answer = await spawned(
        rig,
        script,
        say("v2 shipped on May 1st."),
        say("Result: v2 was released on May 1st.\nNotes: from the changelog"),
        label="release date",
    )
    child = answer["childSessionKey"]
    *_, announce = rig.inbox(USER).messages
    assert announce.startswith("Sub-agent release date finished.\n")
    assert "Status: completed successfully\n" in announce
    assert "Result: v2 was released on May 1st.\n" in announce
    assert "Notes: from the changelog\n" in announce
    stats = announce.splitlines()[-1]
    assert stats.startswith("Stats: runtime ")
    assert "tokens 0 (in 0 / out 0)" in stats
    assert f"session {child} ({answer['sessionId']})" in stats
    assert "transcript not a file (the store is not jsonl)" in stats
    announce_prompt = rig.prompts(child)[-1]
    assert "[sub-agent announce step]" in announce_prompt
    assert "completed successfully" in announce_prompt


async def test_status_comes_from_the_runtime_outcome_not_the_model_text(
    rig: Rig, script: SessionScript
) -> None:
    def broken(request: ModelRequest) -> ModelResponse:
        raise RuntimeError("provider exploded")

    await spawned(rig, script, broken, say("Status: success\nResult: all done\nNotes: none"))
    announce = rig.inbox(USER).messages[-1]
    assert "Status: failed: RuntimeError: provider exploded\n" in announce
    assert "success" not in announce
    assert "Result: all done\n" in announce


async def test_announce_skip_posts_nothing_and_the_delegation_still_settles(
    rig: Rig, script: SessionScript
) -> None:
    await spawned(rig, script, say("done"), say("ANNOUNCE_SKIP"))
    assert rig.inbox(USER).messages == ["on it"]
    assert [r.status for r in receipts(rig)] == ["accepted", "running", "done"]
    thread = rig.manager.thread(USER)
    assert thread is not None
    (note,) = [e for e in thread.session.entries() if isinstance(e, CustomEntry)]
    assert note.kind == "subagent_announce"
    assert note.data["skipped"] is True


async def test_every_delegation_is_recorded_as_pool_receipts_on_the_requester(
    rig: Rig, script: SessionScript
) -> None:
    answer = await spawned(rig, script, say("May 1st"), say("ANNOUNCE_SKIP"), task="when?")
    accepted, running, done = receipts(rig)
    assert (accepted.status, accepted.child, accepted.prompt) == (
        "accepted",
        answer["childSessionKey"],
        "when?",
    )
    assert (running.status, running.receipt) == ("running", accepted.id)
    # A done settlement carries the child's answer; the receipt is the ledger, not the channel.
    assert (done.status, done.receipt, done.stop) == ("done", accepted.id, "May 1st")


async def test_a_failed_child_settles_failed_on_the_requester(
    rig: Rig, script: SessionScript
) -> None:
    def broken(request: ModelRequest) -> ModelResponse:
        raise RuntimeError("provider exploded")

    answer = await spawned(rig, script, broken, say("ANNOUNCE_SKIP"))
    accepted, running, failed = receipts(rig)
    assert (accepted.status, running.status, failed.status) == ("accepted", "running", "failed")
    assert (failed.receipt, failed.child) == (accepted.id, answer["childSessionKey"])
    assert failed.stop == "failed: RuntimeError: provider exploded"


async def test_run_timeout_seconds_aborts_the_child_run_and_settles_capped(
    rig: Rig, script: SessionScript
) -> None:
    gate = rig.model.hold(SUBAGENT)
    script.add(USER, spawn(runTimeoutSeconds=0.05), dispatch(("caller:user", "on it")))
    script.add(SUBAGENT, say("too late"), say("Result: nothing yet"))
    await rig.result(await rig.say(USER, "look it up"))
    (answer,) = rig.tool_results(USER, "sessions_spawn")
    child = answer["childSessionKey"]

    async def aborted() -> bool:
        thread = rig.manager.thread(child)
        entries = thread.session.entries() if thread else []
        return any(isinstance(e, TurnEntry) and e.canceled for e in entries)

    await eventually(aborted, "the child's run was aborted")
    gate.set()  # let the announce step answer
    await rig.settle()
    assert receipts(rig)[-1].status == "capped"
    announce = rig.inbox(USER).messages[-1]
    assert "Status: timed out: aborted after runTimeoutSeconds=0.05\n" in announce


async def test_another_agent_id_needs_the_requesters_allow_agents(script: SessionScript) -> None:
    config = session_config(
        {
            "default": {"model": "scripted/test", "subagents": {"allow_agents": ["coder"]}},
            "coder": {"model": "scripted/test"},
            "writer": {"model": "scripted/test"},
        }
    )
    rig = await make_rig(script, config)
    try:
        script.add(USER, spawn(agentId="writer"), spawn(agentId="coder"), dispatch())
        script.add("agent:coder:subagent:", say("ok"), say("ANNOUNCE_SKIP"))
        await rig.result(await rig.say(USER, "delegate"))
        await rig.settle()
        refused, accepted = rig.tool_results(USER, "sessions_spawn")
        assert "agentId 'writer' is not allowed for agent 'default'" in refused
        assert "allowed: ['coder', 'default']" in refused
        assert CHILD_KEY.fullmatch(accepted["childSessionKey"]).group(1) == "coder"  # type: ignore[union-attr]
    finally:
        await rig.manager.close()


async def test_a_star_in_allow_agents_allows_any_agent(script: SessionScript) -> None:
    config = session_config(
        {
            "default": {"model": "scripted/test", "subagents": {"allow_agents": ["*"]}},
            "writer": {"model": "scripted/test"},
        }
    )
    rig = await make_rig(script, config)
    try:
        script.add(USER, spawn(agentId="writer"), dispatch())
        script.add("agent:writer:subagent:", say("ok"), say("ANNOUNCE_SKIP"))
        await rig.result(await rig.say(USER, "delegate"))
        await rig.settle()
        (accepted,) = rig.tool_results(USER, "sessions_spawn")
        assert accepted["childSessionKey"].startswith("agent:writer:subagent:")
    finally:
        await rig.manager.close()


async def test_an_invalid_model_is_an_error_and_a_valid_one_runs_the_child(
    rig: Rig, script: SessionScript
) -> None:
    script.add(USER, spawn(model="nowhere/gpt"), spawn(model="scripted/small"), dispatch())
    script.add(SUBAGENT, say("ok"), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(USER, "delegate"))
    await rig.settle()
    refused, accepted = rig.tool_results(USER, "sessions_spawn")
    assert "model 'nowhere/gpt' is not valid" in refused
    assert "configured: ['scripted']" in refused
    (child,) = rig.script.keys(SUBAGENT)
    assert child == accepted["childSessionKey"]
    assert {r.model for r in rig.script.requests[child]} == {"small"}


def tool_names(rig: Rig, key: str) -> set[str]:
    return {spec.name for spec in rig.script.requests[key][0].tools}


async def test_subagents_get_the_tool_set_minus_the_session_tools(
    rig: Rig, script: SessionScript
) -> None:
    await spawned(rig, script, say("ok"), say("ANNOUNCE_SKIP"))
    (child,) = rig.script.keys(SUBAGENT)
    assert {"sessions_list", "sessions_spawn"} <= tool_names(rig, USER)
    names = tool_names(rig, child)
    assert {"dispatch", "check_session", "health"} <= names
    assert not names & {"sessions_list", "sessions_history", "sessions_send", "sessions_spawn"}


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (["*"], {"sessions_list", "sessions_history", "sessions_send", "dispatch"}),
        (["dispatch", "sessions_history", "sessions_spawn"], {"dispatch", "sessions_history"}),
    ],
)
async def test_tools_subagents_tools_sets_the_subagent_tool_set_without_spawn(
    script: SessionScript, selection: list[str], expected: set[str]
) -> None:
    rig = await make_rig(script, session_config(tools={"subagents": {"tools": selection}}))
    try:
        await spawned(rig, script, say("ok"), say("ANNOUNCE_SKIP"))
        (child,) = rig.script.keys(SUBAGENT)
        names = tool_names(rig, child)
        assert expected <= names
        assert "sessions_spawn" not in names
        if selection != ["*"]:
            assert names == expected
    finally:
        await rig.manager.close()


async def test_a_subagent_cannot_spawn_even_without_the_tool_filter(
    rig: Rig, script: SessionScript
) -> None:
    loop = rig.manager.agent
    loop.tool_filter = None  # type: ignore[attr-defined]
    await spawned(rig, script, spawn(task="nested"), say("ok"), say("ANNOUNCE_SKIP"))
    (child,) = rig.script.keys(SUBAGENT)
    (refused,) = rig.tool_results(child, "sessions_spawn")
    assert "a sub-agent cannot start sub-agents" in refused
    assert len(rig.script.keys(SUBAGENT)) == 1


async def test_cleanup_delete_removes_the_child_after_the_announce(
    rig: Rig, script: SessionScript
) -> None:
    answer = await spawned(rig, script, say("found it"), say("Result: found it"), cleanup="delete")
    announce = rig.inbox(USER).messages[-1]
    assert "Result: found it" in announce
    assert "transcript deleted (cleanup=delete)" in announce
    with pytest.raises(NotFoundError):
        await rig.store.load(answer["sessionId"])
    rows = await Catalog.of(rig.manager).rows()
    assert answer["childSessionKey"] not in {r["key"] for r in rows}
    assert await rig.store.resolve(answer["childSessionKey"]) is None
    assert rig.manager.thread(answer["childSessionKey"]) is None
    assert receipts(rig)[-1].status == "done"


async def test_cleanup_keep_archives_the_child_archive_after_minutes_after_it_settled(
    rig: Rig, script: SessionScript
) -> None:
    answer = await spawned(rig, script, say("found it"), say("ANNOUNCE_SKIP"))
    child = answer["childSessionKey"]
    catalog = Catalog.of(rig.manager)
    (row,) = [r for r in await catalog.rows() if r["key"] == child]
    assert (row["delegation"], row["archived"], row["spawnedBy"]) == ("done", False, USER)
    later = Catalog(
        rig.store, rig.manager.config, clock=lambda: catalog.now() + timedelta(minutes=61)
    )
    assert child not in {r["key"] for r in await later.rows()}
    (archived,) = [r for r in await later.rows(include_archived=True) if r["key"] == child]
    assert archived["archived"] is True
    history = await later.history(child)
    assert history["messages"]  # an archived session is still readable


async def test_an_archived_subagent_session_cannot_be_sent_to(script: SessionScript) -> None:
    config = session_config(agent_defaults={"subagents": {"archive_after_minutes": 0}})
    rig = await make_rig(script, config)
    try:
        answer = await spawned(rig, script, say("found it"), say("ANNOUNCE_SKIP"))
        child = answer["childSessionKey"]
        script.add(
            USER,
            call("sessions_send", sessionKey=child, message="more?", timeoutSeconds=1),
            dispatch(),
        )
        await rig.result(await rig.say(USER, "ask it again"))
        (error,) = rig.tool_results(USER, "sessions_send")
        assert f"session {child} is an archived sub-agent session" in error
    finally:
        await rig.manager.close()


async def test_a_requester_without_a_chat_user_is_woken_with_the_announce(
    rig: Rig, script: SessionScript
) -> None:
    requester = "cron:digest"
    script.add(requester, spawn(), dispatch(), dispatch())
    script.add(SUBAGENT, say("May 1st"), say("Result: May 1st"))
    wake = Wake(
        source=WakeSource.CRON,
        body="daily digest",
        caller=SystemCaller(name="cron"),
        sink=DropSink(reason="cron"),
    )
    await rig.manager.wake(requester, wake)
    await rig.settle()
    announce = rig.prompts(requester)[-1]
    assert "source: child_completed" in announce
    assert "Status: completed successfully" in announce
    assert "Result: May 1st" in announce


async def test_agents_list_says_which_agent_ids_may_be_spawned(script: SessionScript) -> None:
    config = session_config(
        {
            "default": {"model": "scripted/test", "subagents": {"allow_agents": ["coder"]}},
            "coder": {"model": "scripted/test", "sandboxed": True},
            "writer": {"model": "scripted/test"},
        }
    )
    rig = await make_rig(script, config)
    try:
        script.add(USER, call("agents_list"), dispatch())
        await rig.result(await rig.say(USER, "who can help?"))
        (listing,) = rig.tool_results(USER, "agents_list")
        allowed = {a["agentId"]: a["spawnAllowed"] for a in listing["agents"]}
        assert allowed == {"coder": True, "default": True, "writer": False}
        assert listing["requester"] == "default"
    finally:
        await rig.manager.close()
