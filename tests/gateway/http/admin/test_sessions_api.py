"""The threads and sessions endpoints through the whole gateway, with the scripted model."""

from __future__ import annotations

import asyncio

from tests.gateway.http.admin.conftest import AdminRig
from tests.gateway.test_thread_ops_cli import Digging
from threads.messages import Usage
from threads.testing.scripted import call, dispatch, say


async def test_threads_lists_each_live_thread_with_its_state(rig: AdminRig) -> None:
    await rig.talk("telegram:1", "hello")
    body = await rig.api.ok("GET", "/threads")
    [thread] = body["threads"]
    assert thread["session_key"] == "telegram:1"
    assert thread["state"] == "idle"
    assert (thread["pending"], thread["current_tool"]) == (0, "")
    assert body["max_concurrent_turns"] == 32


async def test_a_running_turn_shows_its_current_tool_and_elapsed_time(rig: AdminRig) -> None:
    rig.script.add("telegram:1", call("dig"), say("dug"))
    turn = asyncio.ensure_future(rig.talk("telegram:1", "dig"))
    await asyncio.wait_for(Digging.started.wait(), 10)
    body = await rig.api.ok("GET", "/threads")
    [thread] = body["threads"]
    assert thread["state"] == "running"
    assert thread["current_tool"] == "dig"
    assert thread["elapsed_sec"] >= 0
    assert thread["run_id"]
    assert body["running"] == 1
    Digging.release.set()
    await turn


async def test_health_is_seed_000s_report(rig: AdminRig) -> None:
    await rig.talk("telegram:1", "hello")
    body = await rig.api.ok("GET", "/health")
    assert [t["session_key"] for t in body["all_threads"]] == ["telegram:1"]
    assert body["sessions"]["keys"] == 1
    assert "cron" in body
    assert "channels" in body


async def test_sessions_are_filtered_by_kind_and_paged(rig: AdminRig) -> None:
    for key in ("telegram:1", "telegram:group:5", "telegram:group:6", "cron:nightly"):
        await rig.talk(key, "hi")
    everything = await rig.api.ok("GET", "/sessions")
    assert everything["total"] == 4
    first = await rig.api.ok("GET", "/sessions?kind=group&limit=1")
    assert [s["key"] for s in first["sessions"]] == ["telegram:group:6"]
    assert (first["total"], first["next_offset"]) == (2, 1)
    second = await rig.api.ok("GET", "/sessions?kind=group&limit=1&offset=1")
    assert [s["key"] for s in second["sessions"]] == ["telegram:group:5"]
    assert second["next_offset"] is None
    both = await rig.api.ok("GET", "/sessions?kind=cron,other")
    assert {s["key"] for s in both["sessions"]} == {"cron:nightly", "telegram:1"}


async def test_sessions_active_in_the_last_minutes(rig: AdminRig) -> None:
    await rig.talk("telegram:1", "hi")
    recent = await rig.api.ok("GET", "/sessions?active_minutes=5")
    assert [s["key"] for s in recent["sessions"]] == ["telegram:1"]


async def test_a_bad_filter_is_400_naming_the_parameter(rig: AdminRig) -> None:
    status, body = await rig.api.get("/sessions?kind=planets")
    assert status == 400
    assert body["error"]["field"] == "kind"
    assert "planets" in body["error"]["message"]
    status, body = await rig.api.get("/sessions?limit=0")
    assert (status, body["error"]["field"]) == (400, "limit")
    status, body = await rig.api.get("/sessions?colour=red")
    assert (status, body["error"]["field"]) == (400, "colour")
    assert body["error"]["problems"][0]["message"] == "unknown query parameter"
    status, body = await rig.api.get("/sessions?limit=1&limit=2")
    assert (status, body["error"]["field"]) == (400, "limit")


async def test_history_holds_the_transcript_with_tool_calls(rig: AdminRig) -> None:
    rig.script.add("telegram:1", call("check_session", session_key="telegram:1"), say("fine"))
    await rig.talk("telegram:1", "how are you?")
    body = await rig.api.ok("GET", "/sessions/telegram:1/history")
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert body["messages"][1]["content"][0]["name"] == "check_session"
    assert body["messages"][-1]["content"] == [{"type": "text", "text": "fine"}]
    assert body["last_entry"]
    without = await rig.api.ok("GET", "/sessions/telegram:1/history?include_tools=false")
    assert [m["role"] for m in without["messages"]] == ["user", "assistant", "assistant"]


async def test_history_of_an_unknown_session_is_404(rig: AdminRig) -> None:
    status, body = await rig.api.get("/sessions/telegram:404/history")
    assert status == 404
    assert "names no session" in body["error"]["message"]


async def test_check_session_tells_stored_from_missing(rig: AdminRig) -> None:
    await rig.talk("telegram:1", "hi")
    found = await rig.api.ok("GET", "/sessions/telegram:1")
    assert (found["exists"], found["thread_active"], found["thread_state"]) == (True, True, "idle")
    assert found["message_count"] == 2
    missing = await rig.api.ok("GET", "/sessions/telegram:404")
    assert (missing["exists"], missing["thread_active"]) == (False, False)


async def test_an_invalid_session_key_is_400_naming_key(rig: AdminRig) -> None:
    status, body = await rig.api.get("/sessions/a%20b")
    assert status == 400
    assert body["error"]["field"] == "key"


async def test_stop_ends_a_running_turn_and_a_second_stop_is_409(rig: AdminRig) -> None:
    rig.script.add("telegram:1", call("dig"), dispatch(("caller:user", "never")))
    turn = asyncio.ensure_future(rig.talk("telegram:1", "dig"))
    await asyncio.wait_for(Digging.started.wait(), 10)
    body = await rig.api.ok("POST", "/stop", {"key": "telegram:1"})
    assert body["ended"] == ["telegram:1"]
    assert body["text"] == "ended the running turn of telegram:1"
    result = await turn
    assert result.stop_reason == "canceled"
    status, body = await rig.api.post("/stop", {"key": "telegram:1"})
    assert status == 409
    assert "nothing to stop" in body["error"]["message"]


async def test_stop_all_and_drain(rig: AdminRig) -> None:
    rig.script.add("telegram:1", call("dig"), dispatch(("caller:user", "never")))
    turn = asyncio.ensure_future(rig.talk("telegram:1", "dig"))
    await asyncio.wait_for(Digging.started.wait(), 10)
    body = await rig.api.ok("POST", "/stop", {"all": True, "drain": True})
    assert body["ended"] == ["telegram:1"]
    await turn


async def test_stop_needs_one_target(rig: AdminRig) -> None:
    for given in ({}, {"key": "cli", "all": True}):
        status, body = await rig.api.post("/stop", given)
        assert status == 400
        assert body["error"]["field"] == "key"


async def test_stop_of_a_key_with_no_thread_is_409(rig: AdminRig) -> None:
    status, body = await rig.api.post("/stop", {"key": "telegram:404"})
    assert status == 409
    assert "no thread is loaded for session telegram:404" in body["error"]["message"]


async def test_send_policy_is_read_and_set_per_session(rig: AdminRig) -> None:
    await rig.talk("telegram:1", "hi")
    body = await rig.api.ok("GET", "/sessions/telegram:1/send-policy")
    assert (body["policy"], body["source"], body["override"]) == ("allow", "default", None)
    body = await rig.api.ok("PUT", "/sessions/telegram:1/send-policy", {"setting": "deny"})
    assert (body["policy"], body["source"], body["override"]) == ("deny", "session", "deny")
    body = await rig.api.ok("GET", "/sessions/telegram:1/send-policy")
    assert body["policy"] == "deny"
    body = await rig.api.ok("PUT", "/sessions/telegram:1/send-policy", {"setting": "inherit"})
    assert (body["policy"], body["override"]) == ("allow", None)


async def test_a_bad_send_policy_is_400_and_an_unknown_session_404(rig: AdminRig) -> None:
    await rig.talk("telegram:1", "hi")
    status, body = await rig.api.put("/sessions/telegram:1/send-policy", {"setting": "maybe"})
    assert (status, body["error"]["field"]) == (400, "setting")
    status, body = await rig.api.put("/sessions/telegram:404/send-policy", {"setting": "deny"})
    assert status == 404


async def test_bodies_past_the_limit_are_413_and_bad_json_400(rig: AdminRig) -> None:
    status, body = await rig.api.call("POST", "/stop", data=b'{"key": "' + b"x" * 70_000 + b'"}')
    assert status == 413
    assert "at most 65536" in body["error"]["message"]
    status, body = await rig.api.call("POST", "/stop", data=b"{nope")
    assert status == 400
    assert "not JSON" in body["error"]["message"]
    status, body = await rig.api.call("POST", "/stop", data=b"[1, 2]")
    assert (status, body["error"]["message"]) == (400, "the body must be a JSON object")
    status, body = await rig.api.post("/stop", {"key": "cli", "colour": "red"})
    assert (status, body["error"]["field"]) == (400, "colour")


async def test_metrics_count_turns_model_calls_and_tokens(rig: AdminRig) -> None:
    rig.script.add("telegram:1", say("hi", usage=Usage(input_tokens=30, output_tokens=12)))
    await rig.talk("telegram:1", "hello")
    body = await rig.api.ok("GET", "/metrics?minutes=5")
    assert body["minutes"] == 5
    assert len(body["points"]) == 5
    assert sum(p["turns"] for p in body["points"]) == 1
    assert sum(p["model_calls"] for p in body["points"]) == 1
    assert sum(p["tokens"] for p in body["points"]) == 42
    [session] = body["sessions"]
    assert (session["key"], session["total_tokens"]) == ("telegram:1", 42)
    latest = next(p for p in body["points"] if p["model_calls"])
    assert latest["latency_max_ms"] is not None


async def test_a_path_without_query_parameters_refuses_them(rig: AdminRig) -> None:
    status, body = await rig.api.get("/threads?verbose=1")
    assert (status, body["error"]["field"]) == (400, "verbose")


async def test_metrics_refuse_a_span_past_the_hour(rig: AdminRig) -> None:
    status, body = await rig.api.get("/metrics?minutes=61")
    assert (status, body["error"]["field"]) == (400, "minutes")


async def test_the_send_policy_of_an_invalid_key_is_400(rig: AdminRig) -> None:
    status, body = await rig.api.get("/sessions/a%20b/send-policy")
    assert (status, body["error"]["field"]) == (400, "key")
