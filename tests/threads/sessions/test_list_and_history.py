"""sessions_list and sessions_history through the real runtime."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.threads.sessions.conftest import USER, Rig, SessionScript, make_rig, session_config
from threads.ids import new_session_id
from threads.sessions.catalog import LIST_MAX, Catalog
from threads.store.entries import Header
from threads.store.jsonl import JsonlStore
from threads.testing.scripted import call, dispatch, say

SEED_ROW_FIELDS = {
    "key",
    "kind",
    "channel",
    "displayName",
    "updatedAt",
    "sessionId",
    "model",
    "contextTokens",
    "totalTokens",
    "thinkingLevel",
    "verboseLevel",
    "systemSent",
    "abortedLastRun",
    "sendPolicy",
    "lastChannel",
    "lastTo",
    "deliveryContext",
    "transcriptPath",
}


async def chat(rig: Rig, key: str, text: str = "hello") -> None:
    rig.script.add(key, dispatch(("caller:user", f"re: {text}")))
    await rig.result(await rig.say(key, text))


def listed(rig: Rig, index: int = -1) -> dict[str, Any]:
    results = rig.tool_results(USER, "sessions_list")
    return dict(results[index])


async def test_rows_have_the_seed_shape_with_nulls_for_what_is_not_known(
    rig: Rig, script: SessionScript
) -> None:
    await chat(rig, "telegram:2")
    script.add(USER, call("sessions_list"), dispatch())
    await rig.result(await rig.say(USER, "list"))
    rows = {row["key"]: row for row in listed(rig)["sessions"]}
    row = rows["telegram:2"]
    assert set(row) >= SEED_ROW_FIELDS
    assert "messages" not in row
    assert row["kind"] == "other"
    assert row["channel"] == "telegram"
    assert row["sessionId"].startswith("s_")
    assert row["model"] == "scripted/test"
    assert row["abortedLastRun"] is False
    assert row["totalTokens"] == 0
    # lastTo is the chat the reply went to (the test inbox names its chat after the key).
    assert (row["lastChannel"], row["lastTo"]) == ("telegram", "telegram:2")
    assert row["deliveryContext"] == {"channel": "telegram", "to": "telegram:2"}
    for unknown in ("thinkingLevel", "verboseLevel", "systemSent", "sendPolicy", "transcriptPath"):
        assert row[unknown] is None, unknown
    assert set(rows) == {"telegram:2", USER}
    assert rows[USER]["updatedAt"] >= row["updatedAt"]


async def test_kinds_filter_the_rows(script: SessionScript) -> None:
    rig = await make_rig(script, session_config(session={"main_key": USER}))
    try:
        await chat(rig, "telegram:group:-1001")
        await chat(rig, "telegram:2")
        script.add(USER, call("sessions_list", kinds=["main", "group"]), dispatch())
        await rig.result(await rig.say(USER, "list"))
        kinds = {row["key"]: row["kind"] for row in listed(rig)["sessions"]}
        assert kinds == {USER: "main", "telegram:group:-1001": "group"}
    finally:
        await rig.manager.close()


async def test_reserved_keys_are_never_listed(rig: Rig, script: SessionScript) -> None:
    for reserved in ("global", "unknown"):
        header = Header(id=new_session_id(), meta={"key": reserved})
        await rig.store.create(header)
        await rig.store.point(reserved, header.id)
    script.add(USER, call("sessions_list"), dispatch())
    await rig.result(await rig.say(USER, "list"))
    assert {row["key"] for row in listed(rig)["sessions"]} == {USER}


async def test_limit_defaults_to_200_and_is_capped_at_500(rig: Rig) -> None:
    for index in range(LIST_MAX + 5):
        header = Header(id=new_session_id(), meta={"key": f"web:{index}"})
        await rig.store.create(header)
        await rig.store.point(f"web:{index}", header.id)
    catalog = Catalog.of(rig.manager)
    assert len(await catalog.rows()) == 200
    assert len(await catalog.rows(limit=10_000)) == LIST_MAX
    assert len(await catalog.rows(limit=3)) == 3


async def test_active_minutes_leaves_out_sessions_not_updated_within_them(
    rig: Rig, script: SessionScript
) -> None:
    await chat(rig, "telegram:2")
    script.add(USER, call("sessions_list", activeMinutes=5), dispatch())
    await rig.result(await rig.say(USER, "list"))
    assert {row["key"] for row in listed(rig)["sessions"]} == {"telegram:2", USER}
    now = Catalog.of(rig.manager).now()
    later = Catalog(rig.store, rig.manager.config, clock=lambda: now + timedelta(minutes=6))
    assert await later.rows(active_minutes=5) == []
    assert len(await later.rows(active_minutes=7)) == 2


async def test_message_limit_includes_the_last_messages_without_tool_results(
    rig: Rig, script: SessionScript
) -> None:
    script.add("telegram:2", call("health"), dispatch(("caller:user", "all fine")))
    await rig.result(await rig.say("telegram:2", "how are you?"))
    script.add(USER, call("sessions_list", messageLimit=3), dispatch())
    await rig.result(await rig.say(USER, "list"))
    (row,) = [r for r in listed(rig)["sessions"] if r["key"] == "telegram:2"]
    roles = [m["role"] for m in row["messages"]]
    assert roles == ["user", "assistant", "assistant"]
    assert "how are you?" in row["messages"][0]["content"][0]["text"]
    assert row["messages"][-1]["content"][0]["name"] == "dispatch"


async def test_history_leaves_out_tool_results_unless_include_tools(
    rig: Rig, script: SessionScript
) -> None:
    script.add("telegram:2", call("health"), dispatch(("caller:user", "all fine")))
    await rig.result(await rig.say("telegram:2", "how are you?"))
    script.add(
        USER,
        call("sessions_history", sessionKey="telegram:2"),
        call("sessions_history", sessionKey="telegram:2", includeTools=True, limit=2),
        dispatch(),
    )
    await rig.result(await rig.say(USER, "read it"))
    plain, with_tools = rig.tool_results(USER, "sessions_history")
    assert [m["role"] for m in plain["messages"]] == ["user", "assistant", "assistant"]
    assert [m["role"] for m in with_tools["messages"]] == ["assistant", "tool"]
    (result,) = with_tools["messages"][-1]["content"]
    assert (result["type"], result["name"]) == ("tool_result", "dispatch")
    assert plain["sessionKey"] == "telegram:2"
    assert plain["messages"][0]["id"].startswith("e_")
    assert plain["messages"][0]["run_id"].endswith("-t1")


async def test_history_accepts_a_session_id(rig: Rig, script: SessionScript) -> None:
    await chat(rig, "telegram:2", "first words")
    session_id = str(await rig.store.resolve("telegram:2"))
    script.add(USER, call("sessions_history", sessionKey=session_id), dispatch())
    await rig.result(await rig.say(USER, "read it"))
    (history,) = rig.tool_results(USER, "sessions_history")
    assert (history["sessionKey"], history["sessionId"]) == ("telegram:2", session_id)
    assert "first words" in history["messages"][0]["content"][0]["text"]


async def test_history_of_an_unknown_key_or_id_is_an_error(rig: Rig, script: SessionScript) -> None:
    script.add(
        USER,
        call("sessions_history", sessionKey="discord:channel:9"),
        call("sessions_history", sessionKey="s_01J000000000000000000000AA"),
        call("sessions_history", sessionKey="unknown"),
        dispatch(),
    )
    await rig.result(await rig.say(USER, "read"))
    key_error, id_error, reserved = rig.tool_results(USER, "sessions_history")
    assert "session key 'discord:channel:9' names no session" in key_error
    assert "session id 's_01J000000000000000000000AA' names no session" in id_error
    assert "'unknown' is a reserved session key" in reserved


async def test_transcript_path_is_the_sessions_file_in_a_jsonl_store(
    script: SessionScript, tmp_path: Path
) -> None:
    root = tmp_path / "sessions"
    config = session_config(store={"url": f"jsonl://{root}"})
    store = JsonlStore(root)
    rig = await make_rig(script, config, store=store)
    try:
        script.add("telegram:2", say("hi"))
        await rig.result(await rig.say("telegram:2", "hello"))
        (row,) = await Catalog.of(rig.manager).rows()
        assert row["transcriptPath"] == str(root / f"{row['sessionId']}.jsonl")
    finally:
        await rig.manager.close()
        await store.close()
