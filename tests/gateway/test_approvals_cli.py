"""``gateway approvals …`` against a running gateway: list, approve, deny, grants, revoke."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from channels.api.answers import PARKED
from gateway.app import Gateway
from gateway.ops_cli import health_lines, session_lines
from tests.channels.api_rig import api_config, ask
from tests.channels.api_rig import running as api_running
from tests.gateway.conftest import Replies
from tests.gateway.test_approvals_telegram import DEPLOY, RAN
from tests.gateway.test_thread_ops_cli import gateway_cli, scripted_config, write_config
from tests.threads.agent.conftest import KeyedScript
from threads.testing.scripted import ScriptedModel, call, dispatch


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[Gateway, KeyedScript, Replies, Path]]:
    RAN.clear()
    script = KeyedScript()
    config = scripted_config(tmp_path)
    gw = Gateway(config, model_clients={"scripted": ScriptedModel(default=script)}, tools=[DEPLOY])
    async with gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        yield gw, script, replies, write_config(tmp_path, config)


async def park(gw: Gateway, script: KeyedScript, replies: Replies, env: str) -> str:
    script.add("cli", call("deploy", env=env))
    assert gw.cli is not None
    count = len(replies.items)
    await gw.cli.submit(f"deploy to {env}")
    await replies.wait(count + 1)
    assert gw.approvals is not None
    waiting = [w for w in await gw.approvals.waiting() if w.request.args == {"env": env}]
    return waiting[0].request.id


async def test_list_shows_what_waits_and_approve_resumes_it(
    running: tuple[Gateway, KeyedScript, Replies, Path],
) -> None:
    gw, script, replies, path = running
    request_id = await park(gw, script, replies, "eu")
    code, out, err = await gateway_cli(path, "approvals", "list")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "1 tool call wait for a decision"
    assert lines[1] == f"{request_id}  deploy in cli, asked by local"
    assert lines[2] == '    {"env":"eu"}'
    assert lines[3].startswith("    waiting since ")
    assert ", denied if undecided by " in lines[3]
    code, out, _ = await gateway_cli(path, "approvals", "list", "--json")
    (listed,) = orjson.loads(out)["requests"]
    assert (listed["id"], listed["tool"], listed["args"]) == (request_id, "deploy", {"env": "eu"})

    script.add("cli", dispatch(("caller:user", "deployed")))
    code, out, err = await gateway_cli(path, "approvals", "approve", request_id[:10])
    assert code == 0, err
    assert out == f"approved {request_id}: deploy runs in cli\n"
    await gw.wait_idle()
    assert RAN == ["eu"]
    told = replies.items[-2:]  # the chat hears the decision and the resumed answer, in any order
    assert "deployed" in told
    assert any(t.startswith("✅ Approved by cli") for t in told)
    code, out, _ = await gateway_cli(path, "approvals", "list")
    assert out == "nothing waits for a decision\n"


async def test_deny_with_a_reason_is_what_the_model_reads(
    running: tuple[Gateway, KeyedScript, Replies, Path],
) -> None:
    gw, script, replies, path = running
    request_id = await park(gw, script, replies, "eu")
    script.add("cli", dispatch(("caller:user", "ok")))
    code, out, err = await gateway_cli(
        path, "approvals", "deny", request_id, "--reason", "freeze week"
    )
    assert code == 0, err
    assert out == f"denied {request_id}: deploy in cli is not run (freeze week)\n"
    await gw.wait_idle()
    (result,) = script.requests["cli"][-1].messages[-1].tool_results()
    assert result.content == "DENIED: freeze week"
    assert RAN == []
    thread = gw.manager.thread("cli")
    assert thread is not None
    decision = [e for e in thread.session.approvals.audit() if e.TYPE == "approval_decision"]
    assert decision[0].via == "cli"  # type: ignore[attr-defined]


async def test_always_from_the_cli_mints_a_grant_that_grants_lists_and_revoke_ends(
    running: tuple[Gateway, KeyedScript, Replies, Path],
) -> None:
    gw, script, replies, path = running
    request_id = await park(gw, script, replies, "eu")
    script.add("cli", dispatch(("caller:user", "deployed")))
    code, out, err = await gateway_cli(path, "approvals", "approve", request_id, "--always")
    assert code == 0, err
    assert out.endswith("; the same call now runs unasked there\n")
    await gw.wait_idle()
    code, out, err = await gateway_cli(path, "approvals", "grants", "--json")
    assert code == 0, err
    (grant,) = orjson.loads(out)["grants"]
    assert (grant["key"], grant["label"]) == ("cli", "deploy")
    assert grant["args"] == [{"pointer": "", "equals": {"env": "eu"}}]
    code, out, _ = await gateway_cli(path, "approvals", "grants")
    assert out.splitlines()[0] == f"{grant['id']}  deploy in cli"
    code, out, err = await gateway_cli(path, "approvals", "revoke", grant["id"])
    assert code == 0, err
    assert out == f"revoked {grant['id']}: deploy in cli asks again\n"
    code, out, _ = await gateway_cli(path, "approvals", "grants")
    assert out == "no grants (Always on an approval makes one)\n"


async def test_an_unknown_request_is_one_line_naming_it(
    running: tuple[Gateway, KeyedScript, Replies, Path],
) -> None:
    _gw, _script, _replies, path = running
    code, out, err = await gateway_cli(path, "approvals", "approve", "e_nope")
    assert code == 1
    assert out == ""
    assert err == (
        "error: approval request e_nope is not pending: no pending request has this id "
        "(decided, expired or never made)\n"
    )


async def test_with_no_gateway_running_list_says_so(tmp_path: Path) -> None:
    path = write_config(tmp_path, scripted_config(tmp_path))
    code, _out, err = await gateway_cli(path, "approvals", "list")
    assert code == 1
    assert err.startswith("error: no gateway is running")


def test_check_session_and_health_text_name_the_call_that_waits() -> None:
    request = {"id": "e_01ABC", "tool": "deploy", "since": "2026-06-01T12:00:00+00:00"}
    lines = session_lines(
        {
            "session_key": "telegram:7",
            "exists": True,
            "thread_active": True,
            "thread_state": "pending",
            "thread_awaiting_approval": [request],
        }
    )
    assert "  state           pending, waiting for approval of deploy (e_01ABC)" in lines
    assert not [line for line in lines if "thread_awaiting_approval" in line]
    text = health_lines(
        {
            "threads": {"active": 1, "running": 0, "pending": 1},
            "all_threads": [
                {"session_key": "telegram:7", "state": "pending", "awaiting_approval": [request]}
            ],
            "approvals": {
                "pending": 1,
                "requests": [
                    {
                        "id": "e_01ABC",
                        "tool": "deploy",
                        "session_key": "telegram:7",
                        "expiry": "2026-06-02T12:00:00+00:00",
                    }
                ],
            },
        }
    )
    assert any("awaiting approval of deploy (e_01ABC)" in line for line in text)
    assert "approvals: 1 waiting for a decision" in text
    assert "  e_01ABC  deploy in telegram:7, denied if undecided by 2026-06-02 12:00:00 UTC" in text


async def test_an_api_request_whose_turn_parks_is_answered_that_it_waits(tmp_path: Path) -> None:
    RAN.clear()
    async with api_running(api_config(tmp_path), tools=[DEPLOY]) as api:
        api.script.add("api:alice", call("deploy", env="eu"))
        status, body, _ = await api.post(ask("deploy"), headers={"X-Session-Key": "api:alice"})
        assert status == 200
        assert body["choices"][0]["message"]["content"] == PARKED
        assert body["choices"][0]["finish_reason"] == "stop"
        assert api.gateway.approvals is not None
        (waiting,) = await api.gateway.approvals.waiting()
        assert waiting.key == "api:alice"
        assert RAN == []
