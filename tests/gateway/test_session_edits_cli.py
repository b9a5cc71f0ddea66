"""``gateway sessions pin|compact|uncompact|branch``: with a gateway running, and without one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from config import GatewayConfig, load_config
from gateway.app import Gateway
from tests.gateway.test_sessions_cli import Cli, cli, write_config
from tests.threads.sessions.conftest import GatedModel, SessionScript
from threads.store import open_store
from threads.store.base import StoreOptions
from threads.store.entries import BranchSummaryEntry, CompactionEntry, CustomEntry, Entry
from threads.testing.scripted import dispatch, say

__all__ = ["cli"]  # the fixture, shared with the other sessions CLI tests

SUMMARY = "## Goal\nKeep the orders moving."


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    """The sessions CLI tests' config (its HTTP server on a free port) with a small context window."""
    path = write_config(tmp_path)
    path.write_text(
        path.read_text()
        + '[models.settings."scripted/test"]\n'
        + "context_window = 2000\nreserve_tokens = 500\nkeep_recent_tokens = 30\n",
        encoding="utf-8",
    )
    return path


async def chat(config: GatewayConfig, script: SessionScript, *lines: str) -> None:
    """A terminal chat of ``lines``, each answered."""
    for line in lines:
        script.add("cli", dispatch(("caller:user", f"about {line[:10]}")))
    async with Gateway(config, model_clients={"scripted": GatedModel(script)}) as gw:
        assert gw.cli is not None
        for line in lines:
            await gw.cli.submit(line)
            await gw.wait_idle()


async def entries(config: GatewayConfig) -> list[Entry]:
    store = open_store(config.store.url, StoreOptions(no_lock=True))
    try:
        session_id = await store.resolve("cli")
        assert session_id is not None
        return (await store.load(session_id)).entries
    finally:
        await store.close()


def ok(result: object) -> str:
    assert getattr(result, "exit_code", None) == 0, getattr(result, "output", result)
    return str(getattr(result, "stdout", ""))


async def test_preview_shows_the_cut_and_savings_and_writes_nothing(
    config_path: Path, cli: Cli
) -> None:
    config = load_config(config_path)
    await chat(config, SessionScript(), "alpha " * 40, "beta " * 40, "gamma")
    before = await entries(config)
    shown = await asyncio.to_thread(cli, "compact", "main", "--preview", "--json")
    plan = orjson.loads(ok(shown))
    assert plan["preview"] is True
    assert plan["summarized_messages"] >= 2
    assert plan["tokens_kept"] < plan["tokens_before"]
    assert plan["saves_at_least"] == max(plan["tokens_before"] - plan["tokens_kept"] - 4096, 0)
    assert await entries(config) == before
    words = ok(await asyncio.to_thread(cli, "compact", "main", "--preview"))
    assert f"would summarize {plan['summarized_messages']} messages" in words


async def test_compact_with_a_focus_through_the_gateway_then_uncompact_without_one(
    config_path: Path, cli: Cli
) -> None:
    config = load_config(config_path)
    script = SessionScript()
    await chat(config, script, "alpha " * 40, "beta " * 40, "gamma")
    first = next(e for e in await entries(config) if e.TYPE == "message")
    pinned = ok(await asyncio.to_thread(cli, "pin", "cli", first.id))
    assert pinned.startswith(f"pinned {first.id} in cli")
    model = GatedModel(script)
    script.add("", say(SUMMARY))  # the summarizer's request carries no wake header
    async with Gateway(config, model_clients={"scripted": model}):
        done = ok(await asyncio.to_thread(cli, "compact", "cli", "--focus", "the orders"))
    assert done.startswith("compacted cli: a summary by test now stands for everything before")
    (request,) = script.requests[""]
    assert "Also: the orders" in request.messages[0].text()
    (entry,) = [e for e in await entries(config) if isinstance(e, CompactionEntry)]
    assert (entry.summary, entry.pinned) == (SUMMARY, (first.id,))
    pins = [e for e in await entries(config) if isinstance(e, CustomEntry)]
    assert [p.data for p in pins] == [{"entry": first.id}]
    undone = ok(await asyncio.to_thread(cli, "uncompact", "cli"))
    assert undone == f"undid compaction {entry.id} of cli\n"
    again = await asyncio.to_thread(cli, "uncompact", "cli")
    assert again.exit_code == 1
    assert "holds no entry" in again.output


async def test_branch_with_a_summary_given_made_by_the_model_by_default_or_none(
    config_path: Path, cli: Cli
) -> None:
    config = load_config(config_path)
    script = SessionScript()
    await chat(config, script, "where is order 1234?", "try the carrier API")
    ask = next(e for e in await entries(config) if e.TYPE == "message")
    given = ok(await asyncio.to_thread(cli, "branch", "cli", ask.id, "--summary", "dead end"))
    assert given.startswith(f"cli goes on from {ask.id}; the line left behind is summarized")
    await chat(config, script, "try the warehouse")
    script.add("", say("The warehouse had no record."))
    async with Gateway(config, model_clients={"scripted": GatedModel(script)}):
        made = ok(await asyncio.to_thread(cli, "branch", "cli", ask.id))
    assert made.endswith("The warehouse had no record.\n")
    summaries = [e for e in await entries(config) if isinstance(e, BranchSummaryEntry)]
    assert [s.summary for s in summaries] == ["dead end", "The warehouse had no record."]
    await chat(config, script, "try the post office")
    bare = ok(await asyncio.to_thread(cli, "branch", "cli", ask.id, "--no-summary"))
    assert bare == f"cli goes on from {ask.id}\n"
    summaries = [e for e in await entries(config) if isinstance(e, BranchSummaryEntry)]
    assert len(summaries) == 2
    both = await asyncio.to_thread(cli, "branch", "cli", ask.id, "--summary", "x", "--no-summary")
    assert both.exit_code == 2


async def test_pinning_a_turn_entry_is_refused_in_one_line(config_path: Path, cli: Cli) -> None:
    config = load_config(config_path)
    await chat(config, SessionScript(), "hello")
    turn = next(e for e in await entries(config) if e.TYPE == "turn")
    result = await asyncio.to_thread(cli, "pin", "cli", turn.id)
    assert result.exit_code == 1
    assert "is a turn entry, which puts no message in the context" in result.output
